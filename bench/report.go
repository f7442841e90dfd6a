package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// loaded is every part's results that exist under -out.
type loaded struct {
	envs       map[string]*Envelope
	decisions  *DecisionsData
	middleware *MiddlewareData
	bootstrap  *BootstrapData
	protocol   *ProtocolData
	flood      *FloodData
	kv         *KVData
}

func load(dir string) (*loaded, error) {
	l := &loaded{envs: map[string]*Envelope{}}
	for _, part := range partNames {
		b, err := os.ReadFile(filepath.Join(dir, part+".json"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var env Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			return nil, fmt.Errorf("%s.json: %w", part, err)
		}
		l.envs[part] = &env
		var target any
		switch part {
		case "decisions":
			l.decisions = &DecisionsData{}
			target = l.decisions
		case "middleware":
			l.middleware = &MiddlewareData{}
			target = l.middleware
		case "bootstrap":
			l.bootstrap = &BootstrapData{}
			target = l.bootstrap
		case "protocol":
			l.protocol = &ProtocolData{}
			target = l.protocol
		case "flood":
			l.flood = &FloodData{}
			target = l.flood
		case "kv":
			l.kv = &KVData{}
			target = l.kv
		}
		if err := json.Unmarshal(env.Data, target); err != nil {
			return nil, fmt.Errorf("%s.json data: %w", part, err)
		}
	}
	if len(l.envs) == 0 {
		return nil, fmt.Errorf("no results in %s: run `edgelimit-bench all` first", dir)
	}
	return l, nil
}

func runReport(o options) error {
	l, err := load(o.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.plots, 0o755); err != nil {
		return err
	}
	plots, err := writePlots(l, o.plots)
	if err != nil {
		return err
	}
	rel := func(p string) string {
		if r, err := filepath.Rel(filepath.Dir(o.md), p); err == nil {
			return filepath.ToSlash(r)
		}
		return p
	}
	for k, p := range plots {
		plots[k] = rel(p)
	}
	md := renderMarkdown(l, plots)
	if old, err := os.ReadFile(o.md); err == nil {
		md = keepSections(string(old), md)
	}
	if err := os.WriteFile(o.md, []byte(md), 0o644); err != nil {
		return err
	}
	logf("report: wrote %s and %d plots in %s", o.md, len(plots), o.plots)
	return nil
}

// keptHeadings are sections of BENCHMARKS.md that no part of this program
// measures: the full report carries them over from the file it replaces, as
// they are, before "What these figures do not show". The cold-start table
// comes from `make cold-start` (e2e.TestColdStart under the Lambda runtime
// emulator), not from this program; the bootstrap sizes and package init
// from `go build` and GODEBUG=inittrace=1 (the commands are in the section);
// the calendar-period and max_delay figures from `go test -bench` (their
// commands are in their sections).
var keptHeadings = []string{coldStartHeading, bootstrapHeading, calendarHeading, maxDelayHeading}

// calendarHeading and maxDelayHeading are the sections of the calendar
// periods' and max_delay's `go test -bench` figures.
const (
	calendarHeading = "## Calendar periods"
	maxDelayHeading = "## max_delay: what waiting costs an admitted request"
)

// coldStartHeading is the section of the cold-start table.
const coldStartHeading = "## Cold start: before and after the redesign (make cold-start)"

// bootstrapHeading is the section of the bootstrap sizes and init.
const bootstrapHeading = "## Bootstrap size and init"

// keptBefore is the heading kept sections go before.
const keptBefore = "## What these figures do not show"

// keepSections returns md with each of old's kept sections spliced in.
func keepSections(old, md string) string {
	for _, h := range keptHeadings {
		if sec := sectionOf(old, h); sec != "" {
			md = spliceSection(md, h, sec, keptBefore)
		}
	}
	return md
}

// sectionOf returns md's section under the line heading, up to the next
// "## " heading, ending with a blank line; "" when md has none.
func sectionOf(md, heading string) string {
	lines := strings.SplitAfter(md, "\n")
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
		sec := strings.TrimRight(strings.Join(lines[i:end], ""), "\n")
		return sec + "\n\n"
	}
	return ""
}

type mdWriter struct{ strings.Builder }

