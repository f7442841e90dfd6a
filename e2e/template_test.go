package e2e

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	bandynamo "github.com/edgelimit/edgelimit/bans/dynamostore"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/functions/handlers"
	ifdynamo "github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddb"
	kvstore "github.com/edgelimit/edgelimit/kvbucket/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

// cfn is template.yaml as a YAML tree: CloudFormation's short-form
// intrinsics (!Ref, !Sub, !GetAtt, ...) stay visible as node tags.
type cfn struct{ root *yaml.Node }

func loadTemplate(t *testing.T) cfn {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	return cfn{doc.Content[0]}
}

// get follows mapping keys from n; nil when one is missing.
func get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// entries returns a mapping's keys and values.
func entries(n *yaml.Node) map[string]*yaml.Node {
	m := map[string]*yaml.Node{}
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = n.Content[i+1]
		}
	}
	return m
}

// str returns a scalar's value with its tag, like "!Ref Table" or "GET".
func str(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	if n.Kind == yaml.ScalarNode && strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return n.Tag + " " + n.Value
	}
	return n.Value
}

func (c cfn) resource(t *testing.T, id string) *yaml.Node {
	t.Helper()
	r := get(c.root, "Resources", id)
	if r == nil {
		t.Fatalf("template.yaml has no resource %s", id)
	}
	return r
}

// env returns a function's environment: Globals merged with its own, as SAM
// merges them.
func (c cfn) env(t *testing.T, fn handlers.Function) map[string]*yaml.Node {
	vars := entries(get(c.root, "Globals", "Function", "Environment", "Variables"))
	for k, v := range entries(get(c.resource(t, fn.LogicalID), "Properties", "Environment", "Variables")) {
		vars[k] = v
	}
	return vars
}

// strategies returns the strategies fn's embedded policies use.
func strategies(t *testing.T, fn handlers.Function) map[string]bool {
	t.Helper()
	s := map[string]bool{}
	for _, p := range parsePolicies(t, fn).Policies {
		s[p.StrategyName()] = true
	}
	return s
}

func parsePolicies(t *testing.T, fn handlers.Function) *policy.File {
	t.Helper()
	pf, err := policy.Parse(fn.PolicyFile, fn.Policies())
	if err != nil {
		t.Fatalf("%s: %v", fn.PolicyFile, err)
	}
	return pf
}

// bans says whether one of fn's embedded policies has a ban: the
// function then also keeps bans in the table (bans/dynamostore).
func bans(t *testing.T, fn handlers.Function) bool {
	t.Helper()
	return slices.ContainsFunc(parsePolicies(t, fn).Policies, func(p *policy.Policy) bool { return p.Ban != nil })
}

