package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/signed"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// quiet keeps the handlers' logs out of the test output.
var quiet = handlers.Deps{Logger: slog.New(slog.DiscardHandler)}

func event(method, path string, query map[string]string, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              method + " " + path,
		RawPath:               path,
		QueryStringParameters: query,
		Headers:               map[string]string{},
		Body:                  body,
	}
	for k, v := range headers {
		ev.Headers[strings.ToLower(k)] = v
	}
	ev.RequestContext.RequestID = "req-1"
	ev.RequestContext.HTTP.Method = method
	ev.RequestContext.HTTP.Path = path
	ev.RequestContext.HTTP.SourceIP = "198.51.100.7"
	return ev
}

func call(t *testing.T, h middleware.HTTPAPIHandler, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := h(context.Background(), ev)
	if err != nil {
		t.Fatalf("handler error: %v", err)
	}
	return resp
}

func wantProblem(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, status int) {
	t.Helper()
	if resp.StatusCode != status || resp.Headers["Content-Type"] != "application/problem+json" {
		t.Errorf("%s: %d %s %s, want %d problem+json", what, resp.StatusCode, resp.Headers["Content-Type"], resp.Body, status)
		return
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p["status"] != float64(status) || p["detail"] == "" {
		t.Errorf("%s: body %s is not a problem with status %d and a detail", what, resp.Body, status)
	}
}

func TestFunctionsHaveValidPolicies(t *testing.T) {
	wantStrategies := map[string][]string{
		"paid": {"durable", "durable", "durable"}, "contact": {"kv", "durable"}, "search": {"durable"}, "tts": {"signed", "durable", "inflight"},
	}
	for _, f := range handlers.All() {
		pf, err := policy.Parse(f.PolicyFile, f.Policies())
		if err != nil {
			t.Errorf("%s: %v", f.PolicyFile, err)
			continue
		}
		var got []string
		for _, p := range pf.Policies {
			got = append(got, p.StrategyName())
		}
		if fmt.Sprint(got) != fmt.Sprint(wantStrategies[f.Name]) {
			t.Errorf("%s: strategies %v, want %v", f.Name, got, wantStrategies[f.Name])
		}
		if g, ok := handlers.Lookup(f.Name); !ok || g.LogicalID != f.LogicalID {
			t.Errorf("Lookup(%q) = %v, %v", f.Name, g.LogicalID, ok)
		}
	}
	paid, _ := policy.Parse("paid", handlers.Paid.Policies())
	for _, p := range paid.Policies {
		if p.OnStoreError != policy.FailClosed || p.Key.String() != "header:X-Api-Key" {
			t.Errorf("paid policy %s: on_store_error %s key %s, want deny and header:X-Api-Key", p.Name, p.OnStoreError, p.Key)
		}
	}
	if _, ok := handlers.Lookup("nope"); ok {
		t.Errorf("Lookup(nope) found a function")
	}
}

func TestPaid(t *testing.T) {
	h := handlers.NewPaid(quiet)
	resp := call(t, h, event("GET", "/paid/report-2026", nil, nil, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
	}
	var body handlers.PaidResponse
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
		t.Fatal(err)
	}
	again := call(t, h, event("GET", "/paid/report-2026", nil, nil, ""))
	if body.Resource != "report-2026" || body.RequestID != "req-1" || len(body.Points) != 12 || again.Body != resp.Body {
		t.Errorf("body %s (again %s): want a deterministic 12-point report", resp.Body, again.Body)
	}
	for _, path := range []string{"/paid/", "/paid/a/b", "/paid/UPPER", "/paid/" + strings.Repeat("a", 65), "/other"} {
		wantProblem(t, path, call(t, h, event("GET", path, nil, nil, "")), 400)
	}
}

func TestContact(t *testing.T) {
	h := handlers.NewContact(quiet)
	json := map[string]string{"Content-Type": "application/json; charset=utf-8"}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	ok := `{"name":"Ada","email":"ada@example.com","message":"hi"}`
	tests := []struct {
		name    string
		headers map[string]string
		body    string
		b64     bool
		want    int
	}{
		{"json", json, ok, false, 202},
		{"base64 json", json, base64.StdEncoding.EncodeToString([]byte(ok)), true, 202},
		{"form", form, "name=Ada&email=ada%40example.com&message=hi", false, 202},
		{"no content type", nil, ok, false, 415},
		{"not json", json, "{", false, 400},
		{"no name", json, `{"email":"ada@example.com","message":"hi"}`, false, 400},
		{"bad email", json, `{"name":"Ada","email":"Ada <ada@example.com>","message":"hi"}`, false, 400},
		{"blank message", json, `{"name":"Ada","email":"ada@example.com","message":"  "}`, false, 400},
		{"long message", json, `{"name":"Ada","email":"ada@example.com","message":"` + strings.Repeat("x", 5001) + `"}`, false, 400},
		{"too large", json, strings.Repeat(" ", handlers.MaxBody+1), false, 413},
		{"bad base64", json, "!!!", true, 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := event("POST", "/contact", nil, tt.headers, tt.body)
			ev.IsBase64Encoded = tt.b64
			resp := call(t, h, ev)
			if tt.want != 202 {
				wantProblem(t, tt.name, resp, tt.want)
				return
			}
			if resp.StatusCode != 202 || !strings.Contains(resp.Body, `"status":"accepted"`) {
				t.Errorf("%d %s, want 202 accepted", resp.StatusCode, resp.Body)
			}
		})
	}
}

