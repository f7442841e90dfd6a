package kvbucket

import (
	"context"
	"fmt"
	"sync"
	"time"
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

// Memory is an in-process KV: bounded, with expiry, always consistent. It
// is the store of `edgelimit serve` and of tests; several Bucket values
// sharing one Memory behave like several Lambda instances sharing a table.
type Memory struct {
	mu  sync.Mutex
	m   map[string]*memItem
	lru memItem // sentinel: lru.next is the most recently used
	max int
	now func() time.Time
}

type memItem struct {
	key        string
	s          State
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

// Get returns the state under key unless it is missing or expired. The
// consistency hint is moot: a Memory is always consistent.
func (m *Memory) Get(ctx context.Context, key string, _ Consistency) (State, bool, error) {
	if err := ctx.Err(); err != nil {
		return State{}, false, fmt.Errorf("kvbucket: memory get %q: %w", key, err)
	}
	n := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.m[key]
	if it == nil {
		return State{}, false, nil
	}
	if n >= it.expires {
		m.remove(it)
		return State{}, false, nil
	}
	m.touch(it)
	return it.s, true, nil
}

// Put stores s under key until ttl has passed; a ttl of zero or less
// deletes it.
func (m *Memory) Put(ctx context.Context, key string, s State, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kvbucket: memory put %q: %w", key, err)
	}
	n := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.m[key]
	if ttl <= 0 {
		if it != nil {
			m.remove(it)
		}
		return nil
	}
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
	it.s = s
	it.expires = n + int64(ttl)
	if it.expires < n { // overflow: keep it as long as possible
		it.expires = int64(^uint64(0) >> 1)
	}
	return nil
}

// Len returns how many states are held, expired ones included until they
// are read or pushed out.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
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