func (w *mdWriter) p(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

func ns(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func pct(v float64) string {
	if v > 0.999 && v < 1 {
		return fmt.Sprintf("%.2f%%", 100*v)
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func dollars(v float64) string {
	if v == 0 {
		return "$0"
	}
	if v < 0.01 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.3f", v)
}

func renderMarkdown(l *loaded, plots map[string]string) string {
	var w mdWriter
	w.p("# Benchmarks")
	w.p("")
	w.p("Generated by `make bench` (mk/bench.mk), which builds `bench/` (its own Go module) into `bench/out/edgelimit-bench`")
	w.p("and runs it under the repository's test-server runner with dynalite (and moto, when it starts). Do not edit by hand: rerun `make bench`.")
	w.p("Raw results, with every sample count, are in `bench/out/*.json`; `bench/out/edgelimit-bench report` rewrites this")
	w.p("file and the plots from them. Each section names the command that produced its figures.")
	w.p("")
	renderMachine(&w, l)
	renderHeadline(&w, l)
	if l.middleware != nil {
		renderMiddleware(&w, l)
	}
	if l.bootstrap != nil {
		renderBootstrap(&w, l)
	}
	if l.decisions != nil {
		renderDecisions(&w, l, plots)
	}
	if l.protocol != nil {
		renderProtocol(&w, l)
	}
	if l.flood != nil {
		renderFlood(&w, l, plots)
	}
	renderCost(&w, l)
	if l.kv != nil {
		renderKV(&w, l)
	}
	renderLimits(&w, l)
	return w.String()
}

func partOrder(l *loaded) []*Envelope {
	var out []*Envelope
	for _, p := range partNames {
		if e := l.envs[p]; e != nil {
			out = append(out, e)
		}
	}
	return out
}

func renderMachine(w *mdWriter, l *loaded) {
	envs := partOrder(l)
	m := envs[0].Machine
	w.p("## Machine")
	w.p("")
	w.p("| | |")
	w.p("|---|---|")
	w.p("| CPU | %s, %d cores |", m.CPU, m.Cores)
	w.p("| memory | %d GiB |", m.MemoryGiB)
	w.p("| OS | %s, Linux %s |", m.OSArch, m.Kernel)
	w.p("| Go | %s |", m.Go)
	if m.Commit != "" {
		w.p("| edgelimit | %s |", m.Commit)
	}
	var deps []string
	for k, v := range m.Deps {
		deps = append(deps, k+" "+v)
	}
	slices.Sort(deps)
	w.p("| compared and tools | %s |", strings.Join(deps, ", "))
	w.p("")
	w.p("The machine is shared: the 1-minute load average while each part ran (sampled every 2 s) was")
	w.p("")
	w.p("| part | command | started (UTC) | took | load at start | mean | max | at end |")
	w.p("|---|---|---|---|---|---|---|---|")
	for _, e := range envs {
		w.p("| %s | `%s` | %s | %.0f s | %.2f | %.2f | %.2f | %.2f |", e.Part, e.Command, e.Started.Format(time.DateTime),
			e.Seconds, e.Load.Start, e.Load.Mean, e.Load.Max, e.Load.End)
	}
	w.p("")
	w.p("A load above the core count means other processes competed for the CPU: compare figures within one run, not")
	w.p("across machines or runs.")
	w.p("")
}

// find returns the decision row of the named limiter.
func (d *DecisionsData) find(prefix string) *DecisionRow {
	for i := range d.Rows {
		if strings.HasPrefix(d.Rows[i].Name, prefix) && d.Rows[i].Unavailable == "" {
			return &d.Rows[i]
		}
	}
	return nil
}

func (f *FloodData) phase(id string) *FloodPhase {
	for i := range f.Phases {
		if f.Phases[i].ID == id && f.Phases[i].Unavailable == "" {
			return &f.Phases[i]
		}
	}
	return nil
}

// protoAgg sums a protocol's runs matching filter.
type protoAgg struct {
	decisions, allowed, denied, falseAllows, spurious, conflicts int64
	calls, allowedCalls, deniedCalls                             Snapshot
}

func aggRuns(runs []ProtocolRun, id, alg string, filter func(ProtocolRun) bool) (protoAgg, bool) {
	a := protoAgg{calls: Snapshot{}, allowedCalls: Snapshot{}, deniedCalls: Snapshot{}}
	found := false
	for _, r := range runs {
		if r.Protocol != id || (alg != "" && r.Algorithm != alg) || (filter != nil && !filter(r)) {
			continue
		}
		found = true
		a.decisions += r.Decisions
		a.allowed += r.Allowed
		a.denied += r.Denied
		a.falseAllows += r.FalseAllows
		a.spurious += r.SpuriousDenials
		a.conflicts += r.Conflicts
		a.calls = a.calls.Add(r.Calls)
		a.allowedCalls = a.allowedCalls.Add(r.AllowedCalls)
		a.deniedCalls = a.deniedCalls.Add(r.DeniedCalls)
	}
	return a, found
}

func (p *ProtocolData) run(id, alg, scenario string, clients int) *ProtocolRun {
	for i := range p.Runs {
		r := &p.Runs[i]
		if r.Protocol == id && (alg == "" || r.Algorithm == alg) && r.Scenario == scenario && r.Clients == clients {
			return r
		}
	}
	return nil
}

func renderHeadline(w *mdWriter, l *loaded) {
	w.p("## Headline")
	w.p("")
	w.p("| measure | edgelimit | for comparison |")
	w.p("|---|---|---|")
	if d := l.decisions; d != nil {
		fw := d.find("edgelimit durable fixed-window")
		kv := d.find("edgelimit kv token-bucket (cached)")
		sg := d.find("edgelimit signed")
		mw := d.find("edgelimit middleware")
		xr := d.find("golang.org/x/time/rate")
		gl := d.find("github.com/sethvargo/go-limiter")
		th := d.find("github.com/throttled")
		cell := func(r *DecisionRow, name string) string {
			if r == nil || r.Parallel == nil {
				return ""
			}
			return fmt.Sprintf("%s %s ns (%d allocs)", name, ns(r.Parallel.NsPerOp), r.Parallel.AllocsPerOp)
		}
		w.p("| in-process decision, parallel, 100,000 keys (ns/op) | %s | %s |",
			joinNonEmpty(cell(fw, "durable fixed-window (memory)"), cell(kv, "kv cached"), cell(sg, "signed"), cell(mw, "whole Lambda middleware")),
			joinNonEmpty(cell(xr, "x/time/rate"), cell(gl, "go-limiter"), cell(th, "throttled GCRA")))
	}
	if d := l.middleware; d != nil {
		mwHeadline(w, d)
	}
	if p := l.protocol; p != nil {
		ow := p.run("one-write", fixedWindow, "hot", 64)
		rr := p.run("rtw-retry", "", "hot", 64)
		ro := p.run("rtw-once", "", "hot", 64)
		rb := p.run("rtw-blind", "", "hot", 64)
		if ow != nil && rr != nil && ro != nil && rb != nil {
			w.p("| one hot key, 64 concurrent clients, dynalite | one conditional write: %.2f calls/decision, %d false allows, %d spurious denials, %.0f decisions/s | read-then-write with ≤%d retries: %.2f calls/decision, %d spurious denials, %.0f/s; without retry: %d spurious denials; unconditional: %d false allows |",
				ow.CallsPerDecision(), ow.FalseAllows, ow.SpuriousDenials, ow.PerSec, p.Retries, rr.CallsPerDecision(), rr.SpuriousDenials, rr.PerSec, ro.SpuriousDenials, rb.FalseAllows)
		}
	}
	if f := l.flood; f != nil {
		none := f.phase("none")
		var p95s, denied, cpus []string
		for _, ph := range f.Phases {
			if ph.Unavailable != "" || ph.Policy == "" || ph.ID == "signed" {
				continue
			}
			p95s = append(p95s, fmt.Sprintf("%s %s ms", ph.ID, ms(ph.Legit.All.P95)))
			denied = append(denied, fmt.Sprintf("%s %s", ph.ID, pct(ph.Flood.DeniedShare())))
			cpus = append(cpus, fmt.Sprintf("%s %s", ph.ID, pct(ph.ServerCPU)))
		}
		if none != nil && len(p95s) > 0 {
			w.p("| flood of one client on a CPU-bound search (section 3): legitimate client's p95 | %s | %s ms without a limiter |", strings.Join(p95s, "; "), ms(none.Legit.All.P95))
			w.p("| … share of the flood answered 429 | %s | 0%% without a limiter |", strings.Join(denied, "; "))
			w.p("| … server CPU, of its one core | %s | %s without a limiter |", strings.Join(cpus, "; "), pct(none.ServerCPU))
		}
		var dc []string
		for _, id := range []string{"durable-gcra", "durable-fw"} {
			on, off := f.phase(id), f.phase(id+"-nodc")
			if on != nil && off != nil {
				dc = append(dc, fmt.Sprintf("%s: %.3f with the deny cache, %.3f without", id, on.CallsPer("denied"), off.CallsPer("denied")))
			}
		}
		if len(dc) > 0 {
			w.p("| … store calls per denied request | %s | |", strings.Join(dc, "; "))
		}
	}
	if rows := costRows(l); len(rows) > 0 {
		var ours, theirs []string
		for _, r := range rows {
			s := fmt.Sprintf("%s %s allowed", r.Name, dollars(usd(r.WRUAllowed, r.RRUAllowed)))
			if r.HasDenied {
				s += fmt.Sprintf(", %s denied", dollars(usd(r.WRUDenied, r.RRUDenied)))
			}
			switch {
			case strings.HasPrefix(r.Name, "baseline read-then-write"):
				theirs = append(theirs, s)
			case strings.Contains(r.Name, "deny cache"), strings.HasPrefix(r.Name, "baseline"):
			case r.Name == "durable sliding-window", r.Name == "durable sliding-log":
			default:
				ours = append(ours, s)
			}
		}
		w.p("| DynamoDB on-demand, $ per million decisions (us-east-1 list prices; section 4) | %s | %s |", strings.Join(ours, "; "), strings.Join(theirs, "; "))
	}
	if f := l.flood; f != nil {
		var parts []string
		for _, id := range []string{"durable-fw", "durable-fw-nodc", "durable-gcra", "durable-gcra-nodc", "kv"} {
			ph := f.phase(id)
			if ph == nil {
				continue
			}
			var n int64
			for _, v := range ph.Requests {
				n += v
			}
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", id, dollars(usd(ph.AllCalls.WRU/float64(n), ph.AllCalls.RRU/float64(n)))))
			}
		}
		if len(parts) > 0 {
			w.p("| … the same per million requests of the flood (mostly denials) | %s | |", strings.Join(parts, "; "))
		}
	}
	w.p("")
}

const fixedWindow = "fixed-window"

func joinNonEmpty(s ...string) string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, "; ")
}

func renderDecisions(w *mdWriter, l *loaded, plots map[string]string) {
	d := l.decisions
	w.p("## 1. Cost of one decision, in process")
	w.p("")
	w.p("`%s` — `testing.Benchmark` from a Go program, benchtime %s, median of %d run(s); %s distinct keys (22-byte keyed",
		l.envs["decisions"].Command, d.Benchtime, d.Count, thousands(d.Keys))
	w.p("hashes, as the engine hands them over, each request with a fresh copy of its key), every decision an admission. Serial: one")
	w.p("goroutine walks all keys in turn. Parallel: `b.RunParallel` with GOMAXPROCS=%d, each goroutine walking its own share of the keys", d.GOMAXPROCS)
	w.p("(no hot key, and no two goroutines on one key, which a signed token chain needs).")
	w.p("")
	w.p("| limiter | serial ns/op | allocs/op | B/op | parallel ns/op | allocs/op | setup |")
	w.p("|---|---:|---:|---:|---:|---:|---|")
	for _, r := range d.Rows {
		if r.Unavailable != "" {
			w.p("| %s | — | | | — | | not in this build: %s |", r.Name, oneLine(r.Unavailable))
			continue
		}
		note := r.Setup
		if n := r.Serial.Unexpected + r.Parallel.Unexpected; n > 0 {
			note += fmt.Sprintf(" (**%d decisions had the other outcome: this row does not measure what it says**)", n)
		}
		w.p("| %s | %s | %d | %d | %s | %d | %s |", r.Name, ns(r.Serial.NsPerOp), r.Serial.AllocsPerOp, r.Serial.BytesPerOp,
			ns(r.Parallel.NsPerOp), r.Parallel.AllocsPerOp, note)
	}
	w.p("")
	if p := plots["decisions"]; p != "" {
		w.p("![ns per decision, serial and parallel](%s)", p)
		w.p("")
	}
	w.p("Reading it: the durable and kv rows decide from process memory here (the memory store, the kv cache); on Lambda a")
	w.p("durable decision is one DynamoDB round trip (section 2) and a kv one is usually a cache hit. The middleware row is the")
	w.p("whole per-request overhead of `middleware.HTTPAPI`: event to key, keyed hash, decision, RateLimit headers.")
	w.p("")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "\\|")
	return s
}