func TestCorpusIsDeterministicAndSearchable(t *testing.T) {
	a, b := handlers.NewCorpus(2000, 7), handlers.NewCorpus(2000, 7)
	if a.Len() != 2000 || a.Size() != b.Size() {
		t.Fatalf("corpus of %d records, %d and %d bytes; want 2000 records, equal sizes", a.Len(), a.Size(), b.Size())
	}
	n1, r1 := a.Search("walnut", 3)
	n2, r2 := b.Search("WALNUT", 3)
	if n1 == 0 || n1 != n2 || fmt.Sprint(r1) != fmt.Sprint(r2) || len(r1) != 3 {
		t.Fatalf("Search(walnut) = %d %v; Search(WALNUT) = %d %v; want equal, case-insensitive, 3 results", n1, r1, n2, r2)
	}
	for _, r := range r1 {
		if r.ID < 1 || r.PriceCents < 199 || !strings.Contains(strings.ToLower(r.Title), "walnut") && r.Title == "" {
			t.Errorf("result %+v", r)
		}
	}
	if n, _ := a.Search("zzzz-not-there", 10); n != 0 {
		t.Errorf("Search(absent) = %d matches, want 0", n)
	}
	if c := handlers.NewCorpus(0, 0); c.Len() != handlers.DefaultSearchRecords {
		t.Errorf("default corpus has %d records, want %d", c.Len(), handlers.DefaultSearchRecords)
	}
}

func TestSearch(t *testing.T) {
	h := handlers.NewSearch(quiet, handlers.SearchConfig{Records: 3000})
	resp := call(t, h, event("GET", "/search", map[string]string{"q": "Oak Lamp", "limit": "2"}, nil, ""))
	var body handlers.SearchResponse
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s (%v)", resp.StatusCode, resp.Body, err)
	}
	if body.Query != "Oak Lamp" || body.Scanned != 3000 || body.Matches == 0 || len(body.Results) != 2 {
		t.Errorf("body %+v, want query Oak Lamp, 3000 scanned, matches, 2 results", body)
	}
	for _, r := range body.Results {
		if r.Title != "" && !strings.Contains(r.Title, "Oak Lamp") {
			t.Errorf("result %q does not contain the query", r.Title)
		}
	}
	none := call(t, h, event("GET", "/search", map[string]string{"q": "qqqq"}, nil, ""))
	if none.StatusCode != 200 || !strings.Contains(none.Body, `"results":[]`) {
		t.Errorf("no match: %d %s, want 200 with an empty list", none.StatusCode, none.Body)
	}
	for name, q := range map[string]map[string]string{
		"no q": nil, "short": {"q": "a"}, "long": {"q": strings.Repeat("a", 65)},
		"bad utf-8": {"q": "ab\xff"}, "bad limit": {"q": "oak", "limit": "0"}, "limit not a number": {"q": "oak", "limit": "x"},
	} {
		wantProblem(t, name, call(t, h, event("GET", "/search", q, nil, "")), 400)
	}
}

