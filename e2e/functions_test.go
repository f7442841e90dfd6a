package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	ifsetup "github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
)

// Windows in these tests are 1000 days, so that no window boundary (and no
// refill) can fall inside a run and every count is exact.
const longWindow = "1000d"

const longWindowSeconds = 1000 * 24 * 3600

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// wantStatus fails unless resp has status code.
func wantStatus(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, code int) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("%s: status %d, want %d; headers %v; body %s", what, resp.StatusCode, code, resp.Headers, resp.Body)
	}
}

// wantProblem checks a problem+json answer and returns it.
func wantProblem(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, code int, typ string) limitertest.Problem {
	t.Helper()
	wantStatus(t, what, resp, code)
	if ct := header(resp, "Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want %q", what, ct, "application/problem+json")
	}
	var p limitertest.Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("%s: body %q is not a problem: %v", what, resp.Body, err)
	}
	if p.Status != code || p.Type != typ {
		t.Errorf("%s: problem status %d type %q, want %d %q", what, p.Status, p.Type, code, typ)
	}
	if code == 429 || code == 503 {
		ra, err := strconv.Atoi(header(resp, "Retry-After"))
		if err != nil || ra < 1 {
			t.Errorf("%s: Retry-After %q, want whole seconds >= 1", what, header(resp, "Retry-After"))
		}
	}
	return p
}

var keyHashRe = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

// wantEMF checks the last EMF line the function wrote for policy.
func wantEMF(t *testing.T, e *emulator, pol, route string, want map[string]float64) {
	t.Helper()
	m, err := e.lastEMF(pol)
	if err != nil {
		t.Fatalf("%v; stdout:\n%s", err, e.stdout)
	}
	if m["Route"] != route || m["Function"] != e.name {
		t.Errorf("EMF line %v: want Route %q and Function %q", m, route, e.name)
	}
	// The client's key, hashed (22 characters of base64url), as a property
	// for the Contributor Insights rule (docs/deploy.md).
	if k, _ := m["KeyHash"].(string); !keyHashRe.MatchString(k) {
		t.Errorf("EMF KeyHash = %v, want a hashed key (line %v)", m["KeyHash"], m)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("EMF %s = %v, want %v (line %v)", k, m[k], v, m)
		}
	}
}

