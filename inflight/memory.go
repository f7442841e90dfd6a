package inflight

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/edgelimit/edgelimit/inflight/internal/wire"
)

// MemoryConfig configures a Memory store. The zero value is ready to use.
type MemoryConfig struct {
	// Shards is the number of independently locked parts of the store,
	// rounded up to a power of two; default (0 or less) 64. One item always
	// lands in one shard.
	Shards int
	// MaxKeys bounds the items (keys with holders) the store holds, split
	// evenly between the shards; default (0 or less) 1,048,576. A new item
	// beyond it is
	// refused with ErrStoreFull once items whose holders have all expired
	// have been swept: a live holder is never forgotten early, because that
	// would admit one request too many.
	MaxKeys int
}

// DefaultMaxKeys is MemoryConfig.MaxKeys's default.
const DefaultMaxKeys = 1 << 20

const (
	defaultMemoryShards = 64
	// minSweep is the shard size below which a shard is never swept.
	minSweep = 64
)

// Memory is an in-process Store: exact within one process, a map lookup
// under a lock per take or release, whatever the units a take holds. It is the default of `edgelimit
// serve` and right for a single process; instances that must share their
// slots need the DynamoDB store (package inflight/dynamostore).
//
// An item is removed when its last holder is released. Items whose holders
// were never released (the process's own handlers never finished them)
// are treated as free once their leases expire, and removed by a sweep of
// a shard that runs when the shard has doubled in size since its last
// sweep, so a shard holds at most about twice its keys with live holders.
// A take on a new item allocates its entry (one allocation, with room for
// two holders); a release allocates nothing.
type Memory struct {
	seed   maphash.Seed
	shards []memShard
	mask   uint64
}

type memShard struct {
	mu sync.Mutex
	m  map[string]*memItem
	// sweepAt is the size at which the next new item sweeps.
	sweepAt int
	// cap is the shard's share of MaxKeys.
	cap int
	_   [64]byte // keep shards' locks off each other's cache lines
}

type memHolder struct {
	id     wire.SlotID
	expiry int64 // Unix nanoseconds
	units  int64 // the slots it holds, at least 1
}

type memItem struct {
	h     []memHolder
	small [2]memHolder
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store.
func NewMemory(cfg MemoryConfig) *Memory {
	n := cfg.Shards
	if n <= 0 {
		n = defaultMemoryShards
	}
	n = 1 << bits.Len(uint(n-1))
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	per := max(1, (maxKeys+n-1)/n)
	s := &Memory{seed: maphash.MakeSeed(), shards: make([]memShard, n), mask: uint64(n - 1)}
	for i := range s.shards {
		s.shards[i].m = map[string]*memItem{}
		s.shards[i].sweepAt = minSweep
		s.shards[i].cap = per
	}
	return s
}

func (s *Memory) shard(item string) *memShard {
	return &s.shards[maphash.String(s.seed, item)&s.mask]
}

// live drops the holders whose lease has expired at now and returns the
// item's state.
func (it *memItem) live(now int64) wire.State {
	h := it.h[:0]
	var st wire.State
	for _, x := range it.h {
		if x.expiry > now {
			h = append(h, x)
			st.Live += x.units
			if st.Earliest == 0 || x.expiry < st.Earliest {
				st.Earliest = x.expiry
			}
		}
	}
	clear(it.h[len(h):])
	it.h = h
	return st
}

func (s *Memory) takeSlot(ctx context.Context, t wire.Take) (bool, wire.State, error) {
	if err := ctx.Err(); err != nil {
		return false, wire.State{}, err
	}
	sh := s.shard(t.Item)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	it := sh.m[t.Item]
	var st wire.State
	if it != nil {
		st = it.live(t.Now)
	}
	units := wire.UnitsOf(t.Units)
	if st.Live+units > t.Limit {
		return false, st, nil
	}
	if it == nil {
		if len(sh.m) >= sh.sweepAt || len(sh.m) >= sh.cap {
			sh.sweep(t.Now)
			if len(sh.m) >= sh.cap {
				return false, wire.State{}, fmt.Errorf("%w: %d keys with live holders in this shard", ErrStoreFull, len(sh.m))
			}
		}
		it = &memItem{}
		it.h = it.small[:0]
		sh.m[t.Item] = it
	}
	for _, x := range it.h {
		if x.id == t.ID {
			return false, st, fmt.Errorf("inflight: slot id %s is already a holder", t.ID)
		}
	}
	it.h = append(it.h, memHolder{id: t.ID, expiry: t.Expiry, units: units})
	st.Live += units
	if st.Earliest == 0 || t.Expiry < st.Earliest {
		st.Earliest = t.Expiry
	}
	return true, st, nil
}

// sweep removes the items whose holders have all expired at now.
func (sh *memShard) sweep(now int64) {
	for k, it := range sh.m {
		if it.live(now).Live == 0 {
			delete(sh.m, k)
		}
	}
	sh.sweepAt = max(minSweep, 2*len(sh.m))
}

func (s *Memory) releaseSlot(ctx context.Context, item string, id wire.SlotID, units int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh := s.shard(item)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	it := sh.m[item]
	if it == nil {
		return false, nil
	}
	for i, x := range it.h {
		if x.id == id && x.units == wire.UnitsOf(units) {
			last := len(it.h) - 1
			it.h[i] = it.h[last]
			it.h[last] = memHolder{}
			it.h = it.h[:last]
			if last == 0 {
				delete(sh.m, item)
			}
			return true, nil
		}
	}
	return false, nil
}

func (s *Memory) slots(ctx context.Context, item string, now int64) (wire.State, error) {
	if err := ctx.Err(); err != nil {
		return wire.State{}, err
	}
	sh := s.shard(item)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	it := sh.m[item]
	if it == nil {
		return wire.State{}, nil
	}
	var st wire.State
	for _, x := range it.h {
		if x.expiry > now {
			st.Live += x.units
			if st.Earliest == 0 || x.expiry < st.Earliest {
				st.Earliest = x.expiry
			}
		}
	}
	return st, nil
}
