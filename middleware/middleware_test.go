package middleware_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// absent in a want header map means the header must not be sent.
const absent = "<absent>"

type step struct {
	name string
	call call
	// status is the wanted status; 200 means the handler ran.
	status int
	header map[string]string
	// problem, for a status other than 200, holds wanted fields of the
	// problem+json body.
	problem map[string]any
}

func get(path, key string) call {
	c := call{Method: "GET", Path: path, IP: "203.0.113.7"}
	if key != "" {
		c.Header = map[string]string{"X-Api-Key": key}
	}
	return c
}

func fromIP(path, ip, spoof string) call {
	return call{Method: "GET", Path: path, IP: ip, Header: map[string]string{"X-Forwarded-For": spoof}}
}

func paidAllowed(r int) map[string]string {
	return map[string]string{
		"RateLimit-Policy":      `"paid";q=3;w=60`,
		"RateLimit":             `"paid";r=` + itoa(r) + `;t=60`,
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": itoa(r),
		"X-RateLimit-Reset":     "60",
		"Retry-After":           absent,
		"X-Handler":             "ran",
		"Content-Type":          "application/json",
	}
}

var quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// scenarios is the one table every adapter runs.
var scenarios = []struct {
	name  string
	steps []step
}{
	{"allowed under limit", []step{
		{name: "first", call: get("/paid/report", "key-1"), status: 200, header: paidAllowed(2)},
	}},
	{"429 at limit", []step{
		{name: "1", call: get("/paid/report", "key-1"), status: 200, header: paidAllowed(2)},
		{name: "2", call: get("/paid/a/b", "key-1"), status: 200, header: paidAllowed(1)},
		{name: "3", call: get("/paid/", "key-1"), status: 200, header: paidAllowed(0)},
		{name: "4 denied", call: get("/paid/report", "key-1"), status: 429,
			header: map[string]string{
				"RateLimit-Policy":      `"paid";q=3;w=60`,
				"RateLimit":             `"paid";r=0;t=60`,
				"X-RateLimit-Limit":     "3",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "60",
				"Retry-After":           "60",
				"Content-Type":          "application/problem+json",
				"X-Handler":             absent,
			},
			problem: map[string]any{
				"type":              quotaExceeded,
				"status":            429.0,
				"title":             "Request cannot be satisfied as assigned quota has been exceeded",
				"detail":            `Quota exceeded for policy "paid". Retry in 60 seconds.`,
				"violated-policies": []any{"paid"},
				"retry-after":       60.0,
			}},
		{name: "another key", call: get("/paid/report", "key-2"), status: 200, header: paidAllowed(2)},
	}},
	{"missing key header", []step{
		{name: "no header", call: get("/paid/report", ""), status: 400,
			header: map[string]string{
				"Content-Type":     "application/problem+json",
				"RateLimit":        absent,
				"RateLimit-Policy": absent,
				"Retry-After":      absent,
				"X-Handler":        absent,
			},
			problem: map[string]any{"type": "about:blank", "status": 400.0, "title": "Bad Request",
				"detail": "This endpoint requires the X-Api-Key header."}},
		{name: "blank header", call: get("/paid/report", "   "), status: 400,
			problem: map[string]any{"status": 400.0}},
	}},
	{"two policies on one route", []step{
		{name: "1", call: get("/pair/x", "key-1"), status: 200, header: map[string]string{
			"RateLimit-Policy":      `"pair-key";q=2;w=60, "pair-ip";q=5;w=3600`,
			"RateLimit":             `"pair-key";r=1;t=60, "pair-ip";r=4;t=3600`,
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": "1",
			"X-RateLimit-Reset":     "60",
		}},
		{name: "2", call: get("/pair/x", "key-1"), status: 200, header: map[string]string{
			"RateLimit":             `"pair-key";r=0;t=60, "pair-ip";r=3;t=3600`,
			"X-RateLimit-Remaining": "0",
		}},
		{name: "3 denied by one", call: get("/pair/x", "key-1"), status: 429,
			header: map[string]string{"Retry-After": "60", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0",
				"RateLimit-Policy": `"pair-key";q=2;w=60, "pair-ip";q=5;w=3600`},
			problem: map[string]any{"type": quotaExceeded, "violated-policies": []any{"pair-key"}}},
		// The denial did not spend pair-ip: 2 of 5 were spent, this is the third.
		{name: "other key, same address", call: get("/pair/y", "key-2"), status: 200, header: map[string]string{
			"RateLimit": `"pair-key";r=1;t=60, "pair-ip";r=2;t=3600`,
		}},
	}},
	{"ip key ignores X-Forwarded-For", []step{
		{name: "1", call: fromIP("/ip/x", "203.0.113.7", "198.51.100.1"), status: 200,
			header: map[string]string{"RateLimit": `"by-ip";r=1;t=60`}},
		{name: "2 spoofed", call: fromIP("/ip/x", "203.0.113.7", "198.51.100.2"), status: 200,
			header: map[string]string{"RateLimit": `"by-ip";r=0;t=60`}},
		{name: "3 spoofed", call: fromIP("/ip/x", "203.0.113.7", "198.51.100.3"), status: 429,
			problem: map[string]any{"violated-policies": []any{"by-ip"}}},
		{name: "other address", call: fromIP("/ip/x", "2001:db8::1", "203.0.113.7"), status: 200,
			header: map[string]string{"RateLimit": `"by-ip";r=1;t=60`}},
		{name: "same /64", call: fromIP("/ip/y", "2001:db8::2", "203.0.113.7"), status: 200,
			header: map[string]string{"RateLimit": `"by-ip";r=0;t=60`}},
	}},
	{"route without policies", []step{
		{name: "free", call: get("/free", ""), status: 200, header: map[string]string{
			"RateLimit": absent, "RateLimit-Policy": absent, "X-RateLimit-Limit": absent, "X-Handler": "ran"}},
		{name: "method not guarded", call: call{Method: "POST", Path: "/paid/report", IP: "203.0.113.7"}, status: 200,
			header: map[string]string{"RateLimit": absent}},
	}},
	{"allow and deny lists", []step{
		{name: "denied address", call: fromIP("/paid/report", "198.51.100.66", ""), status: 403,
			header:  map[string]string{"RateLimit": absent, "Retry-After": absent},
			problem: map[string]any{"title": "Forbidden", "status": 403.0}},
		{name: "denied v6", call: fromIP("/free", "2001:db8:bad:1::9", ""), status: 403},
		{name: "allowed 1", call: get("/paid/report", "internal-job"), status: 200, header: map[string]string{"RateLimit": absent, "X-Handler": "ran"}},
		{name: "allowed 2", call: get("/paid/report", "internal-job"), status: 200, header: map[string]string{"RateLimit": absent}},
		{name: "allowed 3", call: get("/paid/report", "internal-job"), status: 200, header: map[string]string{"RateLimit": absent}},
		{name: "allowed 4, past the limit", call: get("/paid/report", "internal-job"), status: 200, header: map[string]string{"RateLimit": absent}},
		{name: "others still limited", call: get("/paid/report", "key-1"), status: 200, header: paidAllowed(2)},
	}},
	{"dot segments cannot escape a route", []step{
		{name: "1", call: get("/public/%2e%2e/paid/x", "key-1"), status: 200, header: paidAllowed(2)},
		{name: "2", call: get("/public/../paid/x", "key-1"), status: 200, header: paidAllowed(1)},
		{name: "3", call: get("//paid//x", "key-1"), status: 200, header: paidAllowed(0)},
		{name: "4", call: get("/p%61id/x", "key-1"), status: 429},
	}},
}