func TestTemplateRunsEachFunctionAsBuilt(t *testing.T) {
	c := loadTemplate(t)
	g := get(c.root, "Globals", "Function")
	for k, want := range map[string]string{"Runtime": "provided.al2023", "Handler": "bootstrap"} {
		if got := str(get(g, k)); got != want {
			t.Errorf("Globals.Function.%s = %q, want %q", k, got, want)
		}
	}
	if a := get(g, "Architectures"); a == nil || len(a.Content) != 1 || a.Content[0].Value != "arm64" {
		t.Errorf("Globals.Function.Architectures must be [arm64] (mk/lambda.mk's build-<LogicalId> targets build arm64)")
	}
	mk, err := os.ReadFile(filepath.Join(root(t), "mk", "lambda.mk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range handlers.All() {
		r := c.resource(t, fn.LogicalID)
		if got := str(get(r, "Type")); got != "AWS::Serverless::Function" {
			t.Errorf("%s: Type %q", fn.LogicalID, got)
		}
		if got := str(get(r, "Metadata", "BuildMethod")); got != "makefile" {
			t.Errorf("%s: Metadata.BuildMethod %q, want makefile", fn.LogicalID, got)
		}
		if got := str(get(r, "Properties", "CodeUri")); got != "." {
			t.Errorf("%s: CodeUri %q, want . (the module root, where the Makefile is)", fn.LogicalID, got)
		}
		target := "$(eval $(call lambda_sam_target," + fn.LogicalID + "," + fn.Name + "))"
		if !strings.Contains(string(mk), target) {
			t.Errorf("mk/lambda.mk has no build-%s target for functions/%s (%s)", fn.LogicalID, fn.Name, target)
		}
	}
	if !strings.Contains(string(mk), "RIE_VERSION := "+rieVersion+"\n") {
		t.Errorf("mk/lambda.mk does not pin the emulator at %s, as e2e does", rieVersion)
	}
}

// TestTemplateRoutesArePoliced checks that each function's HTTP API routes
// are the ones its handler answers and that its policies guard every one
// of them, and no route that does not exist.
func TestTemplateRoutesArePoliced(t *testing.T) {
	c := loadTemplate(t)
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, fn := range handlers.All() {
		var routes []string
		for name, ev := range entries(get(c.resource(t, fn.LogicalID), "Properties", "Events")) {
			if str(get(ev, "Type")) != "HttpApi" {
				t.Errorf("%s event %s: Type %q, want HttpApi", fn.LogicalID, name, str(get(ev, "Type")))
				continue
			}
			if got := str(get(ev, "Properties", "ApiId")); got != "!Ref Api" {
				t.Errorf("%s event %s: ApiId %q, want !Ref Api", fn.LogicalID, name, got)
			}
			routes = append(routes, str(get(ev, "Properties", "Method"))+" "+str(get(ev, "Properties", "Path")))
		}
		slices.Sort(routes)
		want := slices.Sorted(slices.Values(fn.Routes))
		if !slices.Equal(routes, want) {
			t.Errorf("%s routes %v, want %v (handlers.%s.Routes)", fn.LogicalID, routes, want, fn.Name)
		}
		pf, err := policy.Parse(fn.PolicyFile, fn.Policies())
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, rt := range fn.Routes {
			method, path, _ := strings.Cut(rt, " ")
			sample := param.ReplaceAllString(path, "sample")
			guarded := false
			for _, p := range pf.Policies {
				for _, pr := range p.Routes {
					if pr.Matches(method, sample) {
						guarded, used[p.Name] = true, true
					}
				}
			}
			if !guarded {
				t.Errorf("%s: route %s is guarded by no policy of %s", fn.LogicalID, rt, fn.PolicyFile)
			}
		}
		for _, p := range pf.Policies {
			if !used[p.Name] {
				t.Errorf("%s: policy %s guards no route of the function", fn.PolicyFile, p.Name)
			}
		}
	}
}

// TestTemplateSetsEveryVariableTheFunctionsRead compares each function's
// environment in the template with what setup.FromEnv reads: every variable
// is set, the table only where a policy keeps state, the token secret only
// where a policy is signed, the secrets themselves never (they are read
// from Secrets Manager at start-up, so they are not in the configuration),
// and nothing the code does not read.
func TestTemplateSetsEveryVariableTheFunctionsRead(t *testing.T) {
	c := loadTemplate(t)
	storeOnly := map[string]bool{setup.EnvTable: true, setup.EnvEndpoint: true, setup.EnvStoreWarmUp: true}
	signedOnly := map[string]bool{setup.EnvTokenSecretID: true}
	kvOnly := map[string]bool{setup.EnvKVRegions: true}
	localOnly := map[string]bool{setup.EnvHashKey: true, setup.EnvSecrets: true}
	refs := map[string]string{setup.EnvSecretID: "!Ref SecretName", setup.EnvTokenSecretID: "!Ref TokenSecretName"}
	for _, fn := range handlers.All() {
		s := strategies(t, fn)
		store := s["durable"] || s["kv"] || s["inflight"]
		env := c.env(t, fn)
		for _, name := range setup.EnvVars {
			_, set := env[name]
			want := !storeOnly[name] && !signedOnly[name] && !kvOnly[name] || storeOnly[name] && store || signedOnly[name] && s["signed"] || kvOnly[name] && s["kv"]
			switch {
			case localOnly[name] && set:
				t.Errorf("%s: the template sets %s: a secret in the function's configuration (set %s instead)", fn.LogicalID, name, setup.EnvSecretID)
			case localOnly[name]:
			case want && !set:
				t.Errorf("%s: the template does not set %s, which setup.FromEnv reads", fn.LogicalID, name)
			case !want && set:
				t.Errorf("%s: the template sets %s, which this function's policies do not use (least exposure)", fn.LogicalID, name)
			}
		}
		for name, v := range env {
			if !slices.Contains(setup.EnvVars, name) {
				t.Errorf("%s: the template sets %s, which no function reads", fn.LogicalID, name)
			}
			if want, ok := refs[name]; ok && str(v) != want {
				t.Errorf("%s: %s = %q, want %s", fn.LogicalID, name, str(v), want)
			}
			if strings.Contains(str(v), "{{resolve:") {
				t.Errorf("%s: %s is a dynamic reference: its value would be in the function's configuration", fn.LogicalID, name)
			}
		}
		if store {
			if got := str(env[setup.EnvTable]); got != "!Ref Table" {
				t.Errorf("%s: %s = %q, want !Ref Table", fn.LogicalID, setup.EnvTable, got)
			}
		}
		if s["kv"] {
			checkKVRegions(t, fn.LogicalID, env[setup.EnvKVRegions])
		}
	}
}

// checkKVRegions: a kv function's EDGELIMIT_KV_REGIONS follows the table's
// replicas: empty (one region) unless KVReplicaRegion adds one, and then
// this region and the replica's, which are the table's Replicas.
func checkKVRegions(t *testing.T, fn string, v *yaml.Node) {
	t.Helper()
	const want = `!If [HasKVReplica, !Sub "${AWS::Region},${KVReplicaRegion}", ""]`
	ok := v != nil && v.Tag == "!If" && v.Kind == yaml.SequenceNode && len(v.Content) == 3 &&
		v.Content[0].Value == "HasKVReplica" &&
		str(v.Content[1]) == "!Sub ${AWS::Region},${KVReplicaRegion}" &&
		v.Content[2].Kind == yaml.ScalarNode && v.Content[2].Value == ""
	if !ok {
		t.Errorf("%s: %s is not %s (the regions of the table's replicas)", fn, setup.EnvKVRegions, want)
	}
}

// TestTemplateOverrideDefaultsMatchThePolicyFiles applies each function's
// EDGELIMIT_OVERRIDES, with every parameter at its default, to its policy
// file: the result must load, and must be the policy file itself, so that
// the parameters' defaults never silently differ from the reviewed file.
func TestTemplateOverrideDefaultsMatchThePolicyFiles(t *testing.T) {
	c := loadTemplate(t)
	params := entries(get(c.root, "Parameters"))
	ref := regexp.MustCompile(`\$\{(\w+)\}`)
	for _, fn := range handlers.All() {
		v := c.env(t, fn)[setup.EnvOverrides]
		if v == nil {
			t.Errorf("%s sets no %s", fn.LogicalID, setup.EnvOverrides)
			continue
		}
		overrides := ref.ReplaceAllStringFunc(v.Value, func(m string) string {
			p := params[ref.FindStringSubmatch(m)[1]]
			if p == nil {
				t.Errorf("%s: %s refers to a missing parameter %s", fn.LogicalID, setup.EnvOverrides, m)
				return m
			}
			return str(get(p, "Default"))
		})
		edited, err := setup.OverrideTree(fn.Tree(), overrides, "")
		if err != nil {
			t.Errorf("%s: %s=%q: %v", fn.LogicalID, setup.EnvOverrides, overrides, err)
			continue
		}
		got, err := policy.ParseTree("edited", edited)
		if err != nil {
			t.Errorf("%s: %s=%q does not load: %v", fn.LogicalID, setup.EnvOverrides, overrides, err)
			continue
		}
		want, _ := policy.Parse("file", fn.Policies())
		for i, p := range want.Policies {
			g := got.Policies[i]
			if g.Limit != p.Limit || g.Window != p.Window || !reflect.DeepEqual(g.Options, p.Options) {
				t.Errorf("%s: with the template's defaults policy %s is limit %d window %s options %v; %s says %d %s %v",
					fn.LogicalID, p.Name, g.Limit, g.Window, g.Options, fn.PolicyFile, p.Limit, p.Window, p.Options)
			}
		}
	}
}

// transactActions maps the members of a TransactWriteItem to the IAM
// actions that authorise them ("Using IAM with DynamoDB transactions").
var transactActions = map[string]string{
	"Update": "dynamodb:UpdateItem", "Put": "dynamodb:PutItem",
	"Delete": "dynamodb:DeleteItem", "ConditionCheck": "dynamodb:ConditionCheckItem",
}

// sdkActions returns the IAM actions a strategy needs: one per method of
// its narrow DynamoDB interface (the only DynamoDB calls it can make),
// where TransactWriteItems needs the actions of the members the package's
// source puts in transactions.
func sdkActions(t *testing.T, iface reflect.Type, pkgDir string) []string {
	t.Helper()
	var out []string
	for i := range iface.NumMethod() {
		switch m := iface.Method(i).Name; m {
		case "TransactWriteItems":
			out = append(out, transactMembers(t, filepath.Join(root(t), pkgDir))...)
		case "TransactGetItems":
			out = append(out, "dynamodb:GetItem")
		default:
			out = append(out, "dynamodb:"+m)
		}
	}
	return out
}

// transactMembers finds the keyed fields of types.TransactWriteItem
// literals in the package's source.
func transactMembers(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "TransactWriteItem" {
				return true
			}
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, _ := kv.Key.(*ast.Ident)
				if key == nil || transactActions[key.Name] == "" {
					t.Errorf("%s: TransactWriteItem member %v has no known IAM action", fset.Position(kv.Pos()), kv.Key)
					continue
				}
				out = append(out, transactActions[key.Name])
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Errorf("%s calls TransactWriteItems but no TransactWriteItem literal was found", dir)
	}
	return out
}

