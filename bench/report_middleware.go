package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// mwHeading is the middleware part's section of BENCHMARKS.md; the part run
// alone replaces that section in place (updateMiddlewareSection).
const mwHeading = "## Per request: each limiter's own middleware around one handler"

// mwBefore is the heading the section goes before when the file lacks it.
const mwBefore = "## 1. "

// runMiddlewareReport is the report-middleware subcommand: the section
// again from bench/out/middleware.json, without measuring.
func runMiddlewareReport(o options) error { return updateMiddlewareSection(o) }

// updateMiddlewareSection writes the middleware part's section into -md:
// in place of the section of that heading, or before section 1, leaving
// every other section as it is (their results may not be under -out: they
// come from other runs). Without a report yet, it writes a whole one.
func updateMiddlewareSection(o options) error {
	l, err := load(o.out)
	if err != nil {
		return err
	}
	if l.middleware == nil {
		return fmt.Errorf("no middleware results in %s", o.out)
	}
	old, err := os.ReadFile(o.md)
	if errors.Is(err, fs.ErrNotExist) {
		return runReport(o)
	}
	if err != nil {
		return err
	}
	var w mdWriter
	renderMiddleware(&w, l)
	md := spliceSection(string(old), mwHeading, w.String(), mwBefore)
	logf("report: rewrote the section %q of %s", strings.TrimPrefix(mwHeading, "## "), o.md)
	// The parts the middleware run measures with it, each in place.
	if l.bootstrap != nil {
		var b mdWriter
		renderBootstrap(&b, l)
		md = spliceSection(md, bootHeading, b.String(), mwBefore)
		logf("report: rewrote the section %q", strings.TrimPrefix(bootHeading, "## "))
	}
	if l.decisions != nil {
		var b mdWriter
		renderDecisions(&b, l, nil) // its plot is make bench's, from another run
		md = spliceSection(md, "## 1. Cost of one decision, in process", b.String(), "## 2. ")
		logf("report: rewrote the section on the cost of one decision")
	}
	if err := os.WriteFile(o.md, []byte(md), 0o644); err != nil {
		return err
	}
	summary := filepath.Join(o.out, "middleware-summary.md")
	if err := os.WriteFile(summary, []byte(mwSummary(l)), 0o644); err != nil {
		return err
	}
	logf("report: the compact table of the same run in %s", summary)
	return nil
}

// mwSummaryNames are the short names of the compact table's rows, in its
// order: edgelimit's stacks, then the peers.
var mwSummaryNames = [][2]string{
	{"edgelimit-fixed-window", "edgelimit durable fixed-window, `middleware.Handler`"},
	{"edgelimit-fixed-window-bare", "edgelimit durable fixed-window, `middleware.Handler` with `WithoutVerdictContext`"},
	{"edgelimit-kv", "edgelimit kv token bucket, `middleware.Handler`"},
	{"edgelimit-kv-cached", "edgelimit kv, every decision from the process cache"},
	{"edgelimit-fixed-window-lambda", "edgelimit durable fixed-window, `middleware.HTTPAPI` (Lambda)"},
	{"go-limiter", "sethvargo/go-limiter `httplimit`"},
	{"throttled", "throttled/v2 GCRA `HTTPRateLimiterCtx`"},
	{"ulule", "ulule/limiter v3 `stdlib`"},
	{"x-time-rate", "x/time/rate in a map + mutex"},
}

// mwSummary is the README's side-by-side table of the middleware part: one
// line per stack of one run, CPU time per request net of the baseline (the
// figure a busy machine disturbs least), then allocations and bytes, with
// the command, the machine and the load of that run.
func mwSummary(l *loaded) string {
	d, env := l.middleware, l.envs["middleware"]
	var w mdWriter
	w.p("| middleware (100,000 keys, memory stores) | allowed, serial | allowed, parallel | denied, parallel | allocs allowed / denied | B allowed / denied |")
	w.p("|---|---:|---:|---:|---:|---:|")
	for _, n := range mwSummaryNames {
		r := d.row(n[0])
		if r == nil {
			continue
		}
		as, dp := r.Cells[cellAllowedSerial], r.Cells[cellDeniedParallel]
		w.p("| %s | %s ns | %s ns | %s ns | %d / %d | %s / %s |", n[1], thousandsF(d.netCPU(*r, cellAllowedSerial)),
			thousandsF(d.netCPU(*r, cellAllowedParallel)), thousandsF(d.netCPU(*r, cellDeniedParallel)),
			as.Net.AllocsPerOp, dp.Net.AllocsPerOp, thousandsF(float64(as.Net.BytesPerOp)), thousandsF(float64(dp.Net.BytesPerOp)))
	}
	w.p("")
	w.p("CPU time per request (every thread of the process, the collector included) over all %d interleaved runs of benchtime", d.Count)
	w.p("%s, GOMAXPROCS %d, net of the handler and recorder alone (a denial: of an empty handler and the recorder); allocations", d.Benchtime, d.GOMAXPROCS)
	w.p("and bytes net of the same, the median run's. `%s`, %s UTC, %d cores (%s), load average %.2f at the start,",
		env.Command, env.Started.Format(time.DateTime), env.Machine.Cores, env.Machine.CPU, env.Load.Start)
	w.p("mean %.2f, max %.2f; edgelimit at %s.", env.Load.Mean, env.Load.Max, env.Machine.Commit)
	return w.String()
}

