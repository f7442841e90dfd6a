package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// nginx's burst and edgelimit's, side by side (issue #10, item 12). nginx's
// documentation of limit_req (https://nginx.org/en/docs/http/
// ngx_http_limit_req_module.html#limit_req): "Excessive requests are delayed
// until their number exceeds the maximum burst size in which case the
// request is terminated with an error", and with nodelay they are served at
// once instead of delayed. The burst counts the *excessive* requests: those
// beyond the one the rate admits. ngx_http_limit_req_lookup keeps an
// "excess" per key (in thousandths of a request): a new key starts at 0 and
// passes, each later request adds 1000 less what the rate drained, and a
// request is refused when the excess would exceed burst*1000. So from idle
// nginx admits burst+1 requests at once, where edgelimit's gcra, a bucket of
// capacity burst, admits burst:
//
//	edgelimit `burst: B`  ==  nginx `limit_req ... burst=B-1 nodelay`
//
// The test runs a real nginx and a real `edgelimit serve` and sends both
// the same schedule over HTTP. The rate is one a minute on both sides
// (nginx rate=1r/m, gcra limit 1 per 1m), so no unit comes back during a
// phase (nginx drains one request in 62.5 s, gcra refills one in 60 s) and
// a burst sent as fast as possible is decided by the burst alone, however
// slow the machine.

// nginxPath finds Debian's nginx. Absent, the test skips on a developer's
// machine and fails in CI, whose .ci/run installs it.
func nginxPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("NGINX"), "/usr/sbin/nginx"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	skipOrFail(t, "nginx is not installed (apt-get install nginx; .ci/run installs it)")
	return ""
}

// phaseBudget bounds a phase: past it a unit could have come back (nginx
// drains one in 62.5 s), and the counts would no longer be the burst's.
const phaseBudget = 50 * time.Second

type nginxProcess struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
}

// startNginx runs nginx in the foreground (daemon off, master_process off:
// one process, so its counts are exact) on a free loopback port, with its
// prefix, logs and temporary files in a temporary directory. locations maps
// a path to its limit_req arguments after the zone ("burst=5 nodelay");
// each path has its own zone, rate=1r/m keyed by client address, and
// answers a static file. (Not `return 200`: return runs in the rewrite
// phase, before limit_req's preaccess phase, and would answer every
// request.) Every answer, a refusal too, carries nginx's own verdict on
// it, $limit_req_status (PASSED, DELAYED or REJECTED), in the header
// X-Limit-Req.
func startNginx(t *testing.T, locations map[string]string) *nginxProcess {
	t.Helper()
	return startNginxRate(t, "1r/m", locations)
}

// startNginxRate is startNginx with every zone at the given rate.
func startNginxRate(t *testing.T, rate string, locations map[string]string) *nginxProcess {
	t.Helper()
	bin := nginxPath(t)
	for attempt := 1; ; attempt++ {
		p, err := tryStartNginx(t, bin, rate, locations)
		if err == nil {
			return p
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			t.Fatal(err)
		}
	}
}