func itoa(n int) string { return strconv.Itoa(n) }

// observed is what must be identical across adapters for one step.
type observed struct {
	Status int
	Header map[string][]string
	Body   string
}

var compared = []string{
	"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"Retry-After", "Content-Type", "Edgelimit-Token", "Edgelimit-Challenge",
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			seen := map[string][]observed{}
			for _, a := range adapters {
				e, _ := newEngine(t, testPolicies)
				run := a.build(t, e, nil, nil)
				var got []observed
				for _, st := range sc.steps {
					r := run(st.call)
					checkStep(t, a.name, st, r)
					c := observed{Status: r.Status, Header: map[string][]string{}}
					for _, h := range compared {
						c.Header[h] = r.Header.Values(h)
					}
					if r.Status != 200 {
						c.Body = r.Body
					}
					got = append(got, c)
				}
				seen[a.name] = got
			}
			ref := adapters[0].name
			for _, a := range adapters[1:] {
				if !reflect.DeepEqual(seen[a.name], seen[ref]) {
					t.Errorf("%s differs from %s:\n got %+v\nwant %+v", a.name, ref, seen[a.name], seen[ref])
				}
			}
		})
	}
}

func checkStep(t *testing.T, adapter string, st step, r result) {
	t.Helper()
	where := adapter + " " + st.name + " " + st.call.Method + " " + st.call.Path
	if r.Err != nil {
		t.Errorf("%s: error %v", where, r.Err)
	}
	if r.Status != st.status {
		t.Errorf("%s: status = %d, want %d (body %s)", where, r.Status, st.status, r.Body)
	}
	if r.Ran != (st.status == 200) {
		t.Errorf("%s: handler ran = %v, want %v", where, r.Ran, st.status == 200)
	}
	if r.Base64 {
		t.Errorf("%s: IsBase64Encoded = true, want false", where)
	}
	for name, want := range st.header {
		got := r.Header.Values(name)
		switch {
		case want == absent && len(got) != 0:
			t.Errorf("%s: header %s = %q, want absent", where, name, got)
		case want != absent && !reflect.DeepEqual(got, []string{want}):
			t.Errorf("%s: header %s = %q, want [%q]", where, name, got, want)
		}
	}
	// Every header we send is sent once.
	for _, name := range compared {
		if n := len(r.Header.Values(name)); n > 1 {
			t.Errorf("%s: header %s sent %d times: %q", where, name, n, r.Header.Values(name))
		}
	}
	if r.Ran && (r.Verdict == nil || !r.Verdict.Allowed) {
		t.Errorf("%s: the handler's context carries verdict %+v, want the allowing one", where, r.Verdict)
	}
	if st.status == 200 {
		if r.Verdict != nil && st.header["RateLimit"] != "" && st.header["RateLimit"] != absent &&
			len(r.Verdict.Decisions) == 0 {
			t.Errorf("%s: the verdict in the handler's context has no decisions", where)
		}
		if r.Body != handlerBody {
			t.Errorf("%s: body = %q, want the handler's %q", where, r.Body, handlerBody)
		}
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type = %q, want %q", where, ct, "application/problem+json")
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", where, r.Body, err)
		return
	}
	if p["status"] != float64(st.status) {
		t.Errorf("%s: problem status = %v, want %d", where, p["status"], st.status)
	}
	for k, want := range st.problem {
		if !reflect.DeepEqual(p[k], want) {
			t.Errorf("%s: problem %s = %#v, want %#v", where, k, p[k], want)
		}
	}
}