// TestTemplateGrantsOnlyTheDynamoDBActionsTheCodeCalls derives each
// function's DynamoDB actions from its strategies' narrow SDK interfaces
// (durablecounter/dynamostore.DynamoAPI, kvbucket/dynamostore.DynamoAPI,
// inflight/dynamostore.API) and, for a function with a banning policy,
// the ban store's (bans/dynamostore.API), and compares them with
// the template's policy statements: the same set, on the table only.
func TestTemplateGrantsOnlyTheDynamoDBActionsTheCodeCalls(t *testing.T) {
	c := loadTemplate(t)
	byStrategy := map[string][]string{
		"durable":  sdkActions(t, reflect.TypeFor[dynamostore.DynamoAPI](), "durablecounter/dynamostore"),
		"kv":       sdkActions(t, reflect.TypeFor[kvstore.DynamoAPI](), "kvbucket/dynamostore"),
		"inflight": sdkActions(t, reflect.TypeFor[ifdynamo.API](), "inflight/dynamostore"),
		"signed":   nil,
	}
	banActions := sdkActions(t, reflect.TypeFor[bandynamo.API](), "bans/dynamostore")
	t.Logf("actions by strategy: %v; of the ban store: %v", byStrategy, banActions)
	banning := 0
	defer func() {
		if banning == 0 {
			t.Errorf("no function has a banning policy, so the ban store's actions were not checked")
		}
	}()
	secretGrants := map[string]bool{}
	defer func() {
		for _, fn := range handlers.All() {
			if !secretGrants[fn.LogicalID] {
				t.Errorf("%s may not read its secret (no EdgelimitSecret statement), so it cannot start", fn.LogicalID)
			}
		}
	}()
	for _, fn := range handlers.All() {
		want := map[string]bool{}
		for s := range strategies(t, fn) {
			for _, a := range byStrategy[s] {
				want[a] = true
			}
		}
		if bans(t, fn) {
			banning++
			for _, a := range banActions {
				want[a] = true
			}
		}
		got := map[string]bool{}
		policies := get(c.resource(t, fn.LogicalID), "Properties", "Policies")
		if policies != nil {
			for _, doc := range policies.Content {
				if doc.Kind != yaml.MappingNode {
					t.Errorf("%s: policy %q is not an inline statement list (SAM policy templates grant more than needed)", fn.LogicalID, str(doc))
					continue
				}
				for _, st := range get(doc, "Statement").Content {
					if str(get(st, "Effect")) != "Allow" {
						continue
					}
					if str(get(st, "Sid")) == "EdgelimitSecret" {
						checkSecretStatement(t, fn.LogicalID, st)
						secretGrants[fn.LogicalID] = true
						continue
					}
					if res := str(get(st, "Resource")); res != "!GetAtt Table.Arn" {
						t.Errorf("%s: statement %s on %q, want only !GetAtt Table.Arn", fn.LogicalID, str(get(st, "Sid")), res)
					}
					for _, a := range get(st, "Action").Content {
						if strings.Contains(a.Value, "*") {
							t.Errorf("%s: wildcard action %s", fn.LogicalID, a.Value)
						}
						got[a.Value] = true
					}
				}
			}
		}
		for a, ok := range want {
			if !ok {
				delete(want, a)
			}
		}
		if g, w := keys(got), keys(want); !slices.Equal(g, w) {
			t.Errorf("%s may call %v; its strategies call %v", fn.LogicalID, g, w)
		}
	}
}

