package dynamostore

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
	"github.com/edgelimit/edgelimit/kvbucket"
)

// The item: kvbucket's Part and Update in the SDK's types, and back. This
// file is the conversion; store.go decides which UpdateItem to send.

// Attribute names of a bucket item, next to the table's pk and expires_at
// (ddbcore.AttrPK, ddbcore.AttrExpiresAt).
const (
	// AttrTAT holds Part.TAT (bucket units, up to 38 digits).
	AttrTAT = "tat"
	// AttrSpent holds Part.Spent (tokens).
	AttrSpent = "spent"
	// AttrVersion holds Part.Version.
	AttrVersion = "ver"
	// AttrGrantLeft and AttrGrantUntil hold Part.GrantLeft (tokens) and
	// Part.GrantUntil (Unix nanoseconds): an operator's grant.
	AttrGrantLeft  = "gl"
	AttrGrantUntil = "gu"
	// AttrWritersPrefix starts the attribute of each epoch's writers: a
	// number set named "w<epoch>".
	AttrWritersPrefix = "w"
)

// ItemPrefix starts the partition key of every kvbucket item:
// "kv#<policy>#<keyhash>", and "kv#<policy>#<keyhash>@<region>" for each
// region's part when Config.Regions is set.
const ItemPrefix = "kv#"

// updateInput is the UpdateItem of u: the raise form (SET the TAT to its
// floor plus the addition, if it is below the floor) or the add form (ADD,
// if it is not), each with u's fit condition.
func (d *conn) updateInput(id string, u wire.Update, raise bool) *dynamodb.UpdateItemInput {
	ttl := min(max(u.TTL, 0), maxTTL)
	if len(d.regions) > 1 {
		// A region's part must outlive the others' spending it was raised
		// against (see the package documentation, Accuracy).
		ttl = max(ttl, MinRegionTTL)
	}
	exp := d.now().Add(ttl + time.Second - 1).Unix()
	names := map[string]string{"#t": AttrTAT, "#s": AttrSpent, "#x": ddbcore.AttrExpiresAt, "#v": AttrVersion}
	values := map[string]types.AttributeValue{
		":ds":  num(u.Spent),
		":exp": num(exp),
		":one": num(1),
		":vb":  num(d.now().UnixNano()),
	}
	var set, add, cond []string
	set = append(set, "#x = :exp", "#v = if_not_exists(#v, :vb) + :one")
	if raise {
		values[":tr"] = wideN(u.Floor.Add(u.Add))
		values[":f"] = wideN(u.Floor)
		set = append(set, "#t = :tr")
		cond = append(cond, "(attribute_not_exists(#t) OR #t < :f)")
	} else {
		values[":a"] = wideN(u.Add)
		add = append(add, "#t :a")
		if u.HasFloor {
			values[":f"] = wideN(u.Floor)
			cond = append(cond, "#t >= :f")
		}
		if u.Conditional {
			values[":mt"] = wideN(u.MaxTAT)
			cond = append(cond, "#t <= :mt")
		}
	}
	if u.Conditional && u.HasMaxSpent {
		values[":ms"] = num(u.MaxSpent)
		cond = append(cond, "(attribute_not_exists(#s) OR #s <= :ms)")
	}
	add = append(add, "#s :ds")
	if u.GrantSpend > 0 {
		names["#gl"], names["#gu"] = AttrGrantLeft, AttrGrantUntil
		values[":gs"], values[":mgs"], values[":gat"] = num(u.GrantSpend), num(-u.GrantSpend), num(u.GrantAt)
		add = append(add, "#gl :mgs")
		cond = append(cond, "#gu > :gat", "#gl >= :gs")
	}
	if u.Writer != 0 {
		names["#w"] = writersAttr(u.Epoch)
		values[":id"] = &types.AttributeValueMemberNS{Value: []string{strconv.FormatUint(uint64(u.Writer), 10)}}
		add = append(add, "#w :id")
	}
	var remove []string
	stale := append([]int64{u.Epoch - 2}, u.Stale...)
	// sort.Slice, not slices.Sort: the same few epochs, in code the runtime
	// of a Lambda function links anyway (slices.Sort[int64] is 4 KB more).
	sort.Slice(stale, func(i, j int) bool { return stale[i] < stale[j] })
	for i, e := range slices.Compact(stale) {
		if e >= u.Epoch-1 {
			continue
		}
		n := "#r" + strconv.Itoa(i)
		names[n] = writersAttr(e)
		remove = append(remove, n)
	}
	expr := "SET " + strings.Join(set, ", ") + " ADD " + strings.Join(add, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	in := &dynamodb.UpdateItemInput{
		TableName: d.table, Key: keyOf(id),
		UpdateExpression:                    aws.String(expr),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(cond) > 0 {
		in.ConditionExpression = aws.String(strings.Join(cond, " AND "))
	}
	return in
}

func writersAttr(epoch int64) string { return AttrWritersPrefix + strconv.FormatInt(epoch, 10) }

func wideN(w wire.Wide) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: w.String()}
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// parsePart reads a bucket item; a nil or empty item is an empty part.
func parsePart(item map[string]types.AttributeValue) (wire.Part, error) {
	var p wire.Part
	if v, ok := item[AttrTAT]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return wire.Part{}, fmt.Errorf("%w: attribute %s is not a number", kvbucket.ErrBadItem, AttrTAT)
		}
		w, err := wire.ParseWide(n.Value)
		if err != nil {
			return wire.Part{}, fmt.Errorf("%w: attribute %s: %v", kvbucket.ErrBadItem, AttrTAT, err)
		}
		p.Has, p.TAT = true, w
	}
	if v, ok := item[AttrSpent]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return wire.Part{}, fmt.Errorf("%w: attribute %s is not a number", kvbucket.ErrBadItem, AttrSpent)
		}
		s, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return wire.Part{}, fmt.Errorf("%w: attribute %s = %.32q is not a 64-bit integer", kvbucket.ErrBadItem, AttrSpent, n.Value)
		}
		p.Spent = s
	}
	for _, a := range []struct {
		name string
		to   *int64
	}{{AttrGrantLeft, &p.GrantLeft}, {AttrGrantUntil, &p.GrantUntil}} {
		if v, ok := item[a.name]; ok {
			n, ok := v.(*types.AttributeValueMemberN)
			var err error
			if ok {
				*a.to, err = strconv.ParseInt(n.Value, 10, 64)
			}
			if !ok || err != nil {
				return wire.Part{}, fmt.Errorf("%w: attribute %s is not a 64-bit integer", kvbucket.ErrBadItem, a.name)
			}
		}
	}
	if v, ok := item[AttrVersion]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		var err error
		if ok {
			p.Version, err = strconv.ParseInt(n.Value, 10, 64)
		}
		if !ok || err != nil {
			return wire.Part{}, fmt.Errorf("%w: attribute %s is not a 64-bit integer", kvbucket.ErrBadItem, AttrVersion)
		}
	}
	for name, v := range item {
		e, ok := writersEpoch(name)
		if !ok {
			continue
		}
		ns, ok := v.(*types.AttributeValueMemberNS)
		if !ok {
			return wire.Part{}, fmt.Errorf("%w: attribute %s is not a number set", kvbucket.ErrBadItem, name)
		}
		for _, s := range ns.Value {
			id, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return wire.Part{}, fmt.Errorf("%w: attribute %s holds %.16q, not a writer", kvbucket.ErrBadItem, name, s)
			}
			p.Writers = append(p.Writers, wire.Writer{Epoch: e, ID: uint32(id)})
		}
	}
	return p, nil
}

