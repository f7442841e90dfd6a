package edgelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit/internal/banrule"
	"github.com/edgelimit/edgelimit/policy"
)

// BanStore keeps the escalating bans of the policies with a ban field
// (policy.Ban): per policy and hashed client key, the denials counted, the
// ban in force and the level of the key's run of bans, shared by every
// instance that uses the store. Its methods take types of an internal
// package, so that only this module implements it: bans.NewMemory (one
// process) and bans/dynamostore.New (the strategies' table). The engine
// caches what it reads for the policy's ban.staleness.
type BanStore interface {
	// ReadBan returns the key's state; the zero State when it has none.
	ReadBan(ctx context.Context, k banrule.Key) (banrule.State, error)
	// CountDenial counts one denial of the key at t by the rule
	// (banrule.Rule.Deny), atomically for every instance sharing the
	// store: of concurrent denials, exactly the rule's After-th starts the
	// ban.
	CountDenial(ctx context.Context, k banrule.Key, r banrule.Rule, t time.Time) (banrule.Outcome, error)
	// LiftBan forgets the key's state: its ban, its count and its level.
	LiftBan(ctx context.Context, k banrule.Key) error
}

// reasonBanned is the Reason of a ban's decisions, for metrics.
const reasonBanned = "banned"

// banCache remembers, per policy, what the instance knows of each hashed
// key's ban (and that it has none), for the policy's ban.staleness.
// Concurrent requests of one key wait for one read.
type banCache struct {
	rule      banrule.Rule
	staleness time.Duration
	seed      maphash.Seed
	shards    [16]banShard
}

type banShard struct {
	mu sync.Mutex
	m  map[string]*banEntry
}

type banEntry struct {
	st    banrule.State
	resp  *Response     // st's ban rendered (banResponse), nil if st has none
	fresh time.Time     // re-read from then on
	ready chan struct{} // closed once st is read
}

// maxBanEntries bounds one shard; beyond it, stale entries go first, then
// arbitrary ones (a dropped entry costs one read again).
const maxBanEntries = 1 << 14

// compileBans builds the ban cache of every policy with a ban, and the
// breaker of the ban store (the first such policy's store_breaker, unless
// it is off): a ban store that keeps failing stops costing requests its
// budget, as any store does.
func (e *Engine) compileBans(store BanStore) error {
	for _, c := range e.policies {
		b := c.Ban
		if b == nil {
			continue
		}
		if store == nil {
			return fmt.Errorf("edgelimit: policy %q has a ban, but Config.Bans is nil (where are bans kept?)", c.Name)
		}
		e.bans = store
		c.bans = &banCache{rule: banrule.Rule{After: b.After, Within: b.Within, For: b.For, Growth: b.Growth, Max: b.Max, Decay: b.Decay},
			staleness: b.Staleness, seed: maphash.MakeSeed()}
		for i := range c.bans.shards {
			c.bans.shards[i].m = map[string]*banEntry{}
		}
		if e.banBreaker == nil && !c.StoreBreaker.Off {
			e.banBreaker = &breaker{label: "bans", cfg: c.StoreBreaker.OrDefault(), e: e}
		}
		if e.banBreaker != nil {
			e.banBreaker.policies = append(e.banBreaker.policies, c.Name)
		}
	}
	return nil
}

// banned checks the route's bans before any limiter is asked: a policy
// that bans the request's key denies it with its ban's decision. It
// reports whether one did; then no limiter is asked (and no store called
// for them) and the metrics events are emitted here.
func (e *Engine) banned(ctx context.Context, start time.Time, rs *routeSet, slots []slot) bool {
	found := false
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if c.bans == nil || c.Shadow || s.req.Key == "" {
			continue
		}
		st, resp := e.banState(ctx, start, c.compiled, s.req.Key, s.req.At)
		if st.Banned(s.req.At) {
			s.d, s.o, found = banDecision(c.compiled, st, resp, s.req.At), denied, true
		}
	}
	if found && e.observe != nil {
		for _, c := range rs.policies {
			if s := &slots[c.slot]; s.o == denied {
				e.emit(ctx, rs, c.compiled, s)
			}
		}
	}
	return found
}

// countDenials counts, in the ban store, each denial a policy with a ban
// made of the request (not a degraded one: a store failure is not the
// client's doing); the denial that starts a ban answers with it.
func (e *Engine) countDenials(ctx context.Context, start time.Time, rs *routeSet, slots []slot) {
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if c.bans == nil || c.Shadow || s.o != denied || s.d.Degraded || s.req.Key == "" {
			continue
		}
		bc := c.bans
		k := banrule.Key{Policy: c.Name, Key: s.req.Key}
		tk := e.banBreaker.admit(ctx, s.req.At)
		cctx := e.budget(ctx, start, tk.budget(c.StoreTimeout))
		out, err := e.bans.CountDenial(cctx, k, bc.rule, s.req.At)
		cctx.stop()
		e.banBreaker.done(ctx, tk, resultOf(cctx, ctx, err), err)
		if err != nil {
			if tk != refused {
				e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: counting a denial for a ban failed; the key may be banned later than after its denials",
					slog.String("policy", c.Name), slog.String("error", err.Error()))
			}
			continue
		}
		resp := banResponse(c.compiled, out.State)
		bc.remember(s.req.Key, out.State, resp, s.req.At)
		if out.State.Banned(s.req.At) {
			s.d = banDecision(c.compiled, out.State, resp, s.req.At)
		}
	}
}

