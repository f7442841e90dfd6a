package durablecounter

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// t0 is a fixed instant at the start of a 10 s window (and of a second).
var t0 = time.Unix(1_700_000_000, 0)

// step is one request of a rule's step table: at t0+at, of cost units,
// decided against the state the earlier steps left.
type step struct {
	at            time.Duration
	cost          int64
	wantAllowed   bool
	wantRemaining int64
	// wantRetry, if set, is the denial's RetryAfter.
	wantRetry time.Duration
}

// runSteps decides steps with r alone, as a store does: the item of each
// step (itemFor), fits, then commit and the decision after it, or the
// denial of the state as it is.
func runSteps(t *testing.T, r rule, steps []step) {
	t.Helper()
	items := map[itemID]state{}
	for i, s := range steps {
		at := t0.Add(s.at).UnixNano()
		id := r.itemFor("k", noShard, at)
		st := items[id]
		ok := r.fits(st, at, s.cost)
		if ok {
			st = r.commit(st, at, s.cost)
			items[id] = st
		}
		d := r.decision(st, at, s.cost, ok)
		if ok != s.wantAllowed || d.Remaining != s.wantRemaining || s.wantRetry != 0 && d.RetryAfter != s.wantRetry {
			t.Errorf("step %d, at %s, cost %d: allowed %v, remaining %d, retry after %s; want %v, %d, %s",
				i, s.at, s.cost, ok, d.Remaining, d.RetryAfter, s.wantAllowed, s.wantRemaining, s.wantRetry)
		}
	}
}

func ruleOf(alg Algorithm, limit, burst int64, window time.Duration) rule {
	code, _ := algorithmCode(alg)
	return code.build(params{name: "p", limit: limit, window: window, burst: burst})
}

// TestRulesSpeakNoDynamoDB: an algorithm's rule, the Counter's use of it
// and the Memory store are pure of the DynamoDB encoding: they import no
// wire and touch no encoding (the encodings are in <algorithm>_item.go and
// dynamo*.go).
func TestRulesSpeakNoDynamoDB(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"rule.go", "fixedwindow.go", "slidingwindow.go", "slidinglog.go", "gcra.go", "grantpool.go", "memory.go",
		"counter.go", "limits.go", "decide.go", "peek.go", "allowbatch.go", "grant.go", "operator.go", "cache.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasSuffix(p, "/internal/wire") {
				t.Errorf("%s imports %s", f, p)
			}
		}
		for _, word := range []string{"condUpdate", ".enc."} {
			if strings.Contains(string(src), word) {
				t.Errorf("%s uses %s, the DynamoDB encoding", f, word)
			}
		}
	}
}
