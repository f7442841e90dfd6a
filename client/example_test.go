package client_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/client"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// A server with one signed policy with proof of work, and a client that
// answers its challenges: the caller only sees 200s.
func ExampleTransport() {
	file, _ := policy.Parse("policies.yaml", []byte(`
version: 1
policies:
  - name: tts
    routes: ["POST /tts"]
    key: ip
    strategy: signed
    limit: 2
    window: 1m
    proof_of_work: {bits: 8, ttl: 10s}
`))
	now := func() time.Time { return time.Unix(1_700_000_000, 0) } // a fixed clock, for the output
	engine, _ := edgelimit.New(edgelimit.Config{
		Policies: file,
		Limiters: signedwindow.NewFactory(signedwindow.Config{Keys: signedwindow.EphemeralKeyRing(), Now: now}),
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		v := engine.Decide(r.Context(), &edgelimit.Input{Method: r.Method, Path: r.URL.Path, SourceIP: ip, Header: r.Header})
		for _, f := range v.Header() {
			w.Header().Add(f.Name, f.Value)
		}
		if !v.Allowed {
			w.WriteHeader(v.Status)
			w.Write(v.Body)
			return
		}
		io.WriteString(w, "audio")
	}))
	defer srv.Close()

	tr := &client.Transport{
		Now: now,
		Observe: func(e client.Event) {
			if e.Kind == client.EventChallenge || e.Kind == client.EventGiveUp {
				fmt.Printf("  (%s, %d bits)\n", e.Kind, e.Bits)
			}
		},
	}
	c := tr.Client()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/tts", nil)
		resp, err := c.Do(req)
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
		resp.Body.Close()
		cancel()
	}
	// Output:
	//   (challenge, 8 bits)
	// 200 "tts";r=1;t=60
	// 200 "tts";r=0;t=60
	//   (challenge, 8 bits)
	// 200 "tts";r=1;t=60
}
