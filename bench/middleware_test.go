package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/edgelimit/edgelimit"
)

// TestMiddlewareRowsMeasureWhatTheySay builds every row of the middleware
// part over a few keys and checks what its cells rely on: the allowed stack
// admits every key again after the warm-up and its 200 is the handler's;
// the denied stack denies every key after the warm-up and the handler does
// not answer it. A peer configured with the wrong quota semantics (a burst
// off by one, a limit the warm-up does not spend) fails here.
func TestMiddlewareRowsMeasureWhatTheySay(t *testing.T) {
	stored, seq := mwKeys(300)
	for _, s := range append(mwBaselineSpecs(), mwSpecs()...) {
		t.Run(s.id, func(t *testing.T) {
			b, err := buildRow(s, stored)
			if err != nil {
				t.Fatalf("buildRow: %v", err)
			}
			defer b.close()
			for _, cs := range b.cells() {
				send := cs.t.newClient()
				var calls0 int64
				if cs.t.calls != nil {
					calls0 = cs.t.calls()
				}
				for _, k := range seq {
					if got := send(k); got != cs.want {
						t.Fatalf("cell %s: key %s answered %d, want %d", cs.name, k, got, cs.want)
					}
				}
				// The cached row says its decisions cost no KV call: a key
				// still in its first sync interval would cost one each.
				if s.id == "edgelimit-kv-cached" {
					if n := cs.t.calls() - calls0; n != 0 {
						t.Errorf("cell %s: %d KV calls for %d requests, want none (decided from the process cache)", cs.name, n, len(seq))
					}
				}
			}
			if s.group == "baseline" {
				return
			}
			a, d := b.row.Allowed, b.row.Denied
			if a.Status != http.StatusOK || a.ContentType != "application/json" || a.BodyBytes != len(mwBody) {
				t.Errorf("allowed response = %+v, want the handler's 200 with its %d-byte JSON body", *a, len(mwBody))
			}
			if d.Status != http.StatusTooManyRequests || d.ContentType == "application/json" && d.BodyBytes == len(mwBody) {
				t.Errorf("denied response = %+v, want a 429 that is not the handler's", *d)
			}
			if s.group != "peer" {
				// The report says what edgelimit sends; this backs it.
				for _, h := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					if !slices.ContainsFunc(a.Headers, func(x string) bool { return strings.EqualFold(x, h) }) {
						t.Errorf("allowed response lacks %s: %v", h, a.Headers)
					}
				}
				if !slices.ContainsFunc(d.Headers, func(x string) bool { return strings.EqualFold(x, "Retry-After") }) || d.ContentType != "application/problem+json" {
					t.Errorf("denied response = %+v, want Retry-After and a problem+json body", *d)
				}
			} else if !strings.HasPrefix(d.ContentType, "text/plain") {
				t.Errorf("peer's denial has Content-Type %q; the report says http.Error's plain text", d.ContentType)
			}
		})
	}
}

func TestMWKeysSameOrderFreshCopies(t *testing.T) {
	stored, seq := mwKeys(1000)
	stored2, seq2 := mwKeys(1000)
	if !slices.Equal(stored, stored2) || !slices.Equal(seq, seq2) {
		t.Fatal("mwKeys is not deterministic: rows would not see the same keys in the same order")
	}
	if slices.Equal(stored, seq) {
		t.Fatal("seq is not shuffled")
	}
	a, b := slices.Clone(stored), slices.Clone(seq)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) || len(slices.Compact(a)) != 1000 {
		t.Fatal("seq is not a permutation of 1,000 distinct keys")
	}
	for i, k := range seq {
		if unsafe.StringData(k) == unsafe.StringData(stored[slices.Index(stored, k)]) {
			t.Fatalf("request key %d shares memory with the stored key", i)
		}
	}
}

func TestSummarizeMedianAndNet(t *testing.T) {
	mk := func(nsPerOp time.Duration, allocs, bytes uint64) mwRun {
		const n = 1000
		r := mwRun{ops: n}
		r.res.N, r.res.T, r.res.MemAllocs, r.res.MemBytes = n, nsPerOp*n, allocs*n, bytes*n
		return r
	}
	// Six runs: the median is the mean of the middle two, for each measure.
	runs := []mwRun{mk(900, 9, 900), mk(100, 5, 500), mk(300, 5, 500), mk(200, 5, 500), mk(500, 7, 700), mk(400, 5, 500)}
	c := summarize(runs, false)
	if c.Gross.NsPerOp != 350 || c.Gross.AllocsPerOp != 5 || c.Gross.BytesPerOp != 500 {
		t.Errorf("median of six = %v ns, %d allocs, %d B; want 350, 5, 500", c.Gross.NsPerOp, c.Gross.AllocsPerOp, c.Gross.BytesPerOp)
	}
	if c.StoreCallsPerOp != nil {
		t.Error("store calls reported for a stack that does not count them")
	}
	base := summarize([]mwRun{mk(50, 1, 16)}, false)
	n := netOf(c.Gross, base.Gross)
	if n.NsPerOp != 300 || n.AllocsPerOp != 4 || n.BytesPerOp != 484 {
		t.Errorf("net = %+v, want 300 ns, 4 allocs, 484 B", *n)
	}
}

