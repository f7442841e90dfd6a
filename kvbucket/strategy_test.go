package kvbucket_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
)

// TestPolicyFields: a kv policy's own fields reach its Options and the
// Bucket, and bad values are the file's errors.
func TestPolicyFields(t *testing.T) {
	pf, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: c, routes: ["POST /c"], key: ip, strategy: kv, limit: 5, window: 1m, burst: 8, sync_interval: 2s, cache_size: 1000}
`))
	if err != nil {
		t.Fatal(err)
	}
	o, ok := pf.Policies[0].Options.(*kvbucket.Options)
	if want := (kvbucket.Options{Burst: 8, SyncInterval: 2 * time.Second, CacheSize: 1000}); !ok || *o != want {
		t.Fatalf("Options = %#v, want %+v", pf.Policies[0].Options, want)
	}
	if got, want := o.String(), "token-bucket burst=8 sync=2s cache=1000"; got != want {
		t.Errorf("Options.String() = %q, want %q", got, want)
	}
	b, err := kvbucket.New(kvbucket.Config{Policy: pf.Policies[0], KV: kvbucket.NewMemory(kvbucket.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	if b.Params().Capacity != 8 || b.SyncInterval() != 2*time.Second {
		t.Errorf("bucket %+v, sync %s; want capacity 8, sync 2s", b.Params(), b.SyncInterval())
	}
	for _, bad := range []string{"cache_size: 0", "burst: 0", "algorithm: gcra", "cost: 9"} {
		_, err := policy.Parse("p.yaml", []byte("version: 1\npolicies:\n  - {name: c, routes: [\"POST /c\"], key: ip, strategy: kv, limit: 5, window: 1m, "+bad+"}\n"))
		field := strings.SplitN(bad, ":", 2)[0]
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, field)
		}
	}
}
