package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/suggest"
	"github.com/edgelimit/edgelimit/policy"
)

// The operator's side of the engine: a client key's usage read back, reset
// and granted, and its override set, by the raw key (an API key, an
// address, a claim's value) as a request would carry it. The engine hashes
// it exactly as it hashes a request's key, so what `edgelimit usage` reads
// is what the functions count. An operation a policy's limiter cannot
// perform (a signed policy stores nothing to read back, reset or grant)
// fails with an error that wraps errors.ErrUnsupported.

// KeyOf returns the hashed client key the engine uses for the raw key under
// the named policy: what its limiter and the override store see.
func (e *Engine) KeyOf(name, raw string) (string, error) {
	c, err := e.lookup(name)
	if err != nil {
		return "", err
	}
	return e.keyOf(c, raw)
}

func (e *Engine) keyOf(c *compiled, raw string) (string, error) {
	in := Input{}
	raw = strings.TrimSpace(raw)
	switch c.Key.Kind() {
	case policy.KeyIP:
		in.SourceIP = raw
	case policy.KeyHeader:
		in.Header = singleValue{c.Key.Name(), raw}
	case policy.KeyClaim:
		in.Claims = exactValue{c.Key.Name(), raw}
	}
	p := *c.Policy
	p.TrustedProxies, p.MissingKeyToIP = 0, false
	var buf [96]byte
	k, err := rawKey(&p, &in, buf[:0])
	if err != nil {
		what := "the key"
		if c.Key.Kind() == policy.KeyIP {
			what = "the key, an IP address,"
		}
		return "", fmt.Errorf("edgelimit: policy %q: %s is empty or not valid (%s)", c.Name, what, strings.TrimPrefix(err.Error(), "edgelimit: "))
	}
	return string(e.appendKey(nil, c, k)), nil
}

// singleValue answers one header or claim: the raw key of an operation.
type singleValue struct{ name, value string }

func (s singleValue) Get(name string) string {
	if strings.EqualFold(name, s.name) {
		return s.value
	}
	return ""
}

// exactValue answers one claim, by exact name.
type exactValue struct{ name, value string }

func (s exactValue) Get(name string) string {
	if name == s.name {
		return s.value
	}
	return ""
}

func (e *Engine) lookup(name string) (*compiled, error) {
	for _, c := range e.policies {
		if c.Name == name {
			return c, nil
		}
	}
	names := make([]string, len(e.policies))
	for i, c := range e.policies {
		names[i] = c.Name
	}
	return nil, fmt.Errorf("edgelimit: no policy %q%s", name, suggest.DidYouMean(name, names))
}

// Usage is a key's state as an operator reads it back (Engine.Usage).
type Usage struct {
	// Decision is the quota in force (Limit, Window: the tier's, the
	// override's), when it resets (Reset), and whether a request of one
	// unit would be admitted now (Allowed, with the grant's help).
	// Remaining is what the key's next requests can spend: what the quota
	// has left and what its grant has left, together.
	Decision
	// Quota is what the quota alone has left.
	Quota int64
	// Grant is what the key's grant in force has left, and until when
	// (zero: none).
	Grant Grant
}

// Grant is what an operator's grant (Engine.Grant) has left for a key:
// units beyond the quota, spent once the quota is, until an instant.
type Grant struct {
	Units int64
	Until time.Time
}

// UsageReader is an optional ability for Engine.Usage: a limiter that
// reads a key's usage itself, its grants included. req is as for
// Resetter. A limiter without it is read with Peek (its grants, if any,
// then count only once its quota is spent).
type UsageReader interface {
	Usage(ctx context.Context, req Request) (Usage, error)
}

