package powgate

import "sync"

// maxHints bounds the keys a Gate remembers above its threshold: at about
// 100 bytes an entry, some 1.6 MB at most. A key forgotten early costs one
// refund more (its next request spends, lands above the threshold, and is
// given back), never a request admitted without work.
const maxHints = 1 << 14

// hints is a bounded, per-instance memory of the keys seen above the
// threshold, each until an instant (Unix nanoseconds) when it may be below
// it again. It is safe for concurrent use.
type hints struct {
	mu  sync.Mutex
	max int
	m   map[string]int64
}

func newHints(n int) *hints { return &hints{max: n, m: make(map[string]int64)} }

// hot reports whether key was seen above the threshold and may still be.
func (h *hints) hot(key string, now int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.m[key]
	if ok && until <= now {
		delete(h.m, key)
		return false
	}
	return ok
}

// mark remembers key above the threshold until the instant until. When
// the memory is full, an arbitrary other key is forgotten.
func (h *hints) mark(key string, until int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[key]; !ok && len(h.m) >= h.max {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[key] = until
}

// clear forgets key.
func (h *hints) clear(key string) {
	h.mu.Lock()
	delete(h.m, key)
	h.mu.Unlock()
}
