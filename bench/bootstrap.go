package main

// The bootstrap part: each example function's bootstrap beside the floor
// every DynamoDB-backed Lambda function pays (bench/lambdafloor:
// aws-lambda-go and the SDK's DynamoDB client doing one UpdateItem), built
// in the same run with the functions' flags (mk/lambda.mk), and their
// package init as the Go runtime reports it (GODEBUG=inittrace=1), the
// binaries run in interleaved rounds; then where the bytes above the floor
// go, by package, from the symbol sizes of unstripped builds.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// bootFunctions are the example functions (mk/lambda.mk's LAMBDA_FUNCTIONS).
var bootFunctions = []string{"paid", "contact", "search", "tts"}

// bootFloor names the floor among the binaries.
const bootFloor = "floor"

// bootTags and bootLdflags are mk/lambda.mk's LAMBDA_GOFLAGS.
const (
	bootTags    = "lambda.norpc,nethttpomithttp2,edgelimit.noyaml,edgelimit.nopowgate"
	bootLdflags = "-s -w"
)

// BootstrapData is the result of the bootstrap part.
type BootstrapData struct {
	Flags string `json:"flags"`
	// Rounds is how many times each linux/amd64 binary was run for its init.
	Rounds int        `json:"rounds"`
	Rows   []BootRow  `json:"rows"`
	Groups []BootPkgs `json:"groups"`
}

// BootRow is one binary: its sizes and its package init.
type BootRow struct {
	Name       string  `json:"name"`
	ARM64Bytes int64   `json:"arm64_bytes"`
	AMD64Bytes int64   `json:"amd64_bytes"`
	InitMs     float64 `json:"init_ms_median"`
	InitMinMs  float64 `json:"init_ms_min"`
	InitBytes  int64   `json:"init_bytes"`
	InitAllocs int64   `json:"init_allocs"`
}

// BootPkgs is one package's symbol bytes (text, read-only data, data;
// not the pclntab) in a function's unstripped arm64 build and in the
// floor's.
type BootPkgs struct {
	Function string           `json:"function"`
	Packages map[string]int64 `json:"packages"`
	Floor    map[string]int64 `json:"floor"`
}

