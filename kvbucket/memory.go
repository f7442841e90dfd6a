package kvbucket

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"
)

// DefaultMemoryKeys is MemoryConfig.MaxKeys's default.
const DefaultMemoryKeys = 100_000

// MemoryConfig configures NewMemory.
type MemoryConfig struct {
	// MaxKeys bounds the states held; beyond it the least recently used
	// is dropped (and then reads as a full bucket). Default
	// DefaultMemoryKeys (100,000).
	MaxKeys int
	// Now is the clock that expires states; default time.Now.
	Now func() time.Time
}

// Memory is an in-process KV of one region: bounded, with expiry, always
// consistent, with exactly the update semantics of DynamoDB's, so
// that several Bucket values sharing one Memory behave like several Lambda
// instances sharing a table. It is the store of `edgelimit serve` and of
// tests.
type Memory struct {
	mu  sync.Mutex
	m   map[string]*memItem
	lru memItem // sentinel: lru.next is the most recently used
	max int
	now func() time.Time
}

type memItem struct {
	key        string
	p          wire.Part
	expires    int64
	prev, next *memItem
}

var _ KV = (*Memory)(nil)

// NewMemory returns an empty Memory.
func NewMemory(cfg MemoryConfig) *Memory {
	m := &Memory{m: map[string]*memItem{}, max: cfg.MaxKeys, now: cfg.Now}
	if m.max <= 0 {
		m.max = DefaultMemoryKeys
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.lru.next, m.lru.prev = &m.lru, &m.lru
	return m
}

// get returns the state under key; a missing or expired one has no TAT.
// The consistency hint is moot: a Memory is always consistent.
func (m *Memory) get(ctx context.Context, key string, _ wire.Consistency) (wire.Tally, error) {
	if err := ctx.Err(); err != nil {
		return wire.Tally{}, fmt.Errorf("kvbucket: memory get %q: %w", key, err)
	}
	n := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.live(key, n)
	if it == nil {
		return wire.Tally{}, nil
	}
	m.touch(it)
	return wire.Tally{Own: clonePart(it.p)}, nil
}

// update applies u to key's state atomically (see wire.Update for the
// semantics).
func (m *Memory) update(ctx context.Context, key string, u wire.Update) (wire.Tally, error) {
	if err := ctx.Err(); err != nil {
		return wire.Tally{}, fmt.Errorf("kvbucket: memory update %q: %w", key, err)
	}
	n := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.live(key, n)
	var p wire.Part
	if it != nil {
		p = it.p
	}
	if u.HasCap && p.Has && u.Cap.Less(p.TAT) {
		p.TAT = u.Cap
		p.Version++
		if it != nil {
			it.p.TAT, it.p.Version = p.TAT, p.Version
		}
	}
	if !u.Fits(p) {
		return wire.Tally{Own: clonePart(p)}, nil
	}
	switch {
	case u.HasFloor && (!p.Has || p.TAT.Less(u.Floor)):
		p.TAT = u.Floor.Add(u.Add)
	case p.Has:
		p.TAT = p.TAT.Add(u.Add)
	default: // as DynamoDB's ADD to a missing number
		p.TAT = u.Add
	}
	if !p.Has && p.Version == 0 {
		p.Version = n
	}
	p.Has = true
	p.Spent += u.Spent
	switch {
	case u.Grant > 0 && p.GrantUntil <= u.GrantAt:
		p.GrantLeft, p.GrantUntil = u.Grant, u.GrantUntil
	case u.Grant > 0:
		p.GrantLeft += u.Grant
		p.GrantUntil = max(p.GrantUntil, u.GrantUntil)
	}
	p.GrantLeft -= u.GrantSpend
	p.Version++
	p.Writers = register(p.Writers, u.Writer, u.Epoch)
	if it == nil {
		it = &memItem{key: key}
		m.m[key] = it
		it.next, it.prev = m.lru.next, &m.lru
		it.next.prev, m.lru.next = it, it
		for len(m.m) > m.max {
			m.remove(m.lru.prev)
		}
	} else {
		m.touch(it)
	}
	it.p = p
	it.expires = n + int64(max(u.TTL, 0))
	if it.expires < n { // overflow: keep it as long as possible
		it.expires = int64(^uint64(0) >> 1)
	}
	if p.GrantLeft > 0 {
		// A grant in force outlives what an update that did not know of
		// it asked for.
		it.expires = max(it.expires, p.GrantUntil)
	}
	return wire.Tally{Own: clonePart(p), Applied: true}, nil
}

// register adds id to epoch's writers (0 registers nobody) and drops the
// writers of epochs before epoch−1. A Memory never changes a writer set in
// place: register returns ws itself when it stays as it is (a writer's
// steady state: already registered in the epoch), else a new slice, so
// that a set handed out (clonePart) never changes under its reader.
func register(ws []wire.Writer, id uint32, epoch int64) []wire.Writer {
	same := true
	found := id == 0
	for _, w := range ws {
		same = same && w.Epoch >= epoch-1
		found = found || w.Epoch == epoch && w.ID == id
	}
	if same && found {
		return ws
	}
	out := ws[:0:0]
	found = false
	for _, w := range ws {
		if w.Epoch < epoch-1 {
			continue
		}
		found = found || w.Epoch == epoch && w.ID == id
		out = append(out, w)
	}
	if id != 0 && !found {
		out = append(out, wire.Writer{Epoch: epoch, ID: id})
	}
	return out
}

// clonePart returns p for a caller: its writer set is shared, since the
// Memory never changes one in place (register), with its capacity clipped
// so that a caller's append copies it.
func clonePart(p wire.Part) wire.Part {
	p.Writers = slices.Clip(p.Writers)
	return p
}

// Len returns how many states are held, expired ones included until they
// are read or pushed out.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// live returns key's item unless it is missing or expired (then dropped).
func (m *Memory) live(key string, n int64) *memItem {
	it := m.m[key]
	if it != nil && n >= it.expires {
		m.remove(it)
		return nil
	}
	return it
}

func (m *Memory) touch(it *memItem) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.next, it.prev = m.lru.next, &m.lru
	it.next.prev, m.lru.next = it, it
}

func (m *Memory) remove(it *memItem) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
	delete(m.m, it.key)
}

// InProcess reports true: a Memory's state never leaves the process (see
// Bucket.InProcess).
func (m *Memory) InProcess() bool { return true }