// TestHandlerHeadersKept pins the merge rule: the handler's own headers stay,
// ours replace a header of the same name (in any case) the handler set.
func TestHandlerHeadersKept(t *testing.T) {
	extra := map[string]string{
		"Cache-Control": "no-store",
		"ratelimit":     "bogus", // one of ours, set by the handler in another case
	}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			e, _ := newEngine(t, testPolicies)
			r := a.build(t, e, extra, nil)(get("/paid/report", "key-1"))
			if r.Status != 200 {
				t.Fatalf("status = %d, want 200", r.Status)
			}
			if got := r.Header.Values("Cache-Control"); !reflect.DeepEqual(got, []string{"no-store"}) {
				t.Errorf("Cache-Control = %q, want [no-store]", got)
			}
			if got := r.Header.Values("Content-Type"); !reflect.DeepEqual(got, []string{"application/json"}) {
				t.Errorf("Content-Type = %q, want the handler's [application/json]", got)
			}
			if got, want := r.Header.Values("RateLimit"), []string{`"paid";r=2;t=60`}; !reflect.DeepEqual(got, want) {
				t.Errorf("RateLimit = %q, want %q", got, want)
			}
		})
	}
}

// TestHandlerError: the handler's error comes back unchanged.
func TestHandlerError(t *testing.T) {
	errBoom := errors.New("boom")
	for _, a := range adapters {
		if a.name == "Handler" {
			continue // net/http handlers return no error
		}
		t.Run(a.name, func(t *testing.T) {
			e, _ := newEngine(t, testPolicies)
			r := a.build(t, e, nil, errBoom)(get("/paid/report", "key-1"))
			if r.Err != errBoom {
				t.Errorf("error = %v, want %v", r.Err, errBoom)
			}
			if !r.Ran {
				t.Errorf("handler did not run")
			}
		})
	}
}