// checkSecretStatement: the secret statement grants GetSecretValue alone,
// on the function's secrets only (SecretName's, and TokenSecretName's for
// a function that signs), each by its ARN with Secrets Manager's 6-character
// suffix, never a wildcard over other secrets.
func checkSecretStatement(t *testing.T, fn string, st *yaml.Node) {
	t.Helper()
	if a := get(st, "Action"); a == nil || a.Kind != yaml.ScalarNode || a.Value != "secretsmanager:GetSecretValue" {
		t.Errorf("%s: the secret statement grants %s, want secretsmanager:GetSecretValue alone", fn, str(a))
	}
	res := flatten(get(st, "Resource"))
	arn := regexp.MustCompile(`arn:\$\{AWS::Partition\}:secretsmanager:\$\{AWS::Region\}:\$\{AWS::AccountId\}:secret:\$\{(\w+)\}-\?{6}`)
	found := arn.FindAllStringSubmatch(res, -1)
	if len(found) == 0 {
		t.Errorf("%s: the secret statement's resource %q is not a secret's ARN", fn, res)
	}
	for _, m := range found {
		if m[1] != "SecretName" && !(m[1] == "TokenSecretName" && fn == "TTSFunction") {
			t.Errorf("%s: the secret statement names ${%s}", fn, m[1])
		}
	}
	if strings.Count(res, "*") > 0 {
		t.Errorf("%s: the secret statement's resource has a wildcard: %q", fn, res)
	}
}

