package edgelimit_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/edgelimit/edgelimit"
)

func TestTemplatePath(t *testing.T) {
	tests := map[string]string{
		"POST /contact":        "/contact",
		"GET /paid/{resource}": "/paid/{resource}",
		"ANY /{proxy+}":        "/{proxy+}",
		"/paid/{resource}":     "/paid/{resource}",
		"$default":             "",
		"":                     "",
		"GET relative":         "",
		"GET /double//{x}/":    "/double/{x}",
	}
	for in, want := range tests {
		if got := edgelimit.TemplatePath(in); got != want {
			t.Errorf("TemplatePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRouteSetsFirstConcurrentRequests sends the first requests of a fresh
// engine from 64 goroutines over paths that match different sets of
// policies, so that route sets are built while others are read: every
// request is decided by exactly the policies its path matches. In a file of
// more than 64 policies (65 first that no path here matches), route sets
// are named by their policies' list, not a mask.
func TestRouteSetsFirstConcurrentRequests(t *testing.T) {
	const five = `
  - {name: all, routes: ["ANY /*"], key: ip, strategy: durable, limit: 1000000, window: 1h}
  - {name: api, routes: ["ANY /api/*"], key: ip, strategy: durable, limit: 1000000, window: 1h}
  - {name: items, routes: ["GET /api/items"], key: ip, strategy: durable, limit: 1000000, window: 1h}
  - {name: posts, routes: ["POST /api/*"], key: ip, strategy: durable, limit: 1000000, window: 1h}
  - {name: admin, routes: ["ANY /admin/*", "ANY /api/admin"], key: ip, strategy: durable, limit: 1000000, window: 1h}
`
	var filler strings.Builder
	for i := range 65 {
		fmt.Fprintf(&filler, "\n  - {name: filler-%d, routes: [\"GET /filler/%d\"], key: ip, strategy: durable, limit: 1000000, window: 1h}", i, i)
	}
	for name, file := range map[string]string{"5 policies": five, "70 policies": filler.String() + five} {
		t.Run(name, func(t *testing.T) {
			firstConcurrentRequests(t, newFixture(t, "version: 1\npolicies:"+file, nil))
		})
	}
}

func firstConcurrentRequests(t *testing.T, fx *fixture) {
	cases := []struct{ method, path, want string }{
		{"GET", "/", "all"},
		{"GET", "/api/items", "all,api,items"},
		{"POST", "/api/items", "all,api,posts"},
		{"GET", "/api/other", "all,api"},
		{"POST", "/api/admin", "all,api,posts,admin"},
		{"GET", "/api/admin", "all,api,admin"},
		{"DELETE", "/admin/x", "all,admin"},
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				c := cases[(g+i)%len(cases)]
				v := fx.do(c.method, c.path, "203.0.113.9", nil)
				var names []string
				for _, d := range v.Decisions {
					names = append(names, d.Policy)
				}
				got := strings.Join(names, ",")
				v.Release()
				if got != c.want {
					select {
					case errs <- fmt.Sprintf("%s %s: decided by %q, want %q", c.method, c.path, got, c.want):
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