// wantLog finds a log line with message whose requestId is id, waiting
// for the emulator to pass it on (up to invokeTimeout).
func wantLog(t *testing.T, e *emulator, message, id string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(invokeTimeout); ; time.Sleep(10 * time.Millisecond) {
		for _, l := range e.logLines() {
			if l["message"] == message && l["requestId"] == id {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q with requestId %q; output:\n%s", message, id, e.output())
			return nil
		}
	}
}

// testBudget is the store budget of the functions whose tests count on a
// working store: dynalite is shared with the other packages' concurrency
// tests in `make test`, and a call past the default 100 ms would turn an
// expected 200 into the policy's 503 (seen in CI). The store-down tests
// keep the default.
const testBudget = "5s"

func TestPaidFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "paid", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES": "paid-daily.limit=3,paid-daily.window=" + longWindow + ",paid-daily.store_timeout=" + testBudget +
			",paid-burst.limit=5,paid-burst.burst=5,paid-burst.window=" + longWindow + ",paid-burst.store_timeout=" + testBudget,
	})
	key := "key-" + randomID(t)
	get := func(apiKey, path string) events.APIGatewayV2HTTPResponse {
		h := map[string]string{}
		if apiKey != "" {
			h["X-Api-Key"] = apiKey
		}
		resp, _ := e.invoke(t, sampleEvent(t, "GET", path, "203.0.113.7", h, ""))
		return resp
	}
	// paid-monthly keeps its 20,000 a month (TestPaidFunctionMonthlyQuota
	// checks it).
	wantPolicy := fmt.Sprintf(`"paid-daily";q=3;w=%d, "paid-burst";q=5;w=%d, "paid-monthly";q=20000;w=`, longWindowSeconds, longWindowSeconds)
	for i := 1; i <= 3; i++ {
		resp := get(key, "/paid/report")
		wantStatus(t, fmt.Sprintf("request %d", i), resp, 200)
		var body handlers.PaidResponse
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || body.Resource != "report" || len(body.Points) != 12 {
			t.Errorf("request %d: body %s (%v), want the report", i, resp.Body, err)
		}
		if got := header(resp, "RateLimit-Policy"); !strings.HasPrefix(got, wantPolicy) {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, wantPolicy)
		}
		rl := header(resp, "RateLimit")
		if !strings.Contains(rl, fmt.Sprintf(`"paid-daily";r=%d;`, 3-i)) || !strings.Contains(rl, fmt.Sprintf(`"paid-burst";r=%d;`, 5-i)) {
			t.Errorf("request %d: RateLimit %q, want paid-daily r=%d and paid-burst r=%d", i, rl, 3-i, 5-i)
		}
		if got := header(resp, "X-RateLimit-Remaining"); got != strconv.Itoa(3-i) {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %d", i, got, 3-i)
		}
	}
	denied := get(key, "/paid/report")
	p := wantProblem(t, "request 4", denied, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"paid-daily"}) {
		t.Errorf("request 4: violated-policies %v, want [paid-daily]", p.ViolatedPolicies)
	}
	if !strings.Contains(header(denied, "RateLimit"), `"paid-daily";r=0;`) {
		t.Errorf("request 4: RateLimit %q, want paid-daily r=0", header(denied, "RateLimit"))
	}
	wantEMF(t, e, "paid-daily", "GET /paid/*", map[string]float64{"Allowed": 0, "Denied": 1, "Degraded": 0})

	// A key that keeps hammering past its quota is banned: the 20th
	// denial within the hour bans it for 15 minutes (paid-daily's ban).
	for i := 2; i < 20; i++ {
		if resp := get(key, "/paid/report"); resp.StatusCode != 429 || strings.Contains(resp.Body, `"ban":`) {
			t.Fatalf("denial %d: %d %s, want a plain 429", i, resp.StatusCode, resp.Body)
		}
	}
	for i := range 2 {
		banned := get(key, "/paid/report")
		wantProblem(t, "banned", banned, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
		if retry := header(banned, "Retry-After"); retry != "900" && (i == 0 || retry != "899") {
			t.Errorf("banned: Retry-After %q, want the ban's 900 seconds", retry)
		}
		if !strings.Contains(banned.Body, `"ban":{"policy":"paid-daily"`) || !strings.Contains(banned.Body, `"level":1`) {
			t.Errorf("banned: body %s does not name the ban", banned.Body)
		}
	}

	// Another key has its own quota, and a bad resource is the handler's 400.
	other := "key-" + randomID(t)
	wantStatus(t, "another key", get(other, "/paid/summary"), 200)
	wantProblem(t, "bad resource", get(other, "/paid/NOT_ok!"), 400, "about:blank")

	// No API key: the middleware answers 400 and logs why, with the request id.
	resp, id := e.invoke(t, sampleEvent(t, "GET", "/paid/report", "203.0.113.7", nil, ""))
	wantProblem(t, "no API key", resp, 400, "about:blank")
	l := wantLog(t, e, "edgelimit: request without a usable key", id)
	if l["policy"] == nil || l["function"] != "paid" || l["level"] != "INFO" {
		t.Errorf("log line %v: want policy, function paid and level INFO", l)
	}
	if strings.Contains(e.output(), key) {
		t.Errorf("the raw API key appears in the function's output")
	}
}