func runBootstrap(ctx context.Context, o options) (any, error) {
	dir, err := os.MkdirTemp("", "edgelimit-bootstrap")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rounds := 41
	if o.quick {
		rounds = 7
	}
	d := &BootstrapData{Flags: fmt.Sprintf("CGO_ENABLED=0 GOOS=linux GOARCH=… go build -tags %s -trimpath -ldflags %q", bootTags, bootLdflags), Rounds: rounds}
	names := append(slices.Clone(bootFunctions), bootFloor)
	bins := map[string]string{}
	for _, name := range names {
		row := BootRow{Name: name}
		for _, arch := range []string{"arm64", "amd64"} {
			out := filepath.Join(dir, arch, name)
			if err := bootBuild(ctx, o, name, arch, out, true); err != nil {
				return nil, err
			}
			st, err := os.Stat(out)
			if err != nil {
				return nil, err
			}
			if arch == "arm64" {
				row.ARM64Bytes = st.Size()
			} else {
				row.AMD64Bytes = st.Size()
				bins[name] = out
			}
		}
		d.Rows = append(d.Rows, row)
	}
	// Init, in rounds: every binary once per round, from a rotating start.
	samples := map[string][]initSample{}
	if runtime.GOARCH == "amd64" && runtime.GOOS == "linux" {
		for r := range rounds {
			for k := range names {
				name := names[(k+r)%len(names)]
				s, err := initOf(ctx, bins[name])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				samples[name] = append(samples[name], s)
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	for i := range d.Rows {
		ss := samples[d.Rows[i].Name]
		if len(ss) == 0 {
			continue
		}
		ms := make([]float64, len(ss))
		for j, s := range ss {
			ms[j] = s.ms
		}
		d.Rows[i].InitMs, d.Rows[i].InitMinMs = medianFloat(ms), slices.Min(ms)
		d.Rows[i].InitBytes, d.Rows[i].InitAllocs = ss[0].bytes, ss[0].allocs
	}
	// Where the bytes go: symbol sizes by package of unstripped builds.
	syms := map[string]map[string]int64{}
	for _, name := range names {
		out := filepath.Join(dir, "sym", name)
		if err := bootBuild(ctx, o, name, "arm64", out, false); err != nil {
			return nil, err
		}
		if syms[name], err = symbolsByPackage(ctx, out); err != nil {
			return nil, err
		}
	}
	for _, name := range bootFunctions {
		d.Groups = append(d.Groups, BootPkgs{Function: name, Packages: syms[name], Floor: syms[bootFloor]})
	}
	for _, r := range d.Rows {
		logf("bootstrap: %-8s arm64 %9d B, init %.2f ms (min %.2f), %d B in %d allocations", r.Name, r.ARM64Bytes, r.InitMs, r.InitMinMs, r.InitBytes, r.InitAllocs)
	}
	return d, nil
}

// bootBuild builds a function (or the floor, from this module) for arch.
func bootBuild(ctx context.Context, o options, name, arch, out string, stripped bool) error {
	args := []string{"build", "-tags", bootTags, "-trimpath"}
	if stripped {
		args = append(args, "-ldflags", bootLdflags)
	}
	args = append(args, "-o", out)
	cmd := exec.CommandContext(ctx, "go")
	if name == bootFloor {
		cmd.Args = append(cmd.Args, append(args, "./lambdafloor")...)
		cmd.Dir = filepath.Join(o.root, "bench")
	} else {
		cmd.Args = append(cmd.Args, append(args, "./functions/"+name)...)
		cmd.Dir = o.root
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %v\n%s", name, arch, err, b)
	}
	return nil
}

type initSample struct {
	ms            float64
	bytes, allocs int64
}

var initLine = regexp.MustCompile(`^init \S+ @\S+ ms, ([0-9.]+) ms clock, ([0-9]+) bytes, ([0-9]+) allocs`)

// initOf runs bin without a Lambda environment (it exits right after its
// package init) and sums the runtime's init lines.
func initOf(ctx context.Context, bin string) (initSample, error) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{"GODEBUG=inittrace=1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_ = cmd.Run() // it fails: no Lambda runtime API
	var s initSample
	n := 0
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		m := initLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ms, _ := strconv.ParseFloat(m[1], 64)
		b, _ := strconv.ParseInt(m[2], 10, 64)
		a, _ := strconv.ParseInt(m[3], 10, 64)
		s.ms += ms
		s.bytes += b
		s.allocs += a
		n++
	}
	if n == 0 {
		return s, fmt.Errorf("no init lines from %s: %.500s", bin, stderr.String())
	}
	return s, nil
}

// symbolsByPackage sums `go tool nm -size` by package, grouping the
// linker's own symbols (go:func.*, type:*, go:itab.*, go:string.*) apart.
func symbolsByPackage(ctx context.Context, bin string) (map[string]int64, error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "nm", "-size", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool nm %s: %w", bin, err)
	}
	g := map[string]int64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] == "U" {
			continue
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		g[symbolPackage(strings.Join(f[3:], " "))] += size
	}
	return g, nil
}

func symbolPackage(sym string) string {
	for _, p := range []string{"go:func", "go:itab", "go:string", "type:", "go:"} {
		if strings.HasPrefix(sym, p) {
			return p
		}
	}
	// A package path ends at the first dot after its last slash.
	slash := strings.LastIndexByte(strings.SplitN(sym, "(", 2)[0], '/')
	rest := sym[slash+1:]
	if i := strings.IndexAny(rest, ".("); i >= 0 {
		return sym[:slash+1+i]
	}
	return sym
}

// bootHeading is the bootstrap part's section of BENCHMARKS.md.
const bootHeading = "## Bootstrap beside the floor"

