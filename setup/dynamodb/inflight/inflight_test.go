package inflight_test

import (
	"context"
	"testing"

	"github.com/edgelimit/edgelimit"
	limit "github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
)

// TestBackend: the backend builds inflight policies on the table the
// environment names, as a Lambda function's main does, and two limiters it
// builds (two instances) share their slots.
func TestBackend(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		_, table, _ := ddbtest.Table(t, s)
		file, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: speech, routes: ["POST /tts"], key: ip, strategy: inflight, limit: 1, window: 15m}
`))
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{setup.EnvTable: table, setup.EnvEndpoint: s.Endpoint}
		env := setup.BackendEnv{Getenv: func(k string) string { return vars[k] }}
		var lims []edgelimit.Limiter
		for range 2 {
			factory, err := setup.Limiters(file, []setup.Backend{inflight.Backend(dynamodb.Config{})}, env)
			if err != nil {
				t.Fatal(err)
			}
			l, err := factory(file.Policies[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := l.(*limit.Limiter); !ok {
				t.Fatalf("the backend built a %T", l)
			}
			lims = append(lims, l)
		}
		ctx := context.Background()
		if d, err := lims[0].Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || !d.Allowed {
			t.Fatalf("first instance: %+v, %v", d, err)
		}
		if d, err := lims[1].Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || d.Allowed {
			t.Fatalf("second instance: %+v, %v; want denied", d, err)
		}
	})
	vars := map[string]string{}
	_, err := setup.Limiters(&policy.File{Policies: []*policy.Policy{{Name: "speech", Strategy: limit.Strategy}}},
		[]setup.Backend{inflight.Backend(dynamodb.Config{})}, setup.BackendEnv{Getenv: func(k string) string { return vars[k] }})
	if err == nil {
		t.Error("no table in the environment: no error")
	}
}