// TestPaidFunctionTiersAndOverrides runs the paid function as built: the
// plan in the authorizer's JWT claims chooses paid-daily's tier, and an
// override set with the CLI against the same table (hashing the key with
// the function's hash key) is the limit the function applies to that key.
func TestPaidFunctionTiersAndOverrides(t *testing.T) {
	endpoint, table := dynalite(t)
	hashKey := randomKey()
	e := startEmulator(t, "paid", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_HASH_KEY":          hashKey,
		"EDGELIMIT_OVERRIDES":         "paid-daily.limit=3,paid-daily.store_timeout=" + testBudget + ",paid-burst.store_timeout=" + testBudget,
	})
	get := func(apiKey, plan string) events.APIGatewayV2HTTPResponse {
		ev := sampleEvent(t, "GET", "/paid/report", "203.0.113.7", map[string]string{"X-Api-Key": apiKey}, "")
		if plan != "" {
			ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"plan": plan}}}
		}
		resp, _ := e.invoke(t, ev)
		wantStatus(t, "paid key "+apiKey, resp, 200)
		return resp
	}
	daily := func(resp events.APIGatewayV2HTTPResponse) string {
		p, _, _ := strings.Cut(header(resp, "RateLimit-Policy"), ",")
		return p
	}

	// The override goes in before the key's first request: the function
	// caches a key's override (or its absence) for override_staleness.
	key := "key-" + randomID(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(edgelimitPath(t), "override", "set", "--limit", "7", "paid-daily", key)
	cmd.Env = append(os.Environ(), "EDGELIMIT_HASH_KEY="+hashKey, "EDGELIMIT_TABLE="+table, "EDGELIMIT_DYNAMODB_ENDPOINT="+endpoint,
		"EDGELIMIT_POLICY_FILE="+filepath.Join(root, "functions", "handlers", "policies", "paid.yaml"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("edgelimit override set: %v\n%s", err, out)
	}
	if got, want := daily(get(key, "")), `"paid-daily";q=7;w=86400`; got != want {
		t.Errorf("key with an override of 7: RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := daily(get("key-"+randomID(t), "")), `"paid-daily";q=3;w=86400`; got != want {
		t.Errorf("free key (no plan): RateLimit-Policy %q, want %q (the policy's limit, edited to 3)", got, want)
	}
	if got, want := daily(get("key-"+randomID(t), "pro")), `"paid-daily";q=100000;w=86400`; got != want {
		t.Errorf("pro key: RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := daily(get("key-"+randomID(t), "platinum")), `"paid-daily";q=3;w=86400`; got != want {
		t.Errorf("unknown plan: RateLimit-Policy %q, want %q (the default tier)", got, want)
	}
}

func TestPaidFunctionFailsClosed(t *testing.T) {
	e := startEmulator(t, "paid", map[string]string{
		"EDGELIMIT_TABLE":             "edgelimit",
		"EDGELIMIT_DYNAMODB_ENDPOINT": closedEndpoint(t),
	})
	resp, id := e.invoke(t, sampleEvent(t, "GET", "/paid/report", "203.0.113.7", map[string]string{"X-Api-Key": "k-1"}, ""))
	wantProblem(t, "store down", resp, 503, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity")
	wantEMF(t, e, "paid-daily", "GET /paid/*", map[string]float64{"Allowed": 0, "Denied": 1, "Degraded": 1})
	// The whole table is down: the override read fails first, a store
	// failure of paid-daily that logs itself (and fails closed).
	l := wantLog(t, e, "edgelimit: override read failed", id)
	if l["level"] != "WARN" || l["on_store_error"] != "deny" {
		t.Errorf("log line %v: want level WARN, on_store_error deny", l)
	}
}

func contactEvent(t *testing.T, ip, contentType, body string) events.APIGatewayV2HTTPRequest {
	return sampleEvent(t, "POST", "/contact", ip, map[string]string{"Content-Type": contentType}, body)
}

const contactJSON = `{"name":"Ada","email":"ada@example.com","message":"Hello from the e2e test."}`

func TestContactFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "contact", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES":         "contact.limit=3,contact.window=" + longWindow + ",contact.store_timeout=" + testBudget,
	})
	ip := "198.51.100.23"
	for i := 1; i <= 3; i++ {
		ev := contactEvent(t, ip, "application/json", contactJSON)
		if i == 2 {
			ev = contactEvent(t, ip, "application/x-www-form-urlencoded", "name=Ada&email=ada%40example.com&message=Hi")
		}
		resp, _ := e.invoke(t, ev)
		wantStatus(t, fmt.Sprintf("message %d", i), resp, 202)
		if got := header(resp, "RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"contact";r=%d;`, 3-i)) {
			t.Errorf("message %d: RateLimit %q, want contact r=%d", i, got, 3-i)
		}
	}
	resp, _ := e.invoke(t, contactEvent(t, ip, "application/json", contactJSON))
	p := wantProblem(t, "message 4", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"contact"}) {
		t.Errorf("violated-policies %v, want [contact]", p.ViolatedPolicies)
	}
	wantEMF(t, e, "contact", "POST /contact", map[string]float64{"Denied": 1})

	// Another address is not limited by the first; a bad message is a 400.
	resp, _ = e.invoke(t, contactEvent(t, "198.51.100.24", "application/json", `{"name":"Ada","email":"not an address","message":"x"}`))
	wantProblem(t, "bad email", resp, 400, "about:blank")
}

