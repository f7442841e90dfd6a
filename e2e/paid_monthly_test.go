package e2e

import (
	"encoding/json"
	"fmt"
	"math"
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
)

// nextFirstOfMonth is the end of the UTC calendar month at is in, and its
// start: paid-monthly's period (period_start: 1, time_zone: UTC), worked
// out here without the library's calendar code.
func nextFirstOfMonth(at time.Time) (start, end time.Time) {
	at = at.UTC()
	start = time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

var monthlyRL = regexp.MustCompile(`"paid-monthly";r=(\d+);t=(\d+)`)

// TestPaidFunctionMonthlyQuota runs the paid function as built, under the
// Lambda runtime emulator on dynalite, with paid-monthly's quota edited to
// 3 (EDGELIMIT_OVERRIDES, as template.yaml sets it) and the other
// policies out of the way: the quota counts to the end of the calendar
// month (RateLimit's t and a denial's Retry-After are the seconds to the
// 1st, midnight UTC, from the instant of the request, which the test
// brackets by the instants before and after the call); a key refused 20
// times is banned (a 429 that says so, Retry-After the ban's end);
// `edgelimit ban list|lift` on the same table shows and lifts it; and
// `edgelimit reset` gives the key a fresh quota but no cycle of its own:
// its count still ends on the policy's billing day.
func TestPaidFunctionMonthlyQuota(t *testing.T) {
	if _, end := nextFirstOfMonth(time.Now()); time.Until(end) < 30*time.Minute {
		t.Skipf("the month ends at %s, within the run: run it again after", end.Format(time.RFC3339))
	}
	endpoint, table := dynalite(t)
	hashKey := randomKey()
	e := startEmulator(t, "paid", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_HASH_KEY":          hashKey,
		"EDGELIMIT_OVERRIDES": "paid-monthly.limit=3,paid-monthly.store_timeout=" + testBudget +
			",paid-daily.window=" + longWindow + ",paid-daily.store_timeout=" + testBudget +
			",paid-burst.limit=1000,paid-burst.burst=1000,paid-burst.window=" + longWindow + ",paid-burst.store_timeout=" + testBudget,
	})
	key := "key-" + randomID(t)
	// get invokes the function and returns its answer with the instants
	// just before and just after the call: the request's own is between.
	get := func() (resp events.APIGatewayV2HTTPResponse, before, after time.Time) {
		before = time.Now()
		resp, _ = e.invoke(t, sampleEvent(t, "GET", "/paid/report", "203.0.113.7", map[string]string{"X-Api-Key": key}, ""))
		return resp, before, time.Now()
	}
	// toEnd checks that secs is the whole seconds (rounded up) from the
	// request to the month's end, with a second's slack either side.
	toEnd := func(what string, secs int, before, after time.Time) {
		t.Helper()
		_, end := nextFirstOfMonth(before)
		lo, hi := math.Ceil(end.Sub(after).Seconds())-1, math.Ceil(end.Sub(before).Seconds())+1
		if f := float64(secs); f < lo || f > hi {
			t.Errorf("%s: %d seconds, want the %v to %v from the request to the month's end (%s)", what, secs, lo, hi, end.Format(time.RFC3339))
		}
	}
	monthly := func(what string, resp events.APIGatewayV2HTTPResponse) (r, secs int) {
		t.Helper()
		m := monthlyRL.FindStringSubmatch(header(resp, "RateLimit"))
		if m == nil {
			t.Fatalf("%s: RateLimit %q has no paid-monthly member", what, header(resp, "RateLimit"))
		}
		r, _ = strconv.Atoi(m[1])
		secs, _ = strconv.Atoi(m[2])
		return r, secs
	}

	for i := 1; i <= 3; i++ {
		what := fmt.Sprintf("request %d", i)
		resp, before, after := get()
		wantStatus(t, what, resp, 200)
		r, secs := monthly(what, resp)
		if r != 3-i {
			t.Errorf("%s: paid-monthly r=%d, want %d", what, r, 3-i)
		}
		toEnd(what+": paid-monthly t", secs, before, after)
		// w is the length of this month, in seconds.
		start, end := nextFirstOfMonth(before)
		if want := fmt.Sprintf(`"paid-monthly";q=3;w=%d`, int(end.Sub(start).Seconds())); !strings.Contains(header(resp, "RateLimit-Policy"), want) {
			t.Errorf("%s: RateLimit-Policy %q, want it to have %s", what, header(resp, "RateLimit-Policy"), want)
		}
	}
	resp, before, after := get()
	p := wantProblem(t, "request 4", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"paid-monthly"}) {
		t.Errorf("request 4: violated-policies %v, want [paid-monthly]", p.ViolatedPolicies)
	}
	if r, secs := monthly("request 4", resp); r != 0 {
		t.Errorf("request 4: paid-monthly r=%d, want 0", r)
	} else {
		toEnd("request 4: paid-monthly t", secs, before, after)
	}
	ra, _ := strconv.Atoi(header(resp, "Retry-After"))
	toEnd("request 4: Retry-After", ra, before, after)

	// 18 more plain denials; the 20th denial within the hour bans the key
	// for 15 minutes (paid-monthly's ban), and is answered with the ban.
	for i := 2; i < 20; i++ {
		if resp, _, _ := get(); resp.StatusCode != 429 || strings.Contains(resp.Body, `"ban":`) {
			t.Fatalf("denial %d: %d %s, want a plain 429", i, resp.StatusCode, resp.Body)
		}
	}
	banned, before, after := get()
	wantProblem(t, "denial 20", banned, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	var body struct {
		Detail string `json:"detail"`
		Ban    struct {
			Policy string    `json:"policy"`
			Until  time.Time `json:"until"`
			Level  int       `json:"level"`
		} `json:"ban"`
	}
	if err := json.Unmarshal([]byte(banned.Body), &body); err != nil {
		t.Fatal(err)
	}
	if body.Ban.Policy != "paid-monthly" || body.Ban.Level != 1 || !strings.Contains(body.Detail, `banned by policy "paid-monthly"`) {
		t.Errorf("denial 20: body %s, want a detail and ban member naming paid-monthly's first ban", banned.Body)
	}
	// The ban lasts 15 minutes from the denial that started it; its
	// Retry-After and t count to its end.
	if lo, hi := before.Add(15*time.Minute-time.Second), after.Add(15*time.Minute+time.Second); body.Ban.Until.Before(lo) || body.Ban.Until.After(hi) {
		t.Errorf("denial 20: ban until %s, want 15 minutes after the request (%s to %s)", body.Ban.Until, lo, hi)
	}
	wantRetry := func(what string, resp events.APIGatewayV2HTTPResponse, until time.Time, before, after time.Time) {
		t.Helper()
		lo, hi := math.Ceil(until.Sub(after).Seconds())-1, math.Ceil(until.Sub(before).Seconds())+1
		ra, _ := strconv.Atoi(header(resp, "Retry-After"))
		_, secs := monthly(what, resp)
		for _, v := range []int{ra, secs} {
			if f := float64(v); f < lo || f > hi {
				t.Errorf("%s: Retry-After %d and paid-monthly t=%d, want %v to %v: the seconds to the ban's end %s",
					what, ra, secs, lo, hi, until.Format(time.RFC3339))
			}
		}
	}
	wantRetry("denial 20", banned, body.Ban.Until, before, after)
	again, before, after := get()
	if !strings.Contains(again.Body, `"ban":{"policy":"paid-monthly"`) {
		t.Errorf("banned key's next request: %d %s, want the ban", again.StatusCode, again.Body)
	}
	wantRetry("banned key's next request", again, body.Ban.Until, before, after)

	// The operator sees the ban and lifts it, on the same table, with the
	// function's hash key.
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(edgelimitPath(t), args...)
		cmd.Env = append(os.Environ(), "EDGELIMIT_HASH_KEY="+hashKey, "EDGELIMIT_TABLE="+table, "EDGELIMIT_DYNAMODB_ENDPOINT="+endpoint,
			"EDGELIMIT_POLICY_FILE="+filepath.Join(root, "functions", "handlers", "policies", "paid.yaml"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("edgelimit %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var listed struct {
		Banned bool      `json:"banned"`
		Until  time.Time `json:"until"`
		Level  int       `json:"level"`
	}
	if out := cli("ban", "list", "--json", "paid-monthly", key); json.Unmarshal([]byte(out), &listed) != nil ||
		!listed.Banned || listed.Level != 1 || body.Ban.Until.Sub(listed.Until).Abs() > time.Second {
		// Both print whole seconds: the 429's body rounds the end up
		// (as Retry-After does), the CLI's JSON down.
		t.Errorf("edgelimit ban list: %s, want banned at level 1 until %s (within the second)", out, body.Ban.Until.Format(time.RFC3339))
	}
	if out := cli("ban", "list", "paid-daily", key); !strings.Contains(out, "policy paid-daily: not banned") {
		t.Errorf("edgelimit ban list paid-daily: %q, want not banned (only paid-monthly refused the key)", out)
	}
	if out := cli("ban", "lift", "paid-monthly", key); !strings.Contains(out, "lifted") {
		t.Errorf("edgelimit ban lift: %q", out)
	}
	if out := cli("ban", "list", "paid-monthly", key); strings.TrimSpace(out) != "policy paid-monthly: not banned" {
		t.Errorf("edgelimit ban list after the lift: %q, want not banned", out)
	}
	// The function re-reads a ban it knows within the ban's staleness (5s)
	// and then refuses the key for its quota alone: a plain 429 whose
	// Retry-After is the month's end again.
	var plain events.APIGatewayV2HTTPResponse
	for deadline := time.Now().Add(invokeTimeout); ; time.Sleep(200 * time.Millisecond) {
		plain, before, after = get()
		if plain.StatusCode == 429 && !strings.Contains(plain.Body, `"ban":`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the lift: %d %s, still banned", plain.StatusCode, plain.Body)
		}
	}
	ra, _ = strconv.Atoi(header(plain, "Retry-After"))
	toEnd("after the lift: Retry-After", ra, before, after)

	// A reset is not a billing cycle of the key's own: it gives the key a
	// fresh quota (every instance within a second), and the count still
	// ends on the policy's billing day.
	if out := cli("reset", "paid-monthly", key); !strings.Contains(out, "reset") {
		t.Errorf("edgelimit reset: %q", out)
	}
	for deadline := time.Now().Add(invokeTimeout); ; time.Sleep(200 * time.Millisecond) {
		resp, before, after = get()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reset: %d %s, want 200", resp.StatusCode, resp.Body)
		}
	}
	if r, secs := monthly("after the reset", resp); r != 2 {
		t.Errorf("after the reset: paid-monthly r=%d, want 2", r)
	} else {
		toEnd("after the reset: paid-monthly t", secs, before, after)
	}
	if strings.Contains(e.output(), key) {
		t.Errorf("the raw API key appears in the function's output")
	}
}