func tryStartNginx(t *testing.T, bin, rate string, locations map[string]string) (*nginxProcess, error) {
	dir := t.TempDir()
	port := freePort(t)
	var zones, locs strings.Builder
	i := 0
	for path, args := range locations {
		file := filepath.Join(dir, "html", filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, []byte("ok\n"), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&zones, "  limit_req_zone $binary_remote_addr zone=z%d:1m rate=%s;\n", i, rate)
		fmt.Fprintf(&locs, "    location = %s { limit_req zone=z%d %s; }\n", path, i, args)
		i++
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  limit_req_status 429;
%[2]s  server {
    listen 127.0.0.1:%[3]d;
    root %[1]s/html;
    add_header X-Limit-Req $limit_req_status always;
%[4]s  }
}
`, dir, zones.String(), port, locs.String())
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p := &nginxProcess{url: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{}), dir: dir}
	out := &syncBuffer{}
	// -e: the error log from the start, before the configuration is read
	// (else nginx opens /var/log/nginx/error.log first).
	p.cmd = exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx exited before listening:\n%s%s\nconfig:\n%s", out, log, conf)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nginx did not listen within %s:\n%s", startTimeout, out)
		}
	}
}

func (p *nginxProcess) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGQUIT) // graceful shutdown
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// gcraPolicies is a policy file of one durable gcra policy per path, one a
// minute per client address with the given burst.
func gcraPolicies(t *testing.T, bursts map[string]int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\npolicies:\n")
	i := 0
	for path, burst := range bursts {
		fmt.Fprintf(&b, "  - name: p%d\n    routes: [\"GET %s\"]\n    key: ip\n    strategy: durable\n    algorithm: gcra\n"+
			"    limit: 1\n    window: 1m\n    burst: %d\n", i, path, burst)
		i++
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// fire sends n GET requests to url, one after another or all at once, and
// returns how many were admitted (200); every other answer must be 429.
func fire(t *testing.T, client *http.Client, url string, n int, concurrent bool) int {
	t.Helper()
	var mu sync.Mutex
	admitted := 0
	var errs []string
	one := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err.Error())
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			errs = append(errs, fmt.Sprintf("status %d", resp.StatusCode))
		}
	}
	start := time.Now()
	if concurrent {
		var wg sync.WaitGroup
		for range n {
			wg.Go(one)
		}
		wg.Wait()
	} else {
		for range n {
			one()
		}
	}
	if len(errs) > 0 {
		t.Fatalf("%s: %d of %d requests failed: %s", url, len(errs), n, strings.Join(errs, "; "))
	}
	if d := time.Since(start); d > phaseBudget {
		t.Fatalf("%s: %d requests took %s; past %s a unit may have come back, and the count is no longer the burst's", url, n, d, phaseBudget)
	}
	return admitted
}

// TestNginxBurstIsEdgelimitBurstMinusOne pins the mapping the docs state:
// for nginx burst b (0, 1, 5, 20), nginx admits b+1 of a burst; edgelimit
// gcra with burst b+1 admits exactly as many, sequentially and all at once;
// and edgelimit's burst b, the naive translation, admits one fewer.
func TestNginxBurstIsEdgelimitBurstMinusOne(t *testing.T) {
	nginxBursts := []int{0, 1, 5, 20}
	schedules := []struct {
		name       string
		concurrent bool
	}{{"one after another", false}, {"all at once", true}}

	locations := map[string]string{}
	policies := map[string]int{}
	path := func(schedule string, b int, side string) string {
		return fmt.Sprintf("/%s/%s/b%d", strings.ReplaceAll(schedule, " ", "-"), side, b)
	}
	for _, s := range schedules {
		for _, b := range nginxBursts {
			args := fmt.Sprintf("burst=%d nodelay", b)
			if b == 0 {
				args = "nodelay" // the default burst; nginx refuses burst=0
			}
			locations[path(s.name, b, "nginx")] = args
			policies[path(s.name, b, "mapped")] = b + 1 // the true mapping
			if b > 0 {
				policies[path(s.name, b, "naive")] = b // burst: b read as nginx's burst=b
			}
		}
	}
	ngx := startNginx(t, locations)
	el := startServeProcess(t, nil, "--policies", gcraPolicies(t, policies))
	if el.url == "" {
		t.Fatalf("edgelimit serve did not start:\n%s", el.output())
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	for _, s := range schedules {
		t.Run(s.name, func(t *testing.T) {
			for _, b := range nginxBursts {
				n := b + 5
				gotNginx := fire(t, client, ngx.url+path(s.name, b, "nginx"), n, s.concurrent)
				if gotNginx != b+1 {
					t.Errorf("nginx burst=%d nodelay admitted %d of %d at once, want %d (burst+1)", b, gotNginx, n, b+1)
				}
				gotMapped := fire(t, client, el.url+path(s.name, b, "mapped"), n, s.concurrent)
				if gotMapped != gotNginx {
					t.Errorf("edgelimit gcra burst: %d admitted %d of %d, nginx burst=%d admitted %d: want the same", b+1, gotMapped, n, b, gotNginx)
				}
				if b > 0 {
					gotNaive := fire(t, client, el.url+path(s.name, b, "naive"), n, s.concurrent)
					if gotNaive != b {
						t.Errorf("edgelimit gcra burst: %d admitted %d of %d, want %d (one fewer than nginx's burst=%d)", b, gotNaive, n, b, b)
					}
				}
			}
		})
	}
	// Nothing refilled on the way: a last request on each side is still
	// refused (a phase that ran past a refill would show here too).
	for _, b := range nginxBursts {
		if got := fire(t, client, ngx.url+path("all at once", b, "nginx"), 1, false); got != 0 {
			t.Errorf("nginx burst=%d admitted a request after its burst was spent", b)
		}
		if got := fire(t, client, el.url+path("all at once", b, "mapped"), 1, false); got != 0 {
			t.Errorf("edgelimit burst: %d admitted a request after its burst was spent", b+1)
		}
	}
}