func renderProtocol(w *mdWriter, l *loaded) {
	p := l.protocol
	w.p("## 2. One conditional write vs read-then-write, against dynalite")
	w.p("")
	w.p("`%s`", l.envs["protocol"].Command)
	w.p("")
	w.p("Each protocol decides a fixed number of requests with 1, 8 and 64 concurrent clients (goroutines sharing one SDK client)")
	w.p("against the dynalite that `make bench` starts, on two key sets:")
	w.p("")
	hot, spread := protoScenarios[0], protoScenarios[1]
	w.p("- **hot**: one key, limit %d, %d requests — every client races for the same item;", hot.limit, hot.offered)
	w.p("- **spread**: %d keys, limit %d, %d requests each, request *i* for key *i* mod %d (concurrent requests hit distinct keys).",
		spread.keys, spread.limit, spread.offered/spread.keys, spread.keys)
	w.p("")
	w.p("The fixed-window protocol and the baselines run at %s clients; the other algorithms and the deny cache at %s.", ints(protoClients), ints(secondaryClients))
	w.p("")
	w.p("The clock is frozen at one instant (window %s), so every request of a run falls in one window and the counts", p.Window)
	w.p("measure the protocol alone. Protocols:")
	w.p("")
	w.p("- **one conditional write** — durablecounter's `DynamoStore` (`UpdateItem` … `ADD n :d` if `attribute_not_exists(n) OR n <= :m`);")
	w.p("  with the deny cache on or off as labelled.")
	w.p("- **baseline: read, then conditional write** — implemented in `bench/baseline.go`: a strongly consistent `GetItem`, the")
	w.p("  decision in the client, then `PutItem` (new item, `attribute_not_exists(pk)`) or `UpdateItem` with `v = :v` on a version")
	w.p("  attribute; a failed check is a conflict, retried from the read up to %d times (or not at all), then answered as a denial.", p.Retries)
	w.p("- **baseline: read, then unconditional write** — the same without the version check (last writer wins).")
	w.p("")
	w.p("*Store calls* are the SDK's HTTP requests, counted by operation. *False allows*: admissions beyond a key's limit.")
	w.p("*Spurious denials*: quota a key was left with although as many of its requests were denied — Σ max(0, min(decided, limit) − allowed).")
	w.p("Each run is capped at %s, and the part has a time budget; a capped or skipped run says so.", p.TimeCap)
	w.p("")
	for _, sc := range protoScenarios {
		w.p("### %s: %d key(s), limit %d, %d requests", sc.name, sc.keys, sc.limit, sc.offered)
		w.p("")
		w.p("| protocol | clients | decisions/s | p50 µs | p99 µs | store calls/decision | calls by operation | false allows | spurious denials | conflicts |")
		w.p("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
		for _, r := range p.Runs {
			if r.Scenario != sc.name {
				continue
			}
			if r.Skipped {
				w.p("| %s (skipped: the part's time budget was spent) | %d | | | | | | | | |", r.Label, r.Clients)
				continue
			}
			note := ""
			if r.Truncated {
				note = fmt.Sprintf(" (capped: %d of %d)", r.Decisions, r.Offered)
			}
			if r.Errors > 0 {
				note += fmt.Sprintf(" (%d errors)", r.Errors)
			}
			w.p("| %s%s | %d | %.0f | %.0f | %.0f | %.2f | %s | %d | %d | %d |", r.Label, note, r.Clients, r.PerSec, r.P50us, r.P99us,
				r.CallsPerDecision(), opsPer(r.Calls, r.Decisions), r.FalseAllows, r.SpuriousDenials, r.Conflicts)
		}
		w.p("")
	}
	if len(p.Moto) > 0 {
		w.p("### The same on moto, for DynamoDB's semantics")
		w.p("")
		w.p("moto implements what dynalite lacks and DynamoDB has — `ReturnValuesOnConditionCheckFailure=ALL_OLD` (a denial carries")
		w.p("the item, so no read follows it) and `TransactWriteItems` — so the cost model takes durable call counts from these runs. One")
		w.p("client (moto serves one request at a time); smaller key sets. Latencies are moto's.")
		w.p("")
		w.p("| protocol | key set | decisions/s | p50 µs | store calls/decision | calls per allowed | calls per denied | false allows | spurious denials |")
		w.p("|---|---|---:|---:|---:|---|---|---:|---:|")
		for _, r := range p.Moto {
			if r.Skipped {
				w.p("| %s (skipped: the part's time budget was spent) | %s | | | | | | | |", r.Label, r.Scenario)
				continue
			}
			w.p("| %s | %s: %d key(s), limit %d, %d requests | %.0f | %.0f | %.2f | %s | %s | %d | %d |", r.Label, r.Scenario, r.Keys, r.Limit, r.Offered,
				r.PerSec, r.P50us, r.CallsPerDecision(), opsPer(r.AllowedCalls, r.Allowed), opsPer(r.DeniedCalls, r.Denied), r.FalseAllows, r.SpuriousDenials)
		}
		w.p("")
	}
	if len(p.Unavailable) > 0 {
		var keys []string
		for k := range p.Unavailable {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.p("Not in this build of durablecounter, so not measured:")
		w.p("")
		for _, k := range keys {
			w.p("- %s: %s", k, oneLine(p.Unavailable[k]))
		}
		w.p("")
	}
	w.p("dynalite is a single-threaded Node.js server on the same 2 cores, so decisions/s and latencies here are dynalite's")
	w.p("and this machine's, not DynamoDB's (single-digit milliseconds per call, far higher throughput per key set); the calls,")
	w.p("false allows and spurious denials are properties of the protocols and carry over.")
	w.p("")
}

// opsPer renders calls per decision by operation.
func opsPer(s Snapshot, n int64) string {
	if n == 0 {
		return ""
	}
	var ops []string
	for k := range s.Calls {
		ops = append(ops, k)
	}
	slices.Sort(ops)
	var parts []string
	for _, k := range ops {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(s.Calls[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

func renderFlood(w *mdWriter, l *loaded, plots map[string]string) {
	f := l.flood
	w.p("## 3. The flood experiment")
	w.p("")
	w.p("`%s`", l.envs["flood"].Command)
	w.p("")
	w.p("**The published experiment** put a CPU-bound endpoint (an unindexed `LIKE '%%keyword%%'` scan) on a 2-vCPU host and")
	w.p("saturated it from one client: without a limiter every request slowed (p95 ≈ 960 ms, CPU 100%%); with nginx")
	w.p("`limit_req rate=10r/s burst=20 nodelay`, 99.6%% of the flood got 429, CPU fell to 10–25%% and allowed requests kept")
	w.p("p95 ≈ 137 ms.")
	w.p("")
	w.p("**Here**, on our stack:")
	w.p("")
	w.p("- The server is a separate process running the `search` example function (`functions/handlers.NewSearch`: an unindexed,")
	w.p("  case-folding substring scan of an in-memory product table, %s of text; one search for %q costs **%.1f ms of CPU**,", bytesStr(f.CorpusBytes), f.Query, f.SearchCPUms)
	w.p("  measured in the server at start-up) behind exactly the wiring of `edgelimit serve`: `setup.Limiters` → `edgelimit.New` →")
	w.p("  `middleware.HTTPAPI` → the local API Gateway v2 emulation (`internal/apigwlocal`) on `net/http`. Durable and kv state")
	w.p("  is in dynalite, as it would be in DynamoDB; signed needs no store.")
	w.p("- **The 2 cores are shared, and split on purpose**: the server runs with GOMAXPROCS=%d, the load generator (both clients,", f.ServerProcs)
	w.p("  one process) with GOMAXPROCS=%d, and dynalite (single-threaded Node.js) beside them. So \"100%% CPU\" below means one", f.LoadgenProcs)
	w.p("  core, the server's whole budget; the table gives each process's CPU in cores so the split is visible.")
	w.p("- **The flood**: one client at %d requests/s over at most %d connections from 127.0.0.2 (vegeta, open loop; when", f.FloodRate, f.FloodConns)
	w.p("  all %d connections wait, it becomes a closed loop — that is what saturates the server without a limiter).", f.FloodConns)
	w.p("  **The legitimate client**: %d requests/s from 127.0.0.3, well inside every policy (for the signed strategies it is", f.LegitRate)
	w.p("  edgelimit's reference client, `client.Transport`: it keeps its tokens and solves proofs of work, and its latency")
	w.p("  includes that work). Each phase runs %.0f s (requests bounded by rate × duration, 10 s timeout), on loopback only,", f.PhaseSeconds)
	w.p("  against a fresh server process and table. Policies key on the client address (`key: ip`).")
	w.p("")
	w.p("| configuration | legit p50 / p95 / p99 ms | legit non-2xx | flood sent | flood 429 | flood allowed p50 / p95 / p99 ms | server CPU (of its 1 core) | dynalite CPU | load generator CPU | decided by on_store_error | limiter p50 / p99 µs | store calls per denied request | per allowed request |")
	w.p("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|")
	for _, ph := range f.Phases {
		if ph.Unavailable != "" {
			w.p("| %s | not in this build: %s | | | | | | | | | | | |", ph.Label, oneLine(ph.Unavailable))
			continue
		}
		calls := func(class string) string {
			if ph.Policy == "" {
				return "—"
			}
			return fmt.Sprintf("%.3f", ph.CallsPer(class))
		}
		degraded, lim := "—", "—"
		if ph.Policy != "" && ph.Limiter.Decisions > 0 {
			degraded = fmt.Sprintf("%d of %d", ph.Limiter.Degraded, ph.Limiter.Decisions)
			lim = fmt.Sprintf("%.0f / %.0f", ph.Limiter.P50us, ph.Limiter.P99us)
		}
		w.p("| %s | %s / %s / %s | %d of %d | %d | %s | %s / %s / %s | %s | %s | %s | %s | %s | %s | %s |", ph.Label,
			ms(ph.Legit.All.P50), ms(ph.Legit.All.P95), ms(ph.Legit.All.P99), ph.Legit.Sent-ph.Legit.OK, ph.Legit.Sent,
			ph.Flood.Sent, pct(ph.Flood.DeniedShare()),
			ms(ph.Flood.Allowed.P50), ms(ph.Flood.Allowed.P95), ms(ph.Flood.Allowed.P99),
			pct(ph.ServerCPU), pct(ph.StoreCPU), pct(ph.LoadgenCPU), degraded, lim, calls("denied"), calls("allowed"))
	}
	w.p("")
	w.p("The flood offered %d requests in each phase (%d/s × %.0f s); *flood sent* is what it managed: fewer when the server's", int(float64(f.FloodRate)*f.PhaseSeconds), f.FloodRate, f.PhaseSeconds)
	w.p("slowness held all %d connections. *Decided by on_store_error* counts policy decisions the store did not make (an error, or", f.FloodConns)
	w.p("the store call's 100 ms budget ran out) — with `on_store_error: allow` each is an admission. *Limiter* is the engine's")
	w.p("time per policy decision, store call included.")
	w.p("")
	if p := plots["flood-latency"]; p != "" {
		w.p("![legitimate client's latency percentiles per configuration](%s)", p)
		w.p("")
	}
	if p := plots["flood-cpu"]; p != "" {
		w.p("![server CPU per configuration](%s)", p)
		w.p("")
	}
	maxGen := 0.0
	for _, ph := range f.Phases {
		maxGen = max(maxGen, ph.LoadgenCPU)
	}
	w.p("The load generator used at most %s of its core in any phase, so the offered load was not limited by it. Host CPU", pct(maxGen))
	w.p("busy (all cores, other users of the machine included) per phase: %s.", hostBusy(f))
	w.p("")
	w.p("Two properties of the durable phases shape these rows. A deny-cache entry lasts as long as the denial it records: until")
	w.p("the fixed window ends (up to 1 s here), but for gcra at 10/s only until the next token is due (≤ 100 ms), so a flooding")
	w.p("client's requests reach the store again up to ten times a second, all of its in-flight requests at once. And dynalite")
	w.p("ignores `ReturnValuesOnConditionCheckFailure`, so a gcra denial that reaches it costs a `GetItem` after the failed")
	w.p("`UpdateItem` (2 calls); on DynamoDB, as on moto, it is one call (section 2).")
	w.p("")
	w.p("Reading it:")
	w.p("")
	w.p("- *Store calls per denied request* count the DynamoDB calls made while answering the 429s (attributed through the")
	w.p("  request's context); with the deny cache a repeat offender is answered from the process until its reset.")
	var collapsed []string
	for _, ph := range f.Phases {
		if ph.Unavailable == "" && ph.Limiter.Decisions > 0 && float64(ph.Limiter.Degraded) > 0.05*float64(ph.Limiter.Decisions) {
			collapsed = append(collapsed, ph.ID)
		}
	}
	if len(collapsed) > 0 {
		w.p("- **Fail-open under saturation** (%s): more than 5%% of the policy decisions were made by `on_store_error`, because", strings.Join(collapsed, ", "))
		w.p("  the store call ran out of its 100 ms budget. Once fail-open admissions fill the server's one core with searches, the")
		w.p("  goroutine waiting for the store's answer waits for the CPU too, so later store calls time out as well and the flood is")
		w.p("  admitted: a self-sustaining state. It needs a long-lived process serving many requests at once on few cores (`edgelimit")
		w.p("  serve`, a container); a Lambda instance serves one request at a time. `on_store_error: deny`, the memory store, a")
		w.p("  deny cache that absorbs the flood, or a strategy that decides locally (kv, signed) avoid it — compare their rows.")
	}
	var pow, plain *FloodPhase
	for i := range f.Phases {
		switch ph := &f.Phases[i]; {
		case ph.Unavailable != "":
		case ph.ID == "durable-gcra-pow":
			pow = ph
		case ph.ID == "durable-gcra":
			plain = ph
		}
	}
	if pow != nil && plain != nil {
		w.p("- **The soft threshold** (`proof_of_work: {above: 10, bits: 16}` on the search policy, issue #13): a flood that")
		w.p("  solves nothing is refused as without it, not more: the bucket still refills at 10/s and each refill lets one flood")
		w.p("  request in below the threshold. What the threshold buys is against a client that does solve: between 10 and 20 units")
		w.p("  in use each of its requests costs about 2^16 SHA-256, where the flood here pays nothing and gets 429s that carry a")
		w.p("  challenge. Its price is on the store: a gated admission is a peek and a spend (%.3f calls per allowed request against", pow.CallsPer("allowed"))
		w.p("  %.3f without the threshold), and the challenges are answered from the process (%.3f calls per denied request).", plain.CallsPer("allowed"), pow.CallsPer("denied"))
	}
	w.p("- The signed strategy keeps no state, so it can only slow a flood that cooperates or pays: with proof of work a client")
	w.p("  that solves nothing gets nothing; without it, a client that drops its token starts a fresh window with every request")
	w.p("  (the row shows what that costs the server). `docs/signed.md` discusses the trade-off.")
	w.p("")
	if len(f.Sweep) > 0 {
		w.p("### Admitted vs offered load")
		w.p("")
		w.p("Same server and policies; one client offers each rate for %.0f s (open loop, ≤ %d connections), each step from a fresh", f.SweepStep, f.FloodConns)
		w.p("loopback address so that each starts with a full quota. Admitted = 2xx responses / step length, so a policy's burst")
		w.p("shows up on top of its rate. Cells: admitted/s (server CPU, of its one core). Columns are the configurations of the table")
		w.p("above with the same names.")
		w.p("")
		head := "| offered/s |"
		sep := "|---:|"
		for _, s := range f.Sweep {
			head += " " + s.ID + " |"
			sep += "---:|"
		}
		w.p("%s", head)
		w.p("%s", sep)
		for i, rate := range sweepRates {
			row := fmt.Sprintf("| %d |", rate)
			for _, s := range f.Sweep {
				if i < len(s.Points) {
					pt := s.Points[i]
					row += fmt.Sprintf(" %.1f (CPU %s) |", pt.Admitted, pct(pt.ServerCPU))
				} else {
					row += " |"
				}
			}
			w.p("%s", row)
		}
		w.p("")
		if p := plots["admitted"]; p != "" {
			w.p("![admitted vs offered load per strategy](%s)", p)
			w.p("")
		}
	}
}

func hostBusy(f *FloodData) string {
	var parts []string
	for _, ph := range f.Phases {
		if ph.Unavailable == "" {
			parts = append(parts, fmt.Sprintf("%s %s", ph.ID, pct(ph.HostBusy)))
		}
	}
	return strings.Join(parts, ", ")
}

func bytesStr(n int) string {
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

// costRows derives the cost model's rows from the measured unit counts.
func costRows(l *loaded) []CostRow {
	var rows []CostRow
	if p := l.protocol; p != nil {
		type src struct {
			id, alg, name string
			moto          bool // prefer moto's runs
		}
		var srcs []src
		for _, alg := range durableAlgorithms {
			srcs = append(srcs, src{"one-write", alg, "durable " + alg, true})
		}
		for _, alg := range durableAlgorithms {
			srcs = append(srcs, src{"one-write+deny-cache", alg, "durable " + alg + " + deny cache", false})
		}
		srcs = append(srcs,
			src{"batch", fixedWindow, "durable, 2 policies on one route (AllowBatch)", true},
			src{"rtw-retry", "", fmt.Sprintf("baseline read-then-write, ≤%d retries", p.Retries), false},
			src{"rtw-once", "", "baseline read-then-write, no retry", false},
			src{"rtw-blind", "", "baseline read-then-unconditional-write", false},
		)
		for _, s := range srcs {
			a, ok := aggRuns(p.Moto, s.id, s.alg, nil)
			source := "section 2, moto (1 client, hot and spread)"
			if !s.moto || !ok {
				a, ok = aggRuns(p.Runs, s.id, s.alg, nil)
				source = "section 2, dynalite (all runs)"
			}
			if !ok {
				continue
			}
			r := CostRow{Name: s.name, Source: source, HasDenied: a.denied > 0}
			r.WRUAllowed, r.RRUAllowed, r.CallsAllowed = unitsPer(a.allowedCalls, a.allowed)
			r.WRUDenied, r.RRUDenied, r.CallsDenied = unitsPer(a.deniedCalls, a.denied)
			rows = append(rows, r)
		}
	}
	if f := l.flood; f != nil {
		if ph := f.phase("kv"); ph != nil {
			r := CostRow{Name: "kv token bucket", Source: "section 3, kv phase (flood + legitimate client)", HasDenied: ph.Requests["denied"] > 0}
			r.WRUAllowed, r.RRUAllowed, r.CallsAllowed = unitsPer(ph.AllowedCalls, ph.Requests["allowed"])
			r.WRUDenied, r.RRUDenied, r.CallsDenied = unitsPer(ph.DeniedCalls, ph.Requests["denied"])
			rows = append(rows, r)
		}
		if ph := f.phase("signed-pow"); ph != nil {
			rows = append(rows, CostRow{Name: "signed (+ proof of work)", Source: "no store", HasDenied: true})
		}
	}
	if len(rows) > 0 && !slices.ContainsFunc(rows, func(r CostRow) bool { return strings.HasPrefix(r.Name, "durable, 2 policies") }) {
		// Without moto the batch is not measured (dynalite lacks
		// transactions): durablecounter's documented call pattern on
		// DynamoDB is one TransactWriteItems of the two updates and one
		// BatchGetItem of the two counts.
		rows = append(rows, CostRow{Name: "durable, 2 policies on one route (transaction)", Source: "computed, not measured: TransactWriteItems of 2 updates (4 WRU) + BatchGetItem of 2 keys, strongly consistent (2 RRU)",
			WRUAllowed: 4, RRUAllowed: 2, CallsAllowed: 2, WRUDenied: 4, RRUDenied: 2, CallsDenied: 2, HasDenied: true})
	}
	return rows
}

func renderCost(w *mdWriter, l *loaded) {
	rows := costRows(l)
	if len(rows) == 0 {
		return
	}
	w.p("## 4. Cost model: DynamoDB on-demand, per million decisions")
	w.p("")
	w.p("Pricing assumed (Amazon DynamoDB on-demand, Standard table class, us-east-1 list prices since the 1 November 2024")
	w.p("reduction; edit `bench/cost.go` for another region): **$%.3f per million write request units, $%.3f per million read", pricePerMillionWRU, pricePerMillionRRU)
	w.p("request units**. Units are counted from each request the SDK sent (`bench/calls.go`): `UpdateItem`/`PutItem` 1 WRU")
	w.p("(also when the condition fails — DynamoDB bills a failed conditional write), strongly consistent `GetItem` 1 RRU,")
	w.p("eventually consistent 0.5 RRU, `BatchGetItem` per key, transactions double (2 WRU per item of `TransactWriteItems`).")
	w.p("Items are under 1 KB. Storage, streams, backups and data transfer are left out; the table's TTL deletes are free.")
	w.p("")
	w.p("| strategy / protocol | store calls per allowed | WRU + RRU per allowed | $ per million allowed | store calls per denied | WRU + RRU per denied | $ per million denied | source |")
	w.p("|---|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		denied := "| — | — | — "
		if r.HasDenied {
			denied = fmt.Sprintf("| %.2f | %.2f + %.2f | %s ", r.CallsDenied, r.WRUDenied, r.RRUDenied, dollars(usd(r.WRUDenied, r.RRUDenied)))
		}
		w.p("| %s | %.2f | %.2f + %.2f | %s %s| %s |", r.Name, r.CallsAllowed, r.WRUAllowed, r.RRUAllowed,
			dollars(usd(r.WRUAllowed, r.RRUAllowed)), denied, r.Source)
	}
	w.p("")
	if f := l.flood; f != nil {
		w.p("Under the flood of section 3 (every request of the phase, flood and legitimate client, allowed and denied):")
		w.p("")
		w.p("| configuration | requests | WRU | RRU | $ per million requests |")
		w.p("|---|---:|---:|---:|---:|")
		for _, ph := range f.Phases {
			if ph.Unavailable != "" || ph.Policy == "" {
				continue
			}
			var n int64
			for _, v := range ph.Requests {
				n += v
			}
			if n == 0 {
				continue
			}
			w.p("| %s | %d | %.0f | %.1f | %s |", ph.Label, n, ph.AllCalls.WRU, ph.AllCalls.RRU,
				dollars(usd(ph.AllCalls.WRU/float64(n), ph.AllCalls.RRU/float64(n))))
		}
		w.p("")
	}
}

func renderLimits(w *mdWriter, l *loaded) {
	w.p("## What these figures do not show")
	w.p("")
	w.p("- **DynamoDB itself.** The store is dynalite on the same machine (no network, no AWS account here). Call counts,")
	w.p("  request units, false allows and spurious denials are protocol properties and carry over; latencies and throughput")
	w.p("  do not (DynamoDB answers in single-digit milliseconds over the network and scales per partition).")
	w.p("- **Transactions under load.** dynalite lacks `TransactWriteItems`; a route with several durable policies is measured on")
	w.p("  moto only (one client), or, without moto, its cost row is computed from durablecounter's documented call pattern.")
	w.p("- **Lambda.** The server is one long-lived process on one core; on Lambda each instance serves one request at a time")
	w.p("  and a flood scales instances out (and the bill) instead of queueing — the limiter's value there is the bill and the")
	w.p("  downstream, and its per-instance deny cache is per instance.")
	w.p("- **A quiet machine.** The cores are shared with other work (see the load averages above); rerun `make bench` on a")
	w.p("  quiet machine for publishable figures.")
	w.p("")
}

// ints renders 1, 8 and 64.
func ints(v []int) string {
	var s []string
	for _, n := range v {
		s = append(s, fmt.Sprint(n))
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// thousands renders 100000 as 100,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