func TestTTS(t *testing.T) {
	h := handlers.NewTTS(quiet)
	js := map[string]string{"Content-Type": "application/json"}
	resp := call(t, h, event("POST", "/tts", nil, js, `{"text":"hi you"}`))
	if resp.StatusCode != 200 || resp.Headers["Content-Type"] != "audio/wav" || !resp.IsBase64Encoded {
		t.Fatalf("%d %v base64 %v", resp.StatusCode, resp.Headers, resp.IsBase64Encoded)
	}
	wav, err := base64.StdEncoding.DecodeString(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	samples := 6 * 320 // 6 characters of 40 ms at 8 kHz
	if len(wav) != 44+samples || string(wav[:4]) != "RIFF" || string(wav[8:16]) != "WAVEfmt " ||
		binary.LittleEndian.Uint32(wav[24:]) != 8000 || binary.LittleEndian.Uint32(wav[40:]) != uint32(samples) {
		t.Errorf("WAV header %q..., %d bytes; want RIFF/WAVE 8 kHz with %d samples", wav[:16], len(wav), samples)
	}
	if space := wav[44+2*320 : 44+3*320]; !bytes.Equal(space, bytes.Repeat([]byte{128}, 320)) {
		t.Errorf("the space is not silence")
	}
	for name, tc := range map[string]struct {
		h    map[string]string
		body string
		want int
	}{
		"no content type": {nil, `{"text":"hi"}`, 415},
		"not json":        {js, `text=hi`, 400},
		"empty text":      {js, `{"text":"  "}`, 400},
		"too long":        {js, `{"text":"` + strings.Repeat("a", 501) + `"}`, 400},
	} {
		wantProblem(t, name, call(t, h, event("POST", "/tts", nil, tc.h, tc.body)), tc.want)
	}
}

func TestMuxRoutesToEachFunction(t *testing.T) {
	fallback := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 299}, nil
	}
	m := handlers.Mux(quiet, fallback)
	js := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct {
		method, path string
		q            map[string]string
		h            map[string]string
		body         string
		want         int
	}{
		{"GET", "/paid/report", nil, nil, "", 200},
		{"POST", "/contact", nil, js, `{"name":"A","email":"a@example.com","message":"m"}`, 202},
		{"GET", "/search", map[string]string{"q": "oak"}, nil, "", 200},
		{"POST", "/tts", nil, js, `{"text":"a"}`, 200},
		{"POST", "/paid/report", nil, nil, "", 299},
		{"GET", "/paid", nil, nil, "", 299},
		{"GET", "/paid/a/b", nil, nil, "", 299},
		{"GET", "/demo", nil, nil, "", 299},
	} {
		if got := call(t, m, event(tc.method, tc.path, tc.q, tc.h, tc.body)).StatusCode; got != tc.want {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestFunctionsBehindTheMiddleware runs each function's handler behind its
// own policies on in-memory stores, as `edgelimit serve` does: allowed up to
// the limit, then the middleware's 429 and the handler no longer runs.
func TestFunctionsBehindTheMiddleware(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return t0 }
	js := map[string]string{"Content-Type": "application/json"}
	requests := map[string]events.APIGatewayV2HTTPRequest{
		"paid":    event("GET", "/paid/report", nil, map[string]string{"X-Api-Key": "k1"}, ""),
		"contact": event("POST", "/contact", nil, js, `{"name":"A","email":"a@example.com","message":"m"}`),
		"search":  event("GET", "/search", map[string]string{"q": "oak"}, nil, ""),
	}
	for _, f := range handlers.All() {
		ev, ok := requests[f.Name]
		if !ok {
			continue // tts: a proof of work first; see e2e.TestTTSFunction
		}
		t.Run(f.Name, func(t *testing.T) {
			engine := memoryEngine(t, f, now)
			pf, err := policy.Parse(f.PolicyFile, f.Policies())
			if err != nil {
				t.Fatal(err)
			}
			// The smallest burst of the route's policies (what each says its
			// quota is).
			limit := int64(1 << 62)
			for _, p := range pf.Policies {
				q, _ := engine.Limiter(p.Name).(interface{ Quota() (int64, time.Duration) }).Quota()
				limit = min(limit, q)
			}
			h := middleware.HTTPAPI(engine, f.New(quiet))
			for i := int64(1); i <= limit; i++ {
				if resp := call(t, h, ev); resp.StatusCode >= 300 || resp.Headers["RateLimit-Policy"] == "" {
					t.Fatalf("request %d: %d %v %s, want the handler's answer with RateLimit headers", i, resp.StatusCode, resp.Headers, resp.Body)
				}
			}
			if resp := call(t, h, ev); resp.StatusCode != 429 {
				t.Errorf("request %d: %d %s, want 429", limit+1, resp.StatusCode, resp.Body)
			}
		})
	}
}

func loginEvent(user, password string) events.APIGatewayV2HTTPRequest {
	b, _ := json.Marshal(handlers.LoginRequest{Username: user, Password: password})
	return event("POST", "/login", nil, map[string]string{"Content-Type": "application/json"}, string(b))
}

func TestLogin(t *testing.T) {
	h := handlers.Contact.New(quiet)
	if resp := call(t, h, loginEvent(handlers.DemoUsername, handlers.DemoPassword)); resp.StatusCode != 200 || !strings.Contains(resp.Body, `"status":"ok"`) {
		t.Errorf("the demo credential: %d %s, want 200", resp.StatusCode, resp.Body)
	}
	for name, ev := range map[string]events.APIGatewayV2HTTPRequest{
		"wrong password": loginEvent(handlers.DemoUsername, "hunter2"),
		"wrong user":     loginEvent("root", handlers.DemoPassword),
	} {
		resp := call(t, h, ev)
		wantProblem(t, name, resp, 401)
		if strings.Contains(resp.Body, "hunter2") || strings.Contains(resp.Body, "root") || resp.Headers["WWW-Authenticate"] == "" {
			t.Errorf("%s: %v %s: want a 401 with WWW-Authenticate that echoes nothing", name, resp.Headers, resp.Body)
		}
	}
	js := map[string]string{"Content-Type": "application/json"}
	for name, tc := range map[string]struct {
		h    map[string]string
		body string
		want int
	}{
		"no content type": {nil, `{"username":"demo","password":"x"}`, 415},
		"not json":        {js, `username=demo`, 400},
		"no password":     {js, `{"username":"demo"}`, 400},
	} {
		wantProblem(t, name, call(t, h, event("POST", "/login", nil, tc.h, tc.body)), tc.want)
	}
	// The contact function's other route is still the contact form, and a
	// path without a route key is dispatched as RouteKey matches it.
	if resp := call(t, h, event("POST", "/contact", nil, js, `{"name":"A","email":"a@example.com","message":"m"}`)); resp.StatusCode != 202 {
		t.Errorf("POST /contact on the contact function: %d %s, want 202", resp.StatusCode, resp.Body)
	}
	// Every spelling the engine reads as /login (and so guards with the
	// login policy) reaches the login handler, with no route key or a
	// Function URL's $default: before, "/contact/../login" reached the
	// contact form under the login policy, which charges only 401s.
	for _, routeKey := range []string{"", "$default"} {
		for _, path := range []string{"/login/", "//login", "/contact/../login", "/%6Cogin", "/login/.", "/x/./../login"} {
			ev := loginEvent("demo", "wrong")
			ev.RouteKey, ev.RawPath = routeKey, path
			if resp := call(t, h, ev); resp.StatusCode != 401 {
				t.Errorf("POST %s (route key %q): %d %s, want the login handler's 401", path, routeKey, resp.StatusCode, resp.Body)
			}
		}
	}
	if got := handlers.RouteKey("POST", "/contact/../login"); got != "POST /login" {
		t.Errorf("RouteKey(POST /contact/../login) = %q, want POST /login", got)
	}
}

// memoryEngine builds f's policies on in-memory stores at the instant now
// returns.
func memoryEngine(t *testing.T, f handlers.Function, now func() time.Time) *edgelimit.Engine {
	t.Helper()
	pf, err := policy.Parse(f.PolicyFile, f.Policies())
	if err != nil {
		t.Fatal(err)
	}
	backends := []setup.Backend{memory.Durable(), memory.KV(), memory.InFlight(), signed.WithKeys(signedwindow.EphemeralKeyRing())}
	factory, err := setup.Limiters(pf, backends, setup.BackendEnv{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	overrides, err := setup.Overrides(pf, backends, setup.BackendEnv{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	bans, err := setup.Bans(pf, backends, setup.BackendEnv{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := edgelimit.New(edgelimit.Config{Policies: pf, Limiters: factory, Now: now, Overrides: overrides, Bans: bans})
	if err != nil {
		t.Fatal(err)
	}
	return engine
}

// TestLoginCountsOnlyFailures: behind its policy (login-failures, 5 per 15
// minutes, charge_status [401, 403]), successful logins cost nothing, the
// fifth failure is still answered, and then the address is refused, even
// with the right password, until the window ends.
func TestLoginCountsOnlyFailures(t *testing.T) {
	t0 := time.Unix(1_700_000_100, 0) // 100 s into a 15-minute window
	at := t0
	now := func() time.Time { return at }
	h := middleware.HTTPAPI(memoryEngine(t, handlers.Contact, now), handlers.Contact.New(quiet))
	good, bad := loginEvent(handlers.DemoUsername, handlers.DemoPassword), loginEvent(handlers.DemoUsername, "guess")
	steps := []struct {
		ev   events.APIGatewayV2HTTPRequest
		want int
	}{
		{bad, 401}, {good, 200}, {bad, 401}, {bad, 401}, {good, 200}, {good, 200}, {bad, 401}, {bad, 401}, // 5 failures
		{good, 429}, {bad, 429},
	}
	for i, st := range steps {
		resp := call(t, h, st.ev)
		if resp.StatusCode != st.want {
			t.Fatalf("attempt %d: %d %s, want %d", i+1, resp.StatusCode, resp.Body, st.want)
		}
		if st.want == 429 && !strings.Contains(resp.Body, `"violated-policies":["login-failures"]`) {
			t.Errorf("attempt %d: body %s, want login-failures violated", i+1, resp.Body)
		}
	}
	// Another address is not refused; the window's end frees the first.
	other := bad
	other.RequestContext.HTTP.SourceIP = "198.51.100.8"
	if resp := call(t, h, other); resp.StatusCode != 401 {
		t.Errorf("another address: %d, want 401", resp.StatusCode)
	}
	windowEnd := time.Unix(t0.Unix()/900*900+900, 0)
	at = windowEnd.Add(-time.Millisecond)
	if resp := call(t, h, good); resp.StatusCode != 429 {
		t.Errorf("1 ms before the window ends: %d, want 429", resp.StatusCode)
	}
	at = windowEnd
	if resp := call(t, h, good); resp.StatusCode != 200 {
		t.Errorf("at the window's end: %d %s, want 200", resp.StatusCode, resp.Body)
	}
}

// TestTTSReportsSecondsOfAudio: behind its own policies (in memory), the
// tts handler reports what it generated, SpeechSeconds of its text, and
// speech-seconds is charged that after the response, not 1 per request.
func TestTTSReportsSecondsOfAudio(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int64
	}{{"hi", 1}, {strings.Repeat("a", 25), 1}, {strings.Repeat("a", 26), 2}, {strings.Repeat("speak ", 17), 5}, {strings.Repeat("a", 500), 20}} {
		if got := handlers.SpeechSeconds(tc.text); got != tc.want {
			t.Errorf("SpeechSeconds(%d characters) = %d, want %d", len(tc.text), got, tc.want)
		}
	}
	t0 := time.Unix(1_700_000_000, 0)
	h := middleware.HTTPAPI(memoryEngine(t, handlers.TTS, func() time.Time { return t0 }), handlers.TTS.New(quiet))
	say := func(text string, extra map[string]string) events.APIGatewayV2HTTPResponse {
		hd := map[string]string{"Content-Type": "application/json"}
		for k, v := range extra {
			hd[k] = v
		}
		b, _ := json.Marshal(handlers.TTSRequest{Text: text})
		return call(t, h, event("POST", "/tts", nil, hd, string(b)))
	}
	resp := say("hi", nil)
	challenge := resp.Headers["Edgelimit-Challenge"]
	if resp.StatusCode != 429 || challenge == "" {
		t.Fatalf("no proof: %d %v, want 429 with a challenge", resp.StatusCode, resp.Headers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proof, err := pow.Solve(ctx, challenge)
	if err != nil {
		t.Fatal(err)
	}
	hd := map[string]string{"Edgelimit-Proof": proof}
	for i, st := range []struct {
		text string
		r    int // speech-seconds' r on the response: what was left before its charge
	}{{strings.Repeat("speak ", 17), 300}, {"hi", 295}, {"hi", 294}} {
		resp := say(st.text, hd)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i+1, resp.StatusCode, resp.Body)
		}
		if want := fmt.Sprintf(`"speech-seconds";r=%d;`, st.r); !strings.Contains(resp.Headers["RateLimit"], want) {
			t.Errorf("request %d: RateLimit %q, want %s", i+1, resp.Headers["RateLimit"], want)
		}
		hd = map[string]string{"Edgelimit-Token": resp.Headers["Edgelimit-Token"]}
	}
}