// TestLoginFunction: POST /login on the contact function, behind
// login-failures (charge_status [401, 403]): only the failed attempts are
// counted, on the table, after the response; the attempt after the limit's
// failures is refused, even with the right password, and says so in its
// headers.
func TestLoginFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	const limit = 3
	e := startEmulator(t, "contact", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES":         fmt.Sprintf("login-failures.limit=%d,login-failures.window=%s,login-failures.store_timeout=%s", limit, longWindow, testBudget),
	})
	login := func(ip, password string) events.APIGatewayV2HTTPResponse {
		body := string(mustJSON(t, handlers.LoginRequest{Username: handlers.DemoUsername, Password: password}))
		resp, _ := e.invoke(t, sampleEvent(t, "POST", "/login", ip, map[string]string{"Content-Type": "application/json"}, body))
		return resp
	}
	ip := "198.51.100.90"
	steps := []struct {
		password string
		status   int
		r        int // login-failures' r: the failures left before this attempt's
	}{
		{"guess-1", 401, 3}, {handlers.DemoPassword, 200, 2}, {"guess-2", 401, 2}, {handlers.DemoPassword, 200, 1},
		{handlers.DemoPassword, 200, 1}, {"guess-3", 401, 1}, {handlers.DemoPassword, 429, 0},
	}
	for i, st := range steps {
		resp := login(ip, st.password)
		t.Logf("attempt %d: %d RateLimit %s", i+1, resp.StatusCode, header(resp, "RateLimit"))
		if resp.StatusCode != st.status {
			t.Fatalf("attempt %d: status %d, want %d; body %s", i+1, resp.StatusCode, st.status, resp.Body)
		}
		if want := fmt.Sprintf(`"login-failures";r=%d;`, st.r); !strings.HasPrefix(header(resp, "RateLimit"), want) {
			t.Errorf("attempt %d: RateLimit %q, want %s", i+1, header(resp, "RateLimit"), want)
		}
	}
	resp := login(ip, "guess-4")
	p := wantProblem(t, "after 3 failures", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"login-failures"}) {
		t.Errorf("violated-policies %v, want [login-failures]", p.ViolatedPolicies)
	}
	wantEMF(t, e, "login-failures", "POST /login", map[string]float64{"Denied": 1})
	// Another address has its own failures; the contact form beside it
	// is not affected.
	wantProblem(t, "another address", login("198.51.100.91", "guess"), 401, "about:blank")
	resp, _ = e.invoke(t, contactEvent(t, ip, "application/json", contactJSON))
	wantStatus(t, "the contact form from the refused address", resp, 202)
}

func TestContactFunctionFailsOpen(t *testing.T) {
	e := startEmulator(t, "contact", map[string]string{
		"EDGELIMIT_TABLE":             "edgelimit",
		"EDGELIMIT_DYNAMODB_ENDPOINT": closedEndpoint(t),
	})
	resp, id := e.invoke(t, contactEvent(t, "198.51.100.23", "application/json", contactJSON))
	wantStatus(t, "store down", resp, 202)
	wantEMF(t, e, "contact", "POST /contact", map[string]float64{"Allowed": 1, "Denied": 0, "Degraded": 1})
	wantLog(t, e, "edgelimit: store failed", id)
}

func TestSearchFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "search", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES":         "search.limit=3,search.burst=3,search.window=" + longWindow + ",search.store_timeout=" + testBudget,
	})
	ip := "192.0.2.44"
	for i := 1; i <= 3; i++ {
		resp, _ := e.invoke(t, sampleEvent(t, "GET", "/search?q=walnut+lamp&limit=5", ip, nil, ""))
		wantStatus(t, fmt.Sprintf("search %d", i), resp, 200)
		var body handlers.SearchResponse
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
			t.Fatalf("search %d: body %q: %v", i, resp.Body, err)
		}
		if body.Scanned != handlers.DefaultSearchRecords || body.Matches == 0 || len(body.Results) != 5 {
			t.Errorf("search %d: scanned %d, matches %d, %d results; want %d scanned, some matches, 5 results",
				i, body.Scanned, body.Matches, len(body.Results), handlers.DefaultSearchRecords)
		}
		if got := header(resp, "RateLimit-Policy"); got != fmt.Sprintf(`"search";q=3;w=%d`, longWindowSeconds) {
			t.Errorf("search %d: RateLimit-Policy %q", i, got)
		}
	}
	resp, _ := e.invoke(t, sampleEvent(t, "GET", "/search?q=walnut+lamp", ip, nil, ""))
	p := wantProblem(t, "search 4", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"search"}) {
		t.Errorf("violated-policies %v, want [search]", p.ViolatedPolicies)
	}
	wantEMF(t, e, "search", "GET /search", map[string]float64{"Denied": 1})
	resp, _ = e.invoke(t, sampleEvent(t, "GET", "/search?q=x", "192.0.2.45", nil, ""))
	wantProblem(t, "one-character query", resp, 400, "about:blank")
}