// TestClaimKey: the same subject, read from a JWT authorizer, a Lambda
// authorizer, a REST Lambda authorizer and a Cognito authorizer, spends one
// quota; events without claims get a 400.
func TestClaimKey(t *testing.T) {
	e, _ := newEngine(t, testPolicies)
	run := map[string]func(call) result{}
	for _, a := range adapters {
		run[a.name] = a.build(t, e, nil, nil)
	}
	me := func(sample string) call {
		return call{Method: "GET", Path: "/me", IP: "203.0.113.7", Sample: sample}
	}
	steps := []struct {
		adapter, sample string
		want            int
	}{
		{"HTTPAPI", "apigw-v2-request-jwt-authorizer.json", 200},
		{"RESTAPI", "apigw-request-cognito.json", 200},
		{"HTTPAPI", "apigw-v2-request-lambda-authorizer.json", 429},
		{"RESTAPI", "apigw-request.json", 429},
		{"HTTPAPI", "apigw-v2-request-no-authorizer.json", 400},
		{"FunctionURL", "", 400},
		{"ALB", "", 400},
		{"ALB-multi-value", "", 400},
		{"Handler", "", 400},
	}
	for _, st := range steps {
		r := run[st.adapter](me(st.sample))
		if r.Status != st.want {
			t.Errorf("%s %s: status = %d, want %d (body %s)", st.adapter, st.sample, r.Status, st.want, r.Body)
		}
		if st.want == 400 && !strings.Contains(r.Body, `authorizer claim \"sub\"`) {
			t.Errorf("%s %s: body = %s, want it to name the claim", st.adapter, st.sample, r.Body)
		}
	}
}

// TestSourceAddress: every adapter hands the engine the same client address
// for the same client, read from where its event keeps it.
func TestSourceAddress(t *testing.T) {
	const policies = `
version: 1
policies:
  - name: everyone
    routes: ["ANY /*"]
    key: ip
    strategy: durable
    limit: 1000
    window: 1m
`
	var keys []string
	for _, a := range adapters {
		e, ls := newEngine(t, policies, "everyone")
		r := a.build(t, e, nil, nil)(call{Method: "GET", Path: "/x", IP: "203.0.113.7",
			Header: map[string]string{"X-Forwarded-For": "198.51.100.9"}})
		if r.Status != 200 {
			t.Fatalf("%s: status %d", a.name, r.Status)
		}
		got := ls.record["everyone"].recorded()
		if len(got) != 1 {
			t.Fatalf("%s: %d limiter calls, want 1", a.name, len(got))
		}
		keys = append(keys, got[0])
	}
	for i, k := range keys {
		if k != keys[0] {
			t.Errorf("%s: key %q, want %q as for %s", adapters[i].name, k, keys[0], adapters[0].name)
		}
	}
	// And it is not the spoofed address.
	e, ls := newEngine(t, policies, "everyone")
	adapters[0].build(t, e, nil, nil)(call{Method: "GET", Path: "/x", IP: "198.51.100.9"})
	if got := ls.record["everyone"].recorded(); len(got) != 1 || got[0] == keys[0] {
		t.Errorf("spoofed X-Forwarded-For gave the key of the address it names")
	}
}
