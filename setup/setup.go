// Package setup builds an engine from a policy file and the environment: it
// is what a Lambda function's main calls once, before its first request
// (FromEnv), and what `edgelimit serve` uses.
//
// Each strategy's limiters come from a Backend that says where their state
// lives: setup/memory (in-process, one instance), setup/dynamodb (a DynamoDB
// table shared by every instance) and setup/signed (no state: a key ring).
// The program lists the backends it needs, and links nothing else: a
// function whose policies are all signed links no DynamoDB code at all.
// That is why this package names no strategy; the backends' packages do,
// and importing one registers its strategy with the policy parser.
package setup

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/powgate"
)

// A Backend builds the limiters of one strategy's policies.
type Backend interface {
	// Strategy is the strategy whose policies it builds.
	Strategy() *policy.Strategy
	// Open prepares the backend once, at start-up, from what env says (it
	// makes no network call: a wrong table shows up as a store error on the
	// first request, which the policies' on_store_error answers; it may
	// register a call that FromEnv makes to open the store's connection
	// before the first request, env.WarmUp), and returns the function that
	// builds one policy's limiter. Limiters it
	// builds share one store, so that several policies on one route can be
	// decided together.
	Open(env *BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error)
}

// BackendEnv is what a Backend may read when it opens.
type BackendEnv struct {
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// Logger receives the backend's warnings.
	Logger *slog.Logger
	// Now, if set, is every limiter's clock; by default each decides at the
	// instant the engine read for the request (edgelimit.Request.At).
	Now func() time.Time
	// Policies are the policies of the backend's strategy, for messages.
	Policies []*policy.Policy
	// warm collects the backends' warm-ups (WarmUp), for FromEnv.
	warm *warmUps
}

// PolicyNames returns the names of env's policies, comma separated, for a
// message like "policies a, b keep their state in DynamoDB".
func (env *BackendEnv) PolicyNames() string {
	names := make([]string, len(env.Policies))
	for i, p := range env.Policies {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// ErrEnv is wrapped by every configuration error of FromEnv and of the
// backends.
var ErrEnv = errors.New("setup: bad environment")

// Limiters opens the backends that pf's policies need and returns the
// edgelimit.Config.Limiters function that builds each policy's limiter. A
// policy whose strategy no backend serves is an error that names it; a
// backend whose strategy no policy uses is not opened (a function need not
// configure what it does not use).
func Limiters(pf *policy.File, backends []Backend, env BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	byStrategy := map[*policy.Strategy][]*policy.Policy{}
	var order []*policy.Strategy
	for _, p := range pf.Policies {
		if _, ok := byStrategy[p.Strategy]; !ok {
			order = append(order, p.Strategy)
		}
		byStrategy[p.Strategy] = append(byStrategy[p.Strategy], p)
	}
	builders := map[*policy.Strategy]func(*policy.Policy) (edgelimit.Limiter, error){}
	for _, s := range order {
		i := slices.IndexFunc(backends, func(b Backend) bool { return b.Strategy() == s })
		if i < 0 {
			var names []string
			for _, p := range byStrategy[s] {
				names = append(names, p.Name)
			}
			return nil, fmt.Errorf("%w: policies %s are strategy %s, which this program has no backend for", ErrEnv, strings.Join(names, ", "), s.Name)
		}
		benv := env
		benv.Policies = byStrategy[s]
		build, err := backends[i].Open(&benv)
		if err != nil {
			return nil, err
		}
		builders[s] = build
	}
	factory := func(p *policy.Policy) (edgelimit.Limiter, error) {
		build, ok := builders[p.Strategy]
		if !ok {
			return nil, fmt.Errorf("setup: policy %q: no backend for strategy %q", p.Name, p.StrategyName())
		}
		return build(p)
	}
	return gating(pf, factory, env)
}

// gating wraps the limiters of the policies that ask for proof of work
// above a threshold (a durable or kv policy's proof_of_work) in a
// powgate.Gate, whose challenges are keyed by the ring of EDGELIMIT_SECRETS,
// as the signed strategy's are: every instance must share it. The gate is
// linked through gate (powgate.go), which a program built with -tags
// edgelimit.nopowgate leaves out: its policies with proof_of_work are then
// refused, by name.
func gating(pf *policy.File, factory func(*policy.Policy) (edgelimit.Limiter, error), env BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	var gated []string
	for _, p := range pf.Policies {
		if powgate.OptionsOf(p) != nil {
			gated = append(gated, p.Name)
		}
	}
	if len(gated) == 0 {
		return factory, nil
	}
	if gate == nil {
		return nil, fmt.Errorf("%w: policies %s ask for proof of work above a threshold (proof_of_work), which this program was built without (-tags edgelimit.nopowgate)",
			ErrEnv, strings.Join(gated, ", "))
	}
	return gate(factory, gated, env)
}

// gate wraps a factory's limiters in powgate's gate, keyed by the ring of
// EDGELIMIT_SECRETS (powgate.go); nil in a program built with -tags
// edgelimit.nopowgate. gated names the policies that ask for it.
var gate func(factory func(*policy.Policy) (edgelimit.Limiter, error), gated []string, env BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error)

// OverrideBackend is a Backend whose store can also keep the per-key
// overrides operators set at run time (`edgelimit override`), for the
// policies with overrides: true: setup/dynamodb's backends keep them in the
// same table, setup/memory's in the process.
type OverrideBackend interface {
	Backend
	// OpenOverrides returns the override store, once, at start-up.
	OpenOverrides(env *BackendEnv) (edgelimit.OverrideStore, error)
}

// Overrides returns the edgelimit.Config.Overrides store that pf's
// policies need: nil when none has overrides: true, else that of the
// backend of the first such policy's strategy (one store serves every
// policy). A policy with overrides whose backend cannot keep them is an
// error that names it.
func Overrides(pf *policy.File, backends []Backend, env BackendEnv) (edgelimit.OverrideStore, error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	for _, p := range pf.Policies {
		if !p.Overrides {
			continue
		}
		for _, b := range backends {
			if b.Strategy() != p.Strategy {
				continue
			}
			ob, ok := b.(OverrideBackend)
			if !ok {
				break
			}
			env.Policies = []*policy.Policy{p}
			return ob.OpenOverrides(&env)
		}
		return nil, fmt.Errorf("%w: policy %s has overrides: true, but this program's %s backend keeps no overrides", ErrEnv, p.Name, p.StrategyName())
	}
	return nil, nil
}