// Usage reports the raw key's state under the named policy, without
// spending anything: the quota in force (the tier's, when the policy has
// tiers: tier names it, "" is the default tier; an override, if one is
// set), what the key's next requests can spend (its grant's units
// included) and when the quota resets. It needs a limiter that can peek
// (durable, kv, inflight).
func (e *Engine) Usage(ctx context.Context, name, raw, tierName string) (Usage, error) {
	c, err := e.lookup(name)
	if err != nil {
		return Usage{}, err
	}
	ur, hasUsage := ability[UsageReader](c.limiter)
	if c.peek == nil && !hasUsage {
		return Usage{}, fmt.Errorf("%w: policy %q (%s) keeps no usage to read back", errors.ErrUnsupported, c.Name, c.StrategyName())
	}
	req, err := e.operatorRequest(ctx, c, raw, tierName)
	if err != nil {
		return Usage{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, max(c.StoreTimeout, time.Second))
	defer cancel()
	var u Usage
	if hasUsage {
		u, err = ur.Usage(cctx, req)
	} else {
		u.Decision, err = c.peek.Peek(cctx, req)
		u.Quota = u.Remaining
	}
	if err != nil {
		return Usage{}, err
	}
	u.Policy = c.Name
	return u, nil
}

// operatorRequest is the Request of an operation on raw: one unit, now, the
// tier's and the override's limits.
func (e *Engine) operatorRequest(ctx context.Context, c *compiled, raw, tierName string) (Request, error) {
	key, err := e.keyOf(c, raw)
	if err != nil {
		return Request{}, err
	}
	req := Request{Key: key, Cost: 1, At: e.now()}
	if c.Tiers != nil {
		if tierName == "" {
			tierName = c.Tiers.Default
		}
		l, ok := c.Tiers.Levels[tierName]
		if !ok {
			return Request{}, fmt.Errorf("edgelimit: policy %q has no tier %q (it has %s)", c.Name, tierName, strings.Join(c.Tiers.Names, ", "))
		}
		req.Limits = l
	} else if tierName != "" {
		return Request{}, fmt.Errorf("edgelimit: policy %q has no tiers", c.Name)
	}
	if c.overrides != nil {
		l, ok, err := e.overrides.Override(ctx, c.Name, key)
		if err != nil {
			return Request{}, fmt.Errorf("edgelimit: policy %q: reading its override: %w", c.Name, err)
		}
		if ok {
			req.Limits = l.Or(req.Limits)
		}
	}
	return req, nil
}

// Reset forgets the raw key's usage under the named policy (the start of a
// billing cycle): its next request finds the full quota. The deny caches of
// other instances honour it once their cached denial's reset passes or
// within a second, whichever is sooner (see the strategy's docs).
func (e *Engine) Reset(ctx context.Context, name, raw string) error {
	c, err := e.lookup(name)
	if err != nil {
		return err
	}
	r, ok := ability[Resetter](c.limiter)
	if !ok {
		return fmt.Errorf("%w: policy %q (%s) keeps no usage to reset", errors.ErrUnsupported, c.Name, c.StrategyName())
	}
	req, err := e.operatorRequest(ctx, c, raw, "")
	if err != nil {
		return err
	}
	return r.Reset(ctx, req)
}

// Grant gives the raw key units beyond its quota under the named policy:
// for its current window when until is zero, else until that instant.
func (e *Engine) Grant(ctx context.Context, name, raw string, units int64, until time.Time) error {
	c, err := e.lookup(name)
	if err != nil {
		return err
	}
	if units <= 0 {
		return fmt.Errorf("edgelimit: grant of %d units: it must be at least 1", units)
	}
	g, ok := ability[Granter](c.limiter)
	if !ok {
		return fmt.Errorf("%w: policy %q (%s) keeps no usage to grant against", errors.ErrUnsupported, c.Name, c.StrategyName())
	}
	req, err := e.operatorRequest(ctx, c, raw, "")
	if err != nil {
		return err
	}
	if !until.IsZero() && !until.After(req.At) {
		return fmt.Errorf("edgelimit: grant until %s: that has passed", until.UTC().Format(time.RFC3339))
	}
	return g.Grant(ctx, req, units, until)
}

// Override returns the override set for the raw key under the named
// policy, read from the store (not the cache), and whether there is one.
func (e *Engine) Override(ctx context.Context, name, raw string) (policy.Limits, bool, error) {
	c, key, err := e.overridable(name, raw)
	if err != nil {
		return policy.Limits{}, false, err
	}
	return e.overrides.Override(ctx, c.Name, key)
}

// SetOverride sets the raw key's limits under the named policy (a policy
// with overrides: true), until the given instant (zero: until removed).
// Its zero fields keep the policy's (or the tier's); l.Block refuses
// every request of the key, as a limit of 0 would. Every instance sees it
// within the policy's override_staleness; this one at once.
func (e *Engine) SetOverride(ctx context.Context, name, raw string, l policy.Limits, until time.Time) error {
	c, key, err := e.overridable(name, raw)
	if err != nil {
		return err
	}
	if l.IsZero() {
		return errors.New("edgelimit: an override needs a limit, a window or a burst (or Block); to remove one, DeleteOverride")
	}
	if l.Block && (l.Limit != 0 || l.Burst != 0) {
		return errors.New("edgelimit: a blocking override has no limit or burst (only a window: the wait its denials announce)")
	}
	if l.Limit < 0 || l.Window < 0 || l.Burst < 0 {
		return errors.New("edgelimit: an override's limit, window and burst cannot be negative")
	}
	if l.Window != 0 && l.Window < time.Millisecond {
		return fmt.Errorf("edgelimit: override window %s is shorter than 1ms", l.Window)
	}
	if !l.Period.IsZero() {
		return errPeriodOverride
	}
	if err := e.overrides.SetOverride(ctx, c.Name, key, l, until); err != nil {
		return err
	}
	c.overrides.forget(key)
	return nil
}

// DeleteOverride removes the raw key's override under the named policy; the
// policy's (or tier's) limits apply again, on every instance within the
// policy's override_staleness.
func (e *Engine) DeleteOverride(ctx context.Context, name, raw string) error {
	c, key, err := e.overridable(name, raw)
	if err != nil {
		return err
	}
	if err := e.overrides.DeleteOverride(ctx, c.Name, key); err != nil {
		return err
	}
	c.overrides.forget(key)
	return nil
}

func (e *Engine) overridable(name, raw string) (*compiled, string, error) {
	c, err := e.lookup(name)
	if err != nil {
		return nil, "", err
	}
	if c.overrides == nil {
		return nil, "", fmt.Errorf("edgelimit: policy %q does not read overrides; add `overrides: true` to it", c.Name)
	}
	key, err := e.keyOf(c, raw)
	if err != nil {
		return nil, "", err
	}
	return c, key, nil
}
