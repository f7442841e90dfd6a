// Package kv is the setup backend of the kv strategy on the DynamoDB table
// that package setup/dynamodb finds. With EDGELIMIT_KV_REGIONS
// (setup.EnvKVRegions) the table is replicated over those regions and this
// one, AWS_REGION, writes only its own part of each bucket.
package kv

import (
	"fmt"
	"slices"
	"strings"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/kvbucket/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
)

// Backend returns the backend of kv policies on the table cfg names (the
// zero Config: the environment's), with the override and ban stores in the
// same table.
func Backend(cfg dynamodb.Config) setup.Backend { return full{buckets{cfg}} }

// Buckets is Backend without the override and ban stores, for a program
// whose kv policies use neither (the contact function): it links neither,
// and a policy with overrides or a ban is refused at start-up, by name.
func Buckets(cfg dynamodb.Config) setup.Backend { return buckets{cfg} }

type buckets struct{ cfg dynamodb.Config }

// full is buckets with the override and ban stores (overrides.go,
// bans.go).
type full struct{ buckets }

func (buckets) Strategy() *policy.Strategy { return kvbucket.Strategy }

func (b buckets) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	region, regions, err := Regions(env.Getenv)
	if err != nil {
		return nil, err
	}
	client, table, err := b.cfg.Open(env)
	if err != nil {
		return nil, err
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: env.Now, Region: region, Regions: regions})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", setup.ErrEnv, setup.EnvKVRegions, err)
	}
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return kvbucket.New(kvbucket.Config{Policy: p, KV: store, Now: env.Now})
	}, nil
}

// Regions reads EDGELIMIT_KV_REGIONS: this region (AWS_REGION, else
// AWS_DEFAULT_REGION) and every region of the table, or none when it is
// empty (one region). The list must name this region.
func Regions(getenv func(string) string) (region string, regions []string, err error) {
	list := strings.TrimSpace(getenv(setup.EnvKVRegions))
	if list == "" {
		return "", nil, nil
	}
	for r := range strings.SplitSeq(list, ",") {
		if r = strings.TrimSpace(r); r != "" && !slices.Contains(regions, r) {
			regions = append(regions, r)
		}
	}
	region = strings.TrimSpace(getenv("AWS_REGION"))
	if region == "" {
		region = strings.TrimSpace(getenv("AWS_DEFAULT_REGION"))
	}
	switch {
	case region == "":
		return "", nil, fmt.Errorf("%w: %s is set but AWS_REGION is not: this region's part of each bucket is named by it (Lambda sets it)", setup.ErrEnv, setup.EnvKVRegions)
	case !slices.Contains(regions, region):
		return "", nil, fmt.Errorf("%w: %s %q does not name this region, %s (AWS_REGION)", setup.ErrEnv, setup.EnvKVRegions, list, region)
	}
	return region, regions, nil
}