func renderBootstrap(w *mdWriter, l *loaded) {
	d, env := l.bootstrap, l.envs["bootstrap"]
	var floor BootRow
	for _, r := range d.Rows {
		if r.Name == bootFloor {
			floor = r
		}
	}
	w.p("%s", bootHeading)
	w.p("")
	w.p("`%s` — %s UTC, took %.0f s; load average %.2f at the start, mean %.2f, max %.2f, on %d cores. edgelimit at %s.",
		env.Command, env.Started.Format("2006-01-02 15:04:05"), env.Seconds, env.Load.Start, env.Load.Mean, env.Load.Max,
		env.Machine.Cores, env.Machine.Commit)
	w.p("")
	w.p("Each example function's bootstrap and the **floor**, `bench/lambdafloor`: the smallest function any DynamoDB-backed limiter")
	w.p("pays for (aws-lambda-go serving API Gateway HTTP API events, the AWS SDK's DynamoDB client built as the functions build")
	w.p("theirs, one `UpdateItem` per request), all built in this run with the functions' flags (`%s`).", d.Flags)
	w.p("Package init is the Go runtime's (`GODEBUG=inittrace=1`, every package's init summed) of the linux/amd64 builds run outside")
	w.p("Lambda (a bootstrap exits right after init when it finds no runtime API), in %d rounds that run every binary once each, from a", d.Rounds)
	w.p("rotating start; the clock figures are medians, the bytes and allocations the same on every run.")
	w.p("")
	w.p("| bootstrap | linux/arm64 bytes | × floor | linux/amd64 bytes | init ms, median (min) | × floor | init bytes | init allocations |")
	w.p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range d.Rows {
		w.p("| %s | %s | %.2f× | %s | %.2f (%.2f) | %.2f× | %s | %s |", r.Name, thousands(int(r.ARM64Bytes)), ratio(r.ARM64Bytes, floor.ARM64Bytes),
			thousands(int(r.AMD64Bytes)), r.InitMs, r.InitMinMs, r.InitMs/max(floor.InitMs, 1e-9), thousands(int(r.InitBytes)), thousands(int(r.InitAllocs)))
	}
	w.p("")
	w.p("Where the bytes above the floor go, by package: symbol sizes (text, read-only data, data; not the pclntab, which adds")
	w.p("about 0.8 times the text again, nor the file's alignment) of unstripped linux/arm64 builds (`go tool nm -size`), each")
	w.p("function's minus the floor's, the packages that add at least 8 KB to some function:")
	w.p("")
	diffs := map[string]map[string]int64{}
	keys := map[string]bool{}
	for _, g := range d.Groups {
		diffs[g.Function] = map[string]int64{}
		for k, v := range g.Packages {
			if dv := v - g.Floor[k]; dv != 0 {
				diffs[g.Function][k] = dv
				if dv >= 8192 || dv <= -8192 {
					keys[k] = true
				}
			}
		}
		for k, v := range g.Floor {
			if _, ok := g.Packages[k]; !ok && v >= 8192 {
				diffs[g.Function][k] = -v
				keys[k] = true
			}
		}
	}
	order := make([]string, 0, len(keys))
	for k := range keys {
		order = append(order, k)
	}
	first := bootFunctions[0]
	slices.SortFunc(order, func(a, b string) int { return int(diffs[first][b] - diffs[first][a]) })
	head := "| package |"
	sep := "|---|"
	for _, f := range bootFunctions {
		head += " " + f + " |"
		sep += "---:|"
	}
	w.p("%s", head)
	w.p("%s", sep)
	totals := map[string]int64{}
	for _, k := range order {
		line := "| " + k + " |"
		for _, f := range bootFunctions {
			line += " " + signedBytes(diffs[f][k]) + " |"
		}
		w.p("%s", line)
	}
	for _, f := range bootFunctions {
		for _, v := range diffs[f] {
			totals[f] += v
		}
	}
	line := "| all symbols |"
	for _, f := range bootFunctions {
		line += " " + signedBytes(totals[f]) + " |"
	}
	w.p("%s", line)
	w.p("")
}

// updateBootstrapSection writes the bootstrap part's section into -md in
// place of the section of its heading (or before section 1), leaving every
// other section as it is.
func updateBootstrapSection(o options) error {
	l, err := load(o.out)
	if err != nil {
		return err
	}
	if l.bootstrap == nil {
		return fmt.Errorf("no bootstrap results in %s", o.out)
	}
	old, err := os.ReadFile(o.md)
	if err != nil {
		return err
	}
	var b mdWriter
	renderBootstrap(&b, l)
	logf("report: rewrote the section %q of %s", strings.TrimPrefix(bootHeading, "## "), o.md)
	return os.WriteFile(o.md, []byte(spliceSection(string(old), bootHeading, b.String(), mwBefore)), 0o644)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func signedBytes(v int64) string {
	if v < 0 {
		return "−" + thousands(int(-v))
	}
	return "+" + thousands(int(v))
}