// banState returns what the instance knows of key's ban under c, and that
// ban rendered (banResponse, once per state read or counted), reading
// the store when its knowledge is older than the policy's staleness. A
// store that fails (or whose breaker is open) is logged and leaves what
// the instance knew, or no ban, for one staleness: the limiters decide as
// without a ban.
func (e *Engine) banState(ctx context.Context, start time.Time, c *compiled, key string, now time.Time) (banrule.State, *Response) {
	bc := c.bans
	sh := &bc.shards[maphash.String(bc.seed, key)&15]
	sh.mu.Lock()
	ent := sh.m[key]
	if ent != nil && now.Before(ent.fresh) {
		ready := ent.ready
		sh.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return banrule.State{}, nil
		}
		return ent.st, ent.resp
	}
	var known banrule.State
	var knownResp *Response
	if ent != nil {
		known, knownResp = ent.st, ent.resp // read (ready closed) before it went stale
	}
	if len(sh.m) >= maxBanEntries {
		for k, old := range sh.m {
			if !now.Before(old.fresh) || len(sh.m) >= maxBanEntries {
				delete(sh.m, k)
			}
			if len(sh.m) < maxBanEntries/2 {
				break
			}
		}
	}
	ent = &banEntry{fresh: now.Add(bc.staleness), ready: make(chan struct{})}
	sh.m[strings.Clone(key)] = ent // not the request's memory (Request.Key)
	sh.mu.Unlock()
	tk := e.banBreaker.admit(ctx, now)
	cctx := e.budget(ctx, start, tk.budget(c.StoreTimeout))
	st, err := e.bans.ReadBan(cctx, banrule.Key{Policy: c.Name, Key: key})
	cctx.stop()
	e.banBreaker.done(ctx, tk, resultOf(cctx, ctx, err), err)
	if err != nil {
		if tk != refused {
			e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: reading a ban failed; what the instance knew applies",
				slog.String("policy", c.Name), slog.String("error", err.Error()))
		}
		ent.st, ent.resp = known, knownResp
	} else {
		ent.st, ent.resp = st, banResponse(c, st)
	}
	close(ent.ready)
	return ent.st, ent.resp
}

// remember records a state the store returned for key (a denial counted),
// and resp, its ban rendered, fresh for the staleness from now.
func (bc *banCache) remember(key string, st banrule.State, resp *Response, now time.Time) {
	sh := &bc.shards[maphash.String(bc.seed, key)&15]
	ready := make(chan struct{})
	close(ready)
	sh.mu.Lock()
	if old := sh.m[key]; old != nil {
		select {
		case <-old.ready:
		default:
			sh.mu.Unlock()
			return // a read in flight: it will say
		}
	}
	if len(sh.m) < maxBanEntries {
		sh.m[strings.Clone(key)] = &banEntry{st: st, resp: resp, fresh: now.Add(bc.staleness), ready: ready}
	}
	sh.mu.Unlock()
}

// forget drops what the cache knows of key, after this instance lifted
// its ban.
func (bc *banCache) forget(key string) {
	sh := &bc.shards[maphash.String(bc.seed, key)&15]
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// banDecision is the denial of a banned key: the policy's quota with
// nothing left until the ban ends, which is also when to retry, and resp,
// the problem detail and member that name the ban (banResponse of st,
// built here if nil).
func banDecision(c *compiled, st banrule.State, resp *Response, now time.Time) Decision {
	if resp == nil {
		resp = banResponse(c, st)
	}
	wait := st.Until.Sub(now)
	return Decision{Policy: c.Name, Limit: c.q, Window: c.w, Remaining: 0, Reset: wait, RetryAfter: wait, Reason: reasonBanned,
		Response: resp}
}

// banResponse is what the 429 of st's ban says of it: the detail naming the
// ban, and the "ban" member, split once into its members (as the body's
// writer would split it), so that a banned key's every 429 neither formats
// nor parses them again. Nil for a state without a ban. The end is shown
// rounded up to the second, as Retry-After is.
func banResponse(c *compiled, st banrule.State) *Response {
	if st.Until.IsZero() {
		return nil
	}
	until := st.Until.UTC().Truncate(time.Second)
	if !until.Equal(st.Until) {
		until = until.Add(time.Second)
	}
	when := until.Format(time.RFC3339)
	detail := "This client is banned by policy " + strconv.Quote(c.Name) + " until " + when + " for being refused " +
		strconv.FormatInt(c.Ban.After, 10) + " times within " + policy.FormatDuration(c.Ban.Within) + "; each ban in a row lasts longer."
	ext := `{"ban":{"policy":` + c.jsonName + `,"until":"` + when + `","level":` + strconv.Itoa(st.Level) + `}}`
	r := &Response{Detail: detail, Extension: ext}
	if ms, ok := compactMembers(ext, nil); ok {
		r.members = ms
	}
	return r
}