// writersEpoch parses "w<epoch>".
func writersEpoch(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, AttrWritersPrefix)
	if !ok || rest == "" || rest[0] < '0' && rest[0] != '-' || rest[0] > '9' {
		return 0, false
	}
	e, err := strconv.ParseInt(rest, 10, 64)
	return e, err == nil
}

// grantInputs are the UpdateItems of a grant (Update.Grant), each under
// the condition that makes it the one that applies: no grant in force
// (the grant replaces what lapsed), one in force ending no later (units
// added, the end moved), one in force ending later (units added).
func (d *conn) grantInputs(id string, u wire.Update) []*dynamodb.UpdateItemInput {
	ttl := min(max(u.TTL, time.Duration(u.GrantUntil-d.now().UnixNano())), maxTTL)
	if len(d.regions) > 1 {
		ttl = max(ttl, MinRegionTTL)
	}
	exp := d.now().Add(ttl + time.Second - 1).Unix()
	forms := []struct{ expr, cond string }{
		{"SET #gl = :g, #gu = :gu, #x = :exp, #v = if_not_exists(#v, :vb) + :one ADD #t :zero", "attribute_not_exists(#gu) OR #gu <= :gat"},
		{"SET #gu = :gu, #v = #v + :one, #x = :exp ADD #gl :g", "#gu > :gat AND #gu <= :gu"},
		{"SET #v = #v + :one ADD #gl :g", "#gu > :gu"},
	}
	ins := make([]*dynamodb.UpdateItemInput, len(forms))
	for i, f := range forms {
		ins[i] = &dynamodb.UpdateItemInput{
			TableName: d.table, Key: keyOf(id),
			UpdateExpression:    aws.String(f.expr),
			ConditionExpression: aws.String(f.cond),
			ExpressionAttributeNames: map[string]string{"#gl": AttrGrantLeft, "#gu": AttrGrantUntil, "#v": AttrVersion,
				"#x": ddbcore.AttrExpiresAt, "#t": AttrTAT},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":g": num(u.Grant), ":gu": num(u.GrantUntil), ":gat": num(u.GrantAt), ":one": num(1),
				":exp": num(exp), ":vb": num(d.now().UnixNano()), ":zero": num(0),
			},
			ReturnValues: types.ReturnValueAllNew,
		}
		// Unused names and values are an error to DynamoDB.
		if !strings.Contains(f.expr, "#x") {
			delete(ins[i].ExpressionAttributeNames, "#x")
			delete(ins[i].ExpressionAttributeValues, ":exp")
		}
		if !strings.Contains(f.expr, "#t") {
			delete(ins[i].ExpressionAttributeNames, "#t")
			delete(ins[i].ExpressionAttributeValues, ":zero")
		}
		if !strings.Contains(f.expr, ":vb") {
			delete(ins[i].ExpressionAttributeValues, ":vb")
		}
		if !strings.Contains(f.expr+f.cond, ":gat") {
			delete(ins[i].ExpressionAttributeValues, ":gat")
		}
	}
	return ins
}