// flatten joins every scalar under n (an intrinsic like !If included).
func flatten(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	var parts []string
	for _, c := range n.Content {
		parts = append(parts, flatten(c))
	}
	return strings.Join(parts, " ")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestTemplateTableIsTheDataModel(t *testing.T) {
	c := loadTemplate(t)
	p := get(c.resource(t, "Table"), "Properties")
	if got := str(get(p, "BillingMode")); got != "PAY_PER_REQUEST" {
		t.Errorf("BillingMode %q, want PAY_PER_REQUEST", got)
	}
	ks, ad := get(p, "KeySchema"), get(p, "AttributeDefinitions")
	if len(ks.Content) != 1 || str(get(ks.Content[0], "AttributeName")) != ddb.AttrPK || str(get(ks.Content[0], "KeyType")) != "HASH" {
		t.Errorf("KeySchema must be %s HASH only", ddb.AttrPK)
	}
	if len(ad.Content) != 1 || str(get(ad.Content[0], "AttributeName")) != ddb.AttrPK || str(get(ad.Content[0], "AttributeType")) != "S" {
		t.Errorf("AttributeDefinitions must be %s S only", ddb.AttrPK)
	}
	ttl := get(p, "TimeToLiveSpecification")
	if str(get(ttl, "AttributeName")) != ddb.AttrExpiresAt || str(get(ttl, "Enabled")) != "true" {
		t.Errorf("TimeToLiveSpecification must enable TTL on %s", ddb.AttrExpiresAt)
	}
	// A table has its point-in-time recovery in its properties; a Global
	// Table (the kv option of a second region) in each replica's.
	pitr := get(p, "PointInTimeRecoverySpecification") != nil
	if reps := get(p, "Replicas"); reps != nil && len(reps.Content) > 0 {
		own := reps.Content[0]
		pitr = str(get(own, "Region")) == "!Ref AWS::Region" && get(own, "PointInTimeRecoverySpecification") != nil
	}
	if !pitr || get(c.root, "Parameters", "PointInTimeRecovery") == nil {
		t.Errorf("point-in-time recovery must be a parameter")
	}
	if !strings.Contains(str(get(c.root, "Outputs", "ApiUrl", "Value")), "${Api}") {
		t.Errorf("Outputs.ApiUrl must give the API's URL")
	}
	for _, fn := range handlers.All() {
		lc := get(c.resource(t, fn.LogicalID), "Properties", "LoggingConfig")
		if str(get(lc, "LogFormat")) != "JSON" || str(get(lc, "ApplicationLogLevel")) != "TRACE" {
			t.Errorf("%s: LoggingConfig must be JSON with ApplicationLogLevel TRACE (Lambda must not drop EMF lines)", fn.LogicalID)
		}
		group := strings.TrimPrefix(str(get(lc, "LogGroup")), "!Ref ")
		lg := get(c.root, "Resources", group)
		if str(get(lg, "Type")) != "AWS::Logs::LogGroup" || str(get(lg, "Properties", "RetentionInDays")) != "!Ref LogRetentionDays" {
			t.Errorf("%s: logs must go to a log group with RetentionInDays !Ref LogRetentionDays, not %q", fn.LogicalID, group)
		}
	}
}

// TestEnvVarsListsWhatTheCodeReads scans the source of every package the
// functions link for EDGELIMIT_* names: each must be in setup.EnvVars (and
// so in the template), so that no package reads a variable the deployment
// does not know about.
func TestEnvVarsListsWhatTheCodeReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}", "./functions/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	name := regexp.MustCompile(`^EDGELIMIT_[A-Z0-9_]+$`)
	found := map[string]string{}
	fset := token.NewFileSet()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[0], root(t)) {
			continue // other modules read no EDGELIMIT_ variables
		}
		for _, f := range fields[1:] {
			path := filepath.Join(fields[0], f)
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && name.MatchString(s) {
						found[s] = fset.Position(lit.Pos()).String()
					}
				}
				return true
			})
		}
	}
	if len(found) == 0 {
		t.Fatal("found no EDGELIMIT_ names: the scan is broken")
	}
	for s, where := range found {
		if !slices.Contains(setup.EnvVars, s) {
			t.Errorf("%s: %s is not in setup.EnvVars (so not in template.yaml)", where, s)
		}
	}
}

