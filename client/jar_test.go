package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jwt returns an unsigned token-shaped string with aud and exp (the jar never
// verifies; only the server can).
func jwt(aud string, exp time.Time, n int) string {
	p := `{"aud":"` + aud + `","exp":` + strconv.FormatInt(exp.Unix(), 10) + `,"n":` + strconv.Itoa(n) + `}`
	return "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(p)) + ".sig"
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestJar(t *testing.T) {
	j := NewJar()
	api := mustURL("https://API.example.com/tts")
	exp := t0.Add(time.Minute)
	a1, a2, b1 := jwt("a", exp, 1), jwt("a", exp, 2), jwt("b", t0.Add(time.Hour), 1)
	j.Store(api, a1, t0)
	j.Store(mustURL("https://api.example.com/other"), a2+", "+b1, t0)
	if got := j.Header(mustURL("https://api.example.com/anything"), t0); got != b1+", "+a2 {
		t.Errorf("Header = %q, want the newest token of each policy, newest first", got)
	}
	for _, other := range []string{"http://api.example.com/tts", "https://api.example.com:8443/tts", "https://example.com/tts"} {
		if got := j.Header(mustURL(other), t0); got != "" {
			t.Errorf("Header(%s) = %q, want nothing: another origin", other, got)
		}
	}
	if got := j.Header(api, exp); got != b1 {
		t.Errorf("Header at a's expiry = %q, want only b", got)
	}
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	k := NewJar()
	if err := json.Unmarshal(data, k); err != nil {
		t.Fatal(err)
	}
	if got, want := k.Header(api, t0), j.Header(api, t0); got != want {
		t.Errorf("restored jar sends %q, want %q", got, want)
	}
	j.Forget(api)
	if got := j.Header(api, t0); got != "" {
		t.Errorf("after Forget: %q", got)
	}
}

func TestJarBounds(t *testing.T) {
	j := NewJar()
	u := mustURL("https://x.test/")
	for i := range 12 {
		j.Store(u, jwt("p"+strconv.Itoa(i), t0.Add(time.Hour), 1), t0)
	}
	h := j.Header(u, t0)
	if n := strings.Count(h, ",") + 1; n != maxTokensPerOrigin || !strings.HasPrefix(h, jwt("p11", t0.Add(time.Hour), 1)) {
		t.Errorf("%d tokens sent, want the %d newest", n, maxTokensPerOrigin)
	}
	big := NewJar()
	for i := range 8 {
		big.Store(u, jwt(strings.Repeat("q", 700)+strconv.Itoa(i), t0.Add(time.Hour), 1), t0)
	}
	if h := big.Header(u, t0); len(h) > maxTokenHeader || h == "" {
		t.Errorf("header of %d bytes, want at most %d", len(h), maxTokenHeader)
	}
	// Opaque tokens are kept (under one slot) and sent.
	j.Store(u, "opaque", t0)
	if !strings.HasPrefix(j.Header(u, t0), "opaque") {
		t.Error("an opaque token was not kept")
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 0 ", 0, true},
		{t0.Add(90 * time.Second).UTC().Format(http.TimeFormat), 90 * time.Second, true},
		{t0.Add(-time.Hour).UTC().Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
	} {
		got, ok := retryAfter(tc.in, t0)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDefaultSleepHonoursContext(t *testing.T) {
	var tr Transport
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("sleep(cancelled, 1h) = %v, want context.Canceled", err)
	}
	if err := tr.sleep(context.Background(), 0); err != nil {
		t.Errorf("sleep(0) = %v", err)
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{EventChallenge: "challenge", EventSolved: "solved", EventWait: "wait", EventToken: "token", EventGiveUp: "give-up", 0: "EventKind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}