func ttsEvent(t *testing.T, ip string, h map[string]string) events.APIGatewayV2HTTPRequest {
	return ttsEventText(t, ip, h, "hello edge")
}

func ttsEventText(t *testing.T, ip string, h map[string]string, text string) events.APIGatewayV2HTTPRequest {
	if h == nil {
		h = map[string]string{}
	}
	h["Content-Type"] = "application/json"
	return sampleEvent(t, "POST", "/tts", ip, h, string(mustJSON(t, handlers.TTSRequest{Text: text})))
}

// ttsClient is one client address of the tts function: it keeps the token
// the function hands back and solves the challenges it gets.
type ttsClient struct {
	e     *emulator
	ip    string
	token string
	proof string
}

// say sends text with the client's token or proof; a 429 with a challenge
// is solved (once) and retried, as client.Transport does.
func (c *ttsClient) say(t *testing.T, text string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	for attempt := 0; ; attempt++ {
		h := map[string]string{}
		switch {
		case c.proof != "":
			h["Edgelimit-Proof"] = c.proof
		case c.token != "":
			h["Edgelimit-Token"] = c.token
		}
		resp, _ := c.e.invoke(t, ttsEventText(t, c.ip, h, text))
		if tok := header(resp, "Edgelimit-Token"); tok != "" {
			c.token, c.proof = tok, ""
		}
		challenge := header(resp, "Edgelimit-Challenge")
		if resp.StatusCode != 429 || challenge == "" || attempt > 0 {
			return resp
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		proof, err := pow.Solve(ctx, challenge)
		cancel()
		if err != nil {
			t.Fatalf("pow.Solve: %v", err)
		}
		c.proof, c.token = proof, ""
	}
}

// ttsEnv is the tts function's environment on table: its three policies'
// limits in overrides (windows of longWindow), store budgets of testBudget.
func ttsEnv(endpoint, table, hashKey, overrides string) map[string]string {
	return map[string]string{
		"EDGELIMIT_SECRETS":           "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{42}, 32)),
		"EDGELIMIT_HASH_KEY":          hashKey,
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES": overrides + ",tts.window=" + longWindow + ",speech-seconds.window=" + longWindow +
			",speech-seconds.store_timeout=" + testBudget + ",speech-jobs.store_timeout=" + testBudget,
	}
}

// TestTTSFunction walks the signed flow a client goes through: no token, a
// 429 with a proof-of-work challenge, a proof that buys a signed window, and
// the token carried from response to request until the window's limit is
// spent.
func TestTTSFunction(t *testing.T) {
	const limit = 3
	endpoint, table := dynalite(t)
	e := startEmulator(t, "tts", ttsEnv(endpoint, table, randomKey(), fmt.Sprintf("tts.limit=%d", limit)))
	ip := "203.0.113.99"
	resp, _ := e.invoke(t, ttsEvent(t, ip, nil))
	wantProblem(t, "no token", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	challenge := header(resp, "Edgelimit-Challenge")
	var body struct {
		Challenge        *pow.Challenge `json:"challenge"`
		ViolatedPolicies []string       `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || challenge == "" || body.Challenge == nil || body.Challenge.Value != challenge || body.Challenge.Bits < 1 {
		t.Fatalf("no token: challenge header %q, body %s; want the same challenge in both", challenge, resp.Body)
	}
	if !slices.Equal(body.ViolatedPolicies, []string{"tts"}) {
		t.Errorf("no token: violated-policies %v, want [tts] (the speech policies have room)", body.ViolatedPolicies)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proof, err := pow.Solve(ctx, challenge)
	if err != nil {
		t.Fatalf("pow.Solve: %v", err)
	}
	allowed, token := 0, ""
	h := map[string]string{"Edgelimit-Proof": proof}
	for i := 0; i < limit+1; i++ {
		resp, _ = e.invoke(t, ttsEvent(t, ip, h))
		if resp.StatusCode != 200 {
			break
		}
		allowed++
		if ct := header(resp, "Content-Type"); ct != "audio/wav" || !resp.IsBase64Encoded {
			t.Errorf("response %d: Content-Type %q base64 %v, want audio/wav, base64", i+1, ct, resp.IsBase64Encoded)
		}
		if wav, err := base64.StdEncoding.DecodeString(resp.Body); err != nil || !bytes.HasPrefix(wav, []byte("RIFF")) {
			t.Errorf("response %d: body is not a base64 WAV file (%v)", i+1, err)
		}
		if tok := header(resp, "Edgelimit-Token"); tok != "" {
			token = tok
		}
		if token == "" {
			t.Fatalf("response %d: no Edgelimit-Token", i+1)
		}
		h = map[string]string{"Edgelimit-Token": token}
	}
	if allowed != limit {
		t.Fatalf("one proof bought %d requests, want exactly %d; last response %d %s", allowed, limit, resp.StatusCode, resp.Body)
	}
	wantProblem(t, "window spent", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if header(resp, "Edgelimit-Challenge") == "" {
		t.Errorf("window spent: no new challenge")
	}
	wantEMF(t, e, "tts", "POST /tts", map[string]float64{"Allowed": 0, "Denied": 1, "Degraded": 0})

	// The token is bound to its client: another address gets a challenge.
	resp, _ = e.invoke(t, ttsEvent(t, "203.0.113.100", map[string]string{"Edgelimit-Token": token}))
	wantProblem(t, "token of another client", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
}

// TestTTSFunctionChargesSecondsOfAudio: speech-seconds is charged after the
// response with what the handler reports, the seconds of audio it generated
// (handlers.SpeechSeconds), never a fixed cost: a request is admitted while
// one second is left, the one that over-spends is charged in full, and the
// client is refused (r=0) from then on.
func TestTTSFunctionChargesSecondsOfAudio(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "tts", ttsEnv(endpoint, table, randomKey(), "tts.limit=10,speech-seconds.limit=5"))
	c := &ttsClient{e: e, ip: "198.51.100.61"}
	short, long := "hello edge", strings.Repeat("speak ", 17) // 10 characters: 0.4 s; 102: 4.08 s
	if handlers.SpeechSeconds(short) != 1 || handlers.SpeechSeconds(long) != 5 {
		t.Fatalf("SpeechSeconds: %d and %d, want 1 and 5", handlers.SpeechSeconds(short), handlers.SpeechSeconds(long))
	}
	steps := []struct {
		text   string
		status int
		r      int // speech-seconds' r on the response
	}{
		{short, 200, 5}, // r is what is left before the charge: 5 of 5
		{short, 200, 4}, // the first charge was 1 second
		{long, 200, 3},  // 3 left: admitted, and charged 5
		{short, 429, 0}, // 8 of 5 spent
	}
	for i, st := range steps {
		resp := c.say(t, st.text)
		t.Logf("request %d (%d s of audio): %d RateLimit %s; Retry-After %q", i+1, handlers.SpeechSeconds(st.text), resp.StatusCode, header(resp, "RateLimit"), header(resp, "Retry-After"))
		if resp.StatusCode != st.status {
			t.Fatalf("request %d: status %d, want %d; headers %v; body %s", i+1, resp.StatusCode, st.status, resp.Headers, resp.Body)
		}
		if want := fmt.Sprintf(`"speech-seconds";r=%d;`, st.r); !strings.Contains(header(resp, "RateLimit"), want) {
			t.Errorf("request %d: RateLimit %q, want %s", i+1, header(resp, "RateLimit"), want)
		}
	}
	resp := c.say(t, short)
	p := wantProblem(t, "over-spent", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"speech-seconds"}) {
		t.Errorf("over-spent: violated-policies %v, want [speech-seconds]", p.ViolatedPolicies)
	}
	if !strings.Contains(header(resp, "RateLimit-Policy"), fmt.Sprintf(`"speech-seconds";q=5;w=%d`, longWindowSeconds)) {
		t.Errorf("RateLimit-Policy %q, want speech-seconds q=5", header(resp, "RateLimit-Policy"))
	}
	// Another client has its own seconds.
	other := &ttsClient{e: e, ip: "198.51.100.62"}
	if resp := other.say(t, long); resp.StatusCode != 200 {
		t.Errorf("another client: %d %s, want 200", resp.StatusCode, resp.Body)
	}
}

// TestTTSFunctionLimitsJobsInFlight: speech-jobs admits at most 2
// syntheses of one client at once, across instances. Another instance (an
// engine in this process on the same table and hash key) holds both of a
// client's slots: the function refuses the client with 429 and Retry-After
// 1, admits it once one slot is released, and gives its own slot back
// after the response.
func TestTTSFunctionLimitsJobsInFlight(t *testing.T) {
	endpoint, table := dynalite(t)
	hashKey := randomKey()
	e := startEmulator(t, "tts", ttsEnv(endpoint, table, hashKey, "tts.limit=10"))
	vars := map[string]string{
		"AWS_REGION": "us-east-1", "EDGELIMIT_TABLE": table, "EDGELIMIT_DYNAMODB_ENDPOINT": endpoint, "EDGELIMIT_HASH_KEY": hashKey,
	}
	// The instance holding the slots: the function's own speech-jobs policy,
	// alone, with the function's lease.
	pf, err := policy.Parse(handlers.TTS.PolicyFile, handlers.TTS.Policies())
	if err != nil {
		t.Fatal(err)
	}
	var lease time.Duration
	for _, p := range pf.Policies {
		if p.Name == "speech-jobs" {
			lease = p.Window
		}
	}
	other, err := setup.FromEnv(context.Background(), setup.EnvConfig{
		Policies: []byte(fmt.Sprintf(`version: 1
policies:
  - {name: speech-jobs, routes: ["POST /tts"], key: ip, strategy: inflight, limit: 2, window: %s, store_timeout: %s}
`, lease, testBudget)),
		PolicyFile: "speech-jobs.yaml", Function: "other-instance", Getenv: func(k string) string { return vars[k] },
		Stdout: io.Discard, Stderr: io.Discard, Backends: []setup.Backend{ifsetup.Backend(dynamodb.Config{})},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hold := func(ip string) *edgelimit.Verdict {
		t.Helper()
		v := other.Engine.Decide(ctx, &edgelimit.Input{Method: "POST", Path: "/tts", SourceIP: ip})
		if !v.Allowed {
			t.Fatalf("the other instance could not take a slot of %s: %d", ip, v.Status)
		}
		return v
	}
	c := &ttsClient{e: e, ip: "192.0.2.80"}
	if resp := c.say(t, "first"); resp.StatusCode != 200 {
		t.Fatalf("a first job: %d %s", resp.StatusCode, resp.Body)
	}
	held := []*edgelimit.Verdict{hold(c.ip), hold(c.ip)}
	resp := c.say(t, "third job")
	t.Logf("a third job: %d RateLimit-Policy %s; RateLimit %s; Retry-After %s; body %s",
		resp.StatusCode, header(resp, "RateLimit-Policy"), header(resp, "RateLimit"), header(resp, "Retry-After"), resp.Body)
	p := wantProblem(t, "two jobs running", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"speech-jobs"}) {
		t.Errorf("two jobs running: violated-policies %v, want [speech-jobs]", p.ViolatedPolicies)
	}
	if got := header(resp, "Retry-After"); got != "1" {
		t.Errorf("two jobs running: Retry-After %q, want 1", got)
	}
	if !strings.Contains(header(resp, "RateLimit"), `"speech-jobs";r=0;`) {
		t.Errorf("two jobs running: RateLimit %q, want speech-jobs r=0", header(resp, "RateLimit"))
	}
	// Another client is not limited by the first's jobs.
	if resp := (&ttsClient{e: e, ip: "192.0.2.81"}).say(t, "hello"); resp.StatusCode != 200 {
		t.Errorf("another client: %d %s, want 200", resp.StatusCode, resp.Body)
	}
	held[0].Finish(ctx, 200)
	if resp := c.say(t, "third job"); resp.StatusCode != 200 {
		t.Fatalf("one job finished: %d %s, want 200", resp.StatusCode, resp.Body)
	}
	// The function released its slot after the response: the other
	// instance can take the second slot again, and no third.
	held = append(held, hold(c.ip))
	if v := other.Engine.Decide(ctx, &edgelimit.Input{Method: "POST", Path: "/tts", SourceIP: c.ip}); v.Allowed {
		t.Errorf("a third slot was free: the limit is 2")
	}
	for _, v := range held[1:] {
		v.Finish(ctx, 200)
	}
}