// thousandsF renders a non-negative figure rounded to an integer with
// thousands separators; a negative one (a stack cheaper than its baseline,
// within noise) as is.
func thousandsF(v float64) string {
	if v < 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return thousands(int(v + 0.5))
}

// spliceSection returns md with its section under the line heading (up to
// the next "## " heading) replaced by section, which starts with that
// heading and ends with a blank line. When md has no such section, section
// goes before the first line starting with before, or at the end.
func spliceSection(md, heading, section, before string) string {
	lines := strings.SplitAfter(md, "\n")
	join := func(ls []string) string { return strings.Join(ls, "") }
	for i, ln := range lines {
		if strings.TrimRight(ln, "\n") != heading {
			continue
		}
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "## ") {
				end = j
				break
			}
		}
		return join(lines[:i]) + section + join(lines[end:])
	}
	for i, ln := range lines {
		if strings.HasPrefix(ln, before) {
			return join(lines[:i]) + section + join(lines[i:])
		}
	}
	if md != "" && !strings.HasSuffix(md, "\n\n") {
		if !strings.HasSuffix(md, "\n") {
			md += "\n"
		}
		md += "\n"
	}
	return md + section
}

// mwPeerVersions are the compared modules' versions, as built.
func mwPeerVersions(m Machine) string {
	var out []string
	for _, p := range []string{"github.com/sethvargo/go-limiter", "github.com/throttled/throttled/v2", "github.com/ulule/limiter/v3", "golang.org/x/time"} {
		if v := m.Deps[p]; v != "" {
			out = append(out, p+" "+v)
		}
	}
	return strings.Join(out, ", ")
}