func TestMWWindowText(t *testing.T) {
	// The peers are configured with mwWindow, edgelimit's policies with
	// mwWindowText: one quota only if they agree.
	pf, err := parsePolicies(mwPolicy("durable", 1, ""))
	if err != nil {
		t.Fatal(err)
	}
	if d := pf.Policies[0].Window; d != mwWindow {
		t.Fatalf("window %q parses to %v; want %v", mwWindowText, d, mwWindow)
	}
	if got := windowText(mwWindow); got != "30 days" {
		t.Errorf("windowText(%v) = %q", mwWindow, got)
	}
}

func TestMWBaselineOf(t *testing.T) {
	for _, tc := range []struct{ adapter, cell, row, baseCell string }{
		{"net/http", cellAllowedSerial, baseHTTPHandler, cellSerial},
		{"net/http", cellAllowedParallel, baseHTTPHandler, cellParallel},
		{"net/http", cellDeniedParallel, baseHTTPEmpty, cellParallel}, // a denial does not run the handler
		{"lambda", cellAllowedSerial, baseLambdaHandler, cellSerial},
		{"lambda", cellDeniedParallel, baseLambdaEmpty, cellParallel},
	} {
		row, cell := mwBaselineOf(tc.adapter, tc.cell)
		if row != tc.row || cell != tc.baseCell {
			t.Errorf("mwBaselineOf(%s, %s) = %s/%s, want %s/%s", tc.adapter, tc.cell, row, cell, tc.row, tc.baseCell)
		}
	}
}