// TestTemplateLintsClean runs cfn-lint (with the SAM translator): the
// template must pass without an error, a warning or an informational match.
func TestTemplateLintsClean(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		skipOrFail(t, "cfn-lint is not installed (pip install cfn-lint)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lint, "template.yaml")
	cmd.Dir = root(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cfn-lint template.yaml: %v\n%s", err, out)
	}
}

// TestTemplateLeasesOutlastTheTimeout: an inflight policy's lease (its
// window) is no shorter than the Timeout of the function it guards
// (docs/inflight.md, "The lease rule"): a lease that ended while its request
// still ran would free the slot early and admit one request over the limit.
func TestTemplateLeasesOutlastTheTimeout(t *testing.T) {
	c := loadTemplate(t)
	checked := 0
	for _, fn := range handlers.All() {
		timeout := get(c.resource(t, fn.LogicalID), "Properties", "Timeout")
		if timeout == nil {
			timeout = get(c.root, "Globals", "Function", "Timeout")
		}
		secs, err := strconv.Atoi(str(timeout))
		if err != nil || secs < 1 {
			t.Fatalf("%s: Timeout %q is not a number of seconds", fn.LogicalID, str(timeout))
		}
		pf, err := policy.Parse(fn.PolicyFile, fn.Policies())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pf.Policies {
			if p.StrategyName() != "inflight" {
				continue
			}
			checked++
			if p.Window < time.Duration(secs)*time.Second {
				t.Errorf("%s: policy %s's lease is %s, shorter than %s's Timeout of %ds", fn.PolicyFile, p.Name, p.Window, fn.LogicalID, secs)
			}
		}
	}
	if checked == 0 {
		t.Error("no function has an inflight policy (tts's speech-jobs)")
	}
}

// TestBuildTagsAreMakeBuilds: the functions e2e runs are built with the
// tags `make build` and `sam build` use (LAMBDA_TAGS in mk/lambda.mk), so
// what is tested is what is deployed.
func TestBuildTagsAreMakeBuilds(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "mk", "lambda.mk"))
	if err != nil {
		t.Fatal(err)
	}
	want := "LAMBDA_TAGS      := " + lambdaTags + "\n"
	if !strings.Contains(string(data), want) {
		t.Errorf("mk/lambda.mk does not set %q: e2e builds with other tags than make build", strings.TrimSpace(want))
	}
	if !strings.Contains(string(data), "-tags $(LAMBDA_TAGS)") {
		t.Errorf("mk/lambda.mk's LAMBDA_GOFLAGS do not use LAMBDA_TAGS")
	}
	if want := "PROGRAM_TAGS     := " + programTags + "\n"; !strings.Contains(string(data), want) {
		t.Errorf("mk/lambda.mk does not set %q: e2e builds the example programs with other tags than make run-lambda", strings.TrimSpace(want))
	}
}
