package kv_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
)

func TestRegions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		vars        map[string]string
		wantRegion  string
		wantRegions []string
		wantErr     bool
	}{
		{name: "unset: one region", vars: map[string]string{"AWS_REGION": "eu-west-1"}},
		{name: "blank: one region", vars: map[string]string{setup.EnvKVRegions: " ", "AWS_REGION": "eu-west-1"}},
		{name: "two regions", vars: map[string]string{setup.EnvKVRegions: "eu-west-1, eu-central-1", "AWS_REGION": "eu-west-1"},
			wantRegion: "eu-west-1", wantRegions: []string{"eu-west-1", "eu-central-1"}},
		{name: "duplicates and empty entries", vars: map[string]string{setup.EnvKVRegions: "eu-central-1,,eu-west-1,eu-central-1,", "AWS_REGION": "eu-west-1"},
			wantRegion: "eu-west-1", wantRegions: []string{"eu-central-1", "eu-west-1"}},
		{name: "AWS_DEFAULT_REGION", vars: map[string]string{setup.EnvKVRegions: "a,b", "AWS_DEFAULT_REGION": "b"},
			wantRegion: "b", wantRegions: []string{"a", "b"}},
		{name: "without this region", vars: map[string]string{setup.EnvKVRegions: "eu-central-1", "AWS_REGION": "eu-west-1"}, wantErr: true},
		{name: "no AWS_REGION", vars: map[string]string{setup.EnvKVRegions: "eu-west-1,eu-central-1"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			region, regions, err := kv.Regions(func(k string) string { return tc.vars[k] })
			if tc.wantErr {
				if !errors.Is(err, setup.ErrEnv) {
					t.Errorf("Regions = %q, %q, %v; want an error wrapping setup.ErrEnv", region, regions, err)
				}
				return
			}
			if err != nil || region != tc.wantRegion || !slices.Equal(regions, tc.wantRegions) {
				t.Errorf("Regions = %q, %q, %v; want %q, %q", region, regions, err, tc.wantRegion, tc.wantRegions)
			}
		})
	}
}

// TestBackendWritesThisRegionsPart: with EDGELIMIT_KV_REGIONS the backend
// builds its buckets on a store of this region's parts: a decision writes
// the item "…@<AWS_REGION>" and no unsuffixed one; without it, the
// unsuffixed item.
func TestBackendWritesThisRegionsPart(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, s)
		file, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: contact, routes: ["POST /contact"], key: ip, strategy: kv, limit: 5, window: 1m}
`))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		has := func(pk string) bool {
			t.Helper()
			out, err := client.GetItem(ctx, &awsdynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}})
			if err != nil {
				t.Fatal(err)
			}
			return out.Item != nil
		}
		for _, tc := range []struct {
			key, regions, want, not string
		}{
			{"one", "", "kv#contact#one", "kv#contact#one@eu-west-1"},
			{"two", "eu-west-1,eu-central-1", "kv#contact#two@eu-west-1", "kv#contact#two"},
		} {
			vars := map[string]string{setup.EnvTable: table, "AWS_REGION": "eu-west-1", setup.EnvKVRegions: tc.regions}
			factory, err := setup.Limiters(file, []setup.Backend{kv.Backend(dynamodb.Config{Client: client})},
				setup.BackendEnv{Getenv: func(k string) string { return vars[k] }, Policies: file.Policies})
			if err != nil {
				t.Fatal(err)
			}
			l, err := factory(file.Policies[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := l.(*kvbucket.Bucket); !ok {
				t.Fatalf("the backend built a %T", l)
			}
			if d, err := l.Allow(ctx, edgelimit.Request{Key: tc.key}); err != nil || !d.Allowed {
				t.Fatalf("Allow = %+v, %v", d, err)
			}
			if !has(tc.want) || has(tc.not) {
				t.Errorf("regions %q: item %q written %v, item %q written %v; want only the first", tc.regions, tc.want, has(tc.want), tc.not, has(tc.not))
			}
		}
	})
	vars := map[string]string{setup.EnvTable: "t", setup.EnvKVRegions: "eu-central-1", "AWS_REGION": "eu-west-1"}
	file := &policy.File{Policies: []*policy.Policy{{Name: "contact", Strategy: kvbucket.Strategy}}}
	if _, err := setup.Limiters(file, []setup.Backend{kv.Backend(dynamodb.Config{})}, setup.BackendEnv{Getenv: func(k string) string { return vars[k] }}); !errors.Is(err, setup.ErrEnv) {
		t.Errorf("regions without this one: %v, want an error wrapping setup.ErrEnv", err)
	}
}