func TestSpliceSection(t *testing.T) {
	const h = "## Mine"
	sec := h + "\n\nnew\n\n"
	for _, tc := range []struct{ name, md, want string }{
		{"replaced in place", "# T\n\n## A\n\na\n\n## Mine\n\nold\nlines\n\n## 1. B\n\nb\n", "# T\n\n## A\n\na\n\n## Mine\n\nnew\n\n## 1. B\n\nb\n"},
		{"replaced at the end", "# T\n\n## Mine\n\nold\n", "# T\n\n## Mine\n\nnew\n\n"},
		{"inserted before section 1", "# T\n\n## A\n\na\n\n## 1. B\n\nb\n", "# T\n\n## A\n\na\n\n## Mine\n\nnew\n\n## 1. B\n\nb\n"},
		{"appended", "# T\n\n## A\n\na\n", "# T\n\n## A\n\na\n\n## Mine\n\nnew\n\n"},
		{"heading text inside a line is not a heading", "# T\n\nsee ## Mine\n\n## 1. B\n", "# T\n\nsee ## Mine\n\n## Mine\n\nnew\n\n## 1. B\n"},
	} {
		if got := spliceSection(tc.md, h, sec, "## 1. "); got != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// BenchmarkMiddleware runs the middleware part's cells as ordinary
// benchmarks, so that one can be profiled with the go tool's flags:
//
//	go test -run '^$' -bench 'Middleware/^edgelimit-fixed-window$/allowed-serial' -benchmem -cpuprofile cpu.out -memprofile mem.out
//
// A row is built (and warmed with 100,000 keys) only when the pattern
// selects it; the memory profile includes that warm-up.
func BenchmarkMiddleware(b *testing.B) {
	stored, seq := mwKeys(numKeys)
	for _, s := range append(mwBaselineSpecs(), mwSpecs()...) {
		b.Run(s.id, func(b *testing.B) {
			row, err := buildRow(s, stored)
			if err != nil {
				b.Fatal(err)
			}
			defer row.close()
			for _, cs := range row.cells() {
				b.Run(cs.name, func(b *testing.B) {
					var c mwCounters
					cellBench(cs.t, seq, cs.want, cs.parallel, &c)(b)
					if ops := c.ops.Load(); ops > 0 {
						// The process's CPU time per request, GC included:
						// the figure a busy machine disturbs least.
						b.ReportMetric(float64(c.cpu.Load())/float64(ops), "cpu-ns/op")
					}
					if n := c.unexpected.Load(); n > 0 {
						b.Fatalf("%d requests were not answered %d", n, cs.want)
					}
				})
			}
		})
	}
}

// TestMWSummaryNetCPUInOrder pins the README's compact table: edgelimit's
// rows before the peers whatever the JSON's order, CPU time net of the
// baseline the cell's adapter and outcome call for (a denial net of the
// empty handler), and the run's command and load beside it.
func TestMWSummaryNetCPUInOrder(t *testing.T) {
	cell := func(cpu float64, allocs int64) *MWCell {
		return &MWCell{CPUNsPerOp: cpu, Net: &MWNet{AllocsPerOp: allocs, BytesPerOp: allocs * 100}}
	}
	base := func(id string, serial, parallel float64) MWRow {
		return MWRow{ID: id, Adapter: "net/http", Cells: map[string]*MWCell{cellSerial: {CPUNsPerOp: serial}, cellParallel: {CPUNsPerOp: parallel}}}
	}
	row := func(id string, cpu float64) MWRow {
		return MWRow{ID: id, Adapter: "net/http", Cells: map[string]*MWCell{
			cellAllowedSerial: cell(cpu, 3), cellAllowedParallel: cell(cpu+1000, 3), cellDeniedParallel: cell(cpu+2000, 4)}}
	}
	d := &MiddlewareData{Count: 6, Benchtime: "300ms", GOMAXPROCS: 2,
		Baselines: []MWRow{base(baseHTTPHandler, 100, 110), base(baseHTTPEmpty, 10, 20)},
		Rows:      []MWRow{row("x-time-rate", 1100), row("edgelimit-fixed-window", 4100)}}
	env := &Envelope{Command: "edgelimit-bench middleware", Machine: Machine{Cores: 2, CPU: "test CPU"}, Load: LoadStats{Start: 3, Mean: 5.5, Max: 9}}
	got := mwSummary(&loaded{middleware: d, envs: map[string]*Envelope{"middleware": env}})
	fw := strings.Index(got, "| edgelimit durable fixed-window, `middleware.Handler` | 4,000 ns | 4,990 ns | 6,080 ns | 3 / 4 | 300 / 400 |")
	xr := strings.Index(got, "| x/time/rate in a map + mutex | 1,000 ns | 1,990 ns | 3,080 ns | 3 / 4 | 300 / 400 |")
	if fw < 0 || xr < 0 || fw > xr {
		t.Fatalf("rows missing, wrong or out of order:\n%s", got)
	}
	if !strings.Contains(got, "`edgelimit-bench middleware`") || !strings.Contains(got, "mean 5.50, max 9.00") {
		t.Errorf("the run's command or load is missing:\n%s", got)
	}
}

// TestKeepSections pins that the full report keeps the cold-start and the
// bootstrap-size sections, which no part of the program measures, where a regenerated file would
// drop it: before "What these figures do not show", replacing none of the
// new report's sections, and nothing when the old file has none.
func TestKeepSections(t *testing.T) {
	cold := coldStartHeading + "\n\n| function | before | after |\n|---|---:|---:|\n| paid | 9.5 ms | 8.3 ms |\n"
	old := "# Old\n\n## 1. A\n\nold a\n\n" + cold + "\n## What these figures do not show\n\nold\n"
	md := "# New\n\n## 1. A\n\nnew a\n\n## What these figures do not show\n\nnew\n"
	want := "# New\n\n## 1. A\n\nnew a\n\n" + cold + "\n## What these figures do not show\n\nnew\n"
	if got := keepSections(old, md); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	boot := bootstrapHeading + "\n\n| function | bytes |\n|---|---:|\n| tts | 6,881,442 |\n"
	old2 := "# Old\n\n" + cold + "\n" + boot + "\n## What these figures do not show\n\nold\n"
	if got, want := keepSections(old2, md), "# New\n\n## 1. A\n\nnew a\n\n"+cold+"\n"+boot+"\n## What these figures do not show\n\nnew\n"; got != want {
		t.Errorf("two kept sections: got %q\nwant %q", got, want)
	}
	// The hand-written go test -bench sections, at the old file's end.
	cal := calendarHeading + "\n\n| boundary | ns |\n|---|---:|\n| month | 310 |\n"
	delay := maxDelayHeading + "\n\n| | ns |\n|---|---:|\n| kv | 2086 |\n"
	old3 := "# Old\n\n## What these figures do not show\n\nold\n\n" + cal + "\n" + delay
	if got, want := keepSections(old3, md), "# New\n\n## 1. A\n\nnew a\n\n"+cal+"\n"+delay+"\n## What these figures do not show\n\nnew\n"; got != want {
		t.Errorf("calendar and max_delay sections: got %q\nwant %q", got, want)
	}
	if got := keepSections("# Old\n\n## 1. A\n\nold a\n", md); got != md {
		t.Errorf("without a kept section in the old file: got %q, want the new report as is", got)
	}
}

// TestSettledBucketDecidesFromTheCache pins the decisions part's cached kv
// row: after settledBucket every key is decided with no KV call (a key
// still in its first sync interval would cost a reservation each).
func TestSettledBucketDecidesFromTheCache(t *testing.T) {
	ctx := context.Background()
	p, err := benchPolicy("  - {name: bench, routes: [\"GET /\"], key: ip, strategy: kv, limit: 1000000, burst: 1000000, window: 1s, sync_interval: 1h}")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := mwKeys(300)
	b, kv, err := settledBucket(ctx, p, keys)
	if err != nil {
		t.Fatal(err)
	}
	n0 := kv.calls()
	for _, k := range keys {
		if d, err := b.Allow(ctx, edgelimit.Request{Key: k}); err != nil || !d.Allowed {
			t.Fatalf("key %s: allowed %v, %v", k, d.Allowed, err)
		}
	}
	if n := kv.calls() - n0; n != 0 {
		t.Errorf("%d KV calls for %d decisions after settling, want none", n, len(keys))
	}
}
