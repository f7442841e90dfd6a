package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Machine describes where a part ran.
type Machine struct {
	Cores     int    `json:"cores"`
	CPU       string `json:"cpu"`
	MemoryGiB int    `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	OSArch    string `json:"os_arch"`
	// Commit is the repository's HEAD and whether the tree had changes.
	Commit string `json:"commit,omitempty"`
	// Deps are the versions of the modules compared.
	Deps map[string]string `json:"deps"`
}

// LoadStats are the load averages seen while a part ran (1-minute average,
// sampled every 2 s), and the host's CPU use over the part.
type LoadStats struct {
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	Max     float64 `json:"max"`
	Mean    float64 `json:"mean"`
	Samples int     `json:"samples"`
}

// Envelope is one part's results file (out/<part>.json).
type Envelope struct {
	Part    string          `json:"part"`
	Command string          `json:"command"`
	Started time.Time       `json:"started"`
	Seconds float64         `json:"seconds"`
	Machine Machine         `json:"machine"`
	Load    LoadStats       `json:"load"`
	Data    json.RawMessage `json:"data"`
}

// partFunc runs one part and returns its data.
type partFunc func(ctx context.Context, o options) (any, error)

// runPart runs f while sampling the load average, and writes its envelope
// to out/<part>.json.
func runPart(ctx context.Context, o options, part string, f partFunc) error {
	env := Envelope{Part: part, Command: partCommand(o, part), Started: time.Now().UTC(), Machine: describeMachine(o.root)}
	stop := sampleLoad()
	start := time.Now()
	data, err := f(ctx, o)
	env.Seconds = time.Since(start).Seconds()
	env.Load = stop()
	if err != nil {
		return fmt.Errorf("%s: %w", part, err)
	}
	raw, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return err
	}
	env.Data = raw
	b, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(o.out, part+".json")
	logf("%s: %.0f s, load %.2f→%.2f (max %.2f); wrote %s", part, env.Seconds, env.Load.Start, env.Load.End, env.Load.Max, path)
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// partCommand is the command that reproduces one part, as the report cites it.
func partCommand(o options, part string) string {
	c := "bench/out/edgelimit-bench"
	if o.quick {
		c += " -quick"
	}
	switch part {
	case "protocol":
		return "go run ./internal/tools/testservers -only dynalite,moto -- " + c + " " + part
	case "flood":
		return "go run ./internal/tools/testservers -only dynalite -- " + c + " " + part
	case "middleware":
		// Its figures depend on these, so the command names them when they
		// are not the defaults.
		if !o.quick && o.benchT != defaultBenchtime {
			c += " -benchtime " + o.benchT.String()
		}
		if !o.quick && o.mwCount != mwDefaultCount {
			c += fmt.Sprintf(" -mw-count %d", o.mwCount)
		}
	case "kv":
		if o.kvOld != "" {
			c += " -kv-old " + o.kvOld
		}
		if o.kvOldCommit != "" {
			c += " -kv-old-commit " + o.kvOldCommit
		}
		if o.kvDuration != 30*time.Second && !o.quick {
			c += " -kv-duration " + o.kvDuration.String()
		}
		return "go run ./internal/tools/testservers -only dynalite -- " + c + " " + part
	}
	return c + " " + part
}

// sampleLoad samples /proc/loadavg every 2 s until the returned function is
// called.
func sampleLoad() func() LoadStats {
	var (
		mu   sync.Mutex
		st   LoadStats
		sum  float64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	add := func() float64 {
		l := loadAvg()
		mu.Lock()
		defer mu.Unlock()
		st.Samples++
		sum += l
		st.Max = max(st.Max, l)
		return l
	}
	st.Start = add()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				add()
			}
		}
	}()
	return func() LoadStats {
		close(done)
		wg.Wait()
		st.End = add()
		mu.Lock()
		defer mu.Unlock()
		st.Mean = sum / float64(st.Samples)
		return st
	}
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

func describeMachine(root string) Machine {
	m := Machine{
		Cores:  runtime.NumCPU(),
		Go:     runtime.Version(),
		OSArch: runtime.GOOS + "/" + runtime.GOARCH,
		Deps:   map[string]string{},
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemoryGiB = int((kb + 1<<19) >> 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "golang.org/x/time", "github.com/sethvargo/go-limiter", "github.com/throttled/throttled/v2", "github.com/ulule/limiter/v3",
				"github.com/tsenart/vegeta/v12", "gonum.org/v1/plot", "github.com/aws/aws-sdk-go-v2/service/dynamodb":
				m.Deps[d.Path] = d.Version
			}
		}
	}
	return m
}