// mwAdded returns the headers a response carried beyond the handler's own
// Content-Type.
func mwAdded(r *MWResponse) string {
	var out []string
	for _, h := range r.Headers {
		if !strings.EqualFold(h, "Content-Type") {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// mwDenial describes a denial's response.
func mwDenial(r *MWResponse) string {
	return fmt.Sprintf("%d; %s; body %s, %d B", r.Status, strings.Join(r.Headers, ", "), r.ContentType, r.BodyBytes)
}

// netCPU is a cell's CPU time per request net of its baseline's.
func (d *MiddlewareData) netCPU(r MWRow, cell string) float64 {
	base, baseCell := mwBaselineOf(r.Adapter, cell)
	for _, b := range d.Baselines {
		if b.ID == base {
			return r.Cells[cell].CPUNsPerOp - b.Cells[baseCell].CPUNsPerOp
		}
	}
	return r.Cells[cell].CPUNsPerOp
}

func (d *MiddlewareData) row(id string) *MWRow {
	for i := range d.Rows {
		if d.Rows[i].ID == id && d.Rows[i].Unavailable == "" {
			return &d.Rows[i]
		}
	}
	return nil
}

func renderMiddleware(w *mdWriter, l *loaded) {
	d, env := l.middleware, l.envs["middleware"]
	w.p("%s", mwHeading)
	w.p("")
	w.p("`%s` — %s UTC, took %.0f s; load average %.2f at the start, mean %.2f, max %.2f, on %d cores. edgelimit at %s;",
		env.Command, env.Started.Format(time.DateTime), env.Seconds, env.Load.Start, env.Load.Mean, env.Load.Max,
		env.Machine.Cores, env.Machine.Commit)
	w.p("compared: %s.", mwPeerVersions(env.Machine))
	w.p("")
	if env.Load.Mean > float64(env.Machine.Cores) {
		w.p("**Other processes kept the machine busy during this run (mean load %.2f on %d cores): the wall-clock figures include", env.Load.Mean, env.Machine.Cores)
		w.p("time spent waiting for a core, the parallel ones most. The CPU-time table below is the steadier comparison; rerun on a")
		w.p("quiet machine for publishable wall-clock figures.**")
		w.p("")
	}
	w.p("Each limiter as full `net/http` middleware, configured as its documentation shows, around the same handler (it sets")
	w.p("`Content-Type` and writes a %d-byte JSON body), with the same cheap `http.ResponseWriter` (a header map, the status and a", len(mwBody))
	w.p("byte count, reset per request) and one reused `*http.Request` per goroutine. Every row limits by `%s`: %s distinct", mwKeyHeader, thousands(d.Keys))
	w.p("keys, sent in one fixed shuffled order, the same for every row, each request carrying a fresh copy of its key. *Allowed*:")
	w.p("a quota of %s per %s, which no run comes near, after a warm-up that sent every key once. *Denied*: a quota of %d per",
		thousands(int(d.AllowLimit)), windowText(d.Window), d.DenyLimit)
	w.p("%s, every key already over it (the warm-up sent each key twice: the first admitted, the second denied). Serial: one", windowText(d.Window))
	w.p("goroutine. Parallel: `b.RunParallel` at GOMAXPROCS=%d, each goroutine sending its own share of the keys. `testing.Benchmark`,", d.GOMAXPROCS)
	w.p("benchtime %s; each cell run %d time(s), run 1 of every cell before run 2 of any (each run from another cell on), and the median kept.", d.Benchtime, d.Count)
	w.p("")
	w.p("**Net**: every figure is the whole stack minus a baseline measured the same way: an allowed request minus the handler")
	w.p("and recorder alone, a denied one minus an empty handler and the recorder (a denial does not run the handler). Allocations")
	w.p("and bytes are `testing.B`'s for the whole stack minus the baseline's; allowed from the serial cell, denied from the parallel one.")
	w.p("")
	w.p("| middleware | allowed, serial ns/op | allowed, parallel ns/op | denied, parallel ns/op | allocs/op allowed / denied | B/op allowed / denied | adds to a 200 | a denial |")
	w.p("|---|---:|---:|---:|---:|---:|---|---|")
	var bad []string
	for _, r := range d.Rows {
		name := r.Name
		if r.Group == "reference" {
			name = "*for reference:* " + name
		}
		if r.Unavailable != "" {
			w.p("| %s | — | — | — | | | | not measured: %s |", name, oneLine(r.Unavailable))
			continue
		}
		as, ap, dp := r.Cells[cellAllowedSerial], r.Cells[cellAllowedParallel], r.Cells[cellDeniedParallel]
		for _, c := range []*MWCell{as, ap, dp} {
			if c.Gross.Unexpected > 0 {
				bad = append(bad, r.Name)
				break
			}
		}
		w.p("| %s | %s | %s | %s | %d / %d | %d / %d | %s | %s |", name, ns(as.Net.NsPerOp), ns(ap.Net.NsPerOp), ns(dp.Net.NsPerOp),
			as.Net.AllocsPerOp, dp.Net.AllocsPerOp, as.Net.BytesPerOp, dp.Net.BytesPerOp, mwAdded(r.Allowed), mwDenial(r.Denied))
	}
	w.p("")
	if len(bad) > 0 {
		w.p("**Some requests had the other outcome than their cell measures, so these rows do not measure what they say: %s.**", strings.Join(bad, ", "))
		w.p("")
	}
	w.p("The same cells in CPU time: the process's CPU time while the timed loops ran (every thread, the garbage collector")
	w.p("included) per request, net of the baseline's, over all %d runs. Other processes on the machine inflate it less than", d.Count)
	w.p("the wall-clock figures above (it does not count the time a goroutine waited for a core), so it is the steadier figure")
	w.p("on a shared machine. A parallel request's CPU time is both goroutines' work, so about twice its wall-clock ns/op on 2")
	w.p("idle cores.")
	w.p("")
	w.p("| middleware | allowed, serial CPU ns | allowed, parallel CPU ns | denied, parallel CPU ns |")
	w.p("|---|---:|---:|---:|")
	for _, r := range d.Rows {
		if r.Unavailable != "" {
			continue
		}
		var cells []string
		for _, c := range []string{cellAllowedSerial, cellAllowedParallel, cellDeniedParallel} {
			cells = append(cells, ns(d.netCPU(r, c)))
		}
		w.p("| %s | %s |", r.Name, strings.Join(cells, " | "))
	}
	w.p("")
	w.p("The baselines (gross; subtracted above):")
	w.p("")
	w.p("| baseline | serial ns/op | allocs/op | B/op | CPU ns | parallel ns/op | allocs/op | B/op | CPU ns |")
	w.p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, b := range d.Baselines {
		s, p := b.Cells[cellSerial], b.Cells[cellParallel]
		w.p("| %s | %s | %d | %d | %s | %s | %d | %d | %s |", b.Name, ns(s.Gross.NsPerOp), s.Gross.AllocsPerOp, s.Gross.BytesPerOp, ns(s.CPUNsPerOp),
			ns(p.Gross.NsPerOp), p.Gross.AllocsPerOp, p.Gross.BytesPerOp, ns(p.CPUNsPerOp))
	}
	w.p("")
	w.p("How each row is configured:")
	w.p("")
	for _, r := range d.Rows {
		note := r.Setup
		if r.Unavailable == "" {
			var calls []string
			for _, c := range []string{cellAllowedSerial, cellAllowedParallel, cellDeniedParallel} {
				if v := r.Cells[c].StoreCallsPerOp; v != nil {
					calls = append(calls, fmt.Sprintf("%s %.3f", c, *v))
				}
			}
			if len(calls) > 0 {
				note += "; KV calls per request: " + strings.Join(calls, ", ")
			}
		}
		w.p("- **%s**: %s.", r.Name, note)
	}
	w.p("")
	w.p("Reading it: the rows do different amounts of work, and the last two columns say what. edgelimit hashes the key before")
	w.p("a limiter sees it (SipHash-2-4 for a store in process memory, as here; HMAC-SHA-256 where the key reaches DynamoDB),")
	w.p("matches the route, and sets the RateLimit and RateLimit-Policy fields of")
	w.p("draft-ietf-httpapi-ratelimit-headers with the three legacy X-RateLimit-* headers; its 429 carries Retry-After and an")
	w.p("`application/problem+json` body naming the violated policy. The peers key their maps by the raw key and answer a denial")
	w.p("with `http.Error`'s plain text. All state is in process memory here; on Lambda a durable decision is a DynamoDB call")
	w.p("(section 2), and a kv decision is the process cache's only for a key not due for a sync (compare the two kv rows and")
	w.p("their KV calls per request: with 100,000 keys each comes back rarely). The Lambda row is edgelimit's `middleware.HTTPAPI` with an API Gateway")
	w.p("v2 event, net of the Lambda handler alone. Per-cell CPU time, every run's ns/op and the KV call counts are in")
	w.p("`bench/out/middleware.json`. To profile a cell: `cd bench && go test -run '^$' -bench 'Middleware/^edgelimit-fixed-window$/allowed-serial' -benchmem -cpuprofile cpu.out -memprofile mem.out`.")
	w.p("")
}

// windowText renders a quota's window: "30 days", "hour".
func windowText(d time.Duration) string {
	switch {
	case d == time.Hour:
		return "hour"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// mwHeadline is the headline's row for the middleware part.
func mwHeadline(w *mdWriter, d *MiddlewareData) {
	cell := func(id, name string) string {
		r := d.row(id)
		if r == nil {
			return ""
		}
		return fmt.Sprintf("%s %s / %s / %s ns (%d allocs)", name, ns(r.Cells[cellAllowedSerial].Net.NsPerOp),
			ns(r.Cells[cellAllowedParallel].Net.NsPerOp), ns(r.Cells[cellDeniedParallel].Net.NsPerOp), r.Cells[cellAllowedSerial].Net.AllocsPerOp)
	}
	var peers []string
	for _, p := range [][2]string{{"go-limiter", "go-limiter"}, {"throttled", "throttled"}, {"ulule", "ulule/limiter"}, {"x-time-rate", "x/time/rate map"}} {
		if c := cell(p[0], p[1]); c != "" {
			peers = append(peers, c)
		}
	}
	ours := joinNonEmpty(cell("edgelimit-fixed-window", "durable fixed-window"), cell("edgelimit-kv", "kv"))
	if ours == "" {
		return
	}
	w.p("| a request through the net/http middleware, %s API keys, net of the handler: allowed serial / parallel, denied parallel | %s | %s |",
		thousands(d.Keys), ours, strings.Join(slices.Clip(peers), "; "))
}
