package kvbucket

import (
	"context"
	"time"
)

// Writing back idle keys. Within its share an instance spends a key's
// tokens without writing them; the next sync, due with the key's next
// request once the share ends, writes them. A key that gets no further
// request at this instance would keep them unwritten, and every other
// reader of the KV (another instance, `edgelimit usage`) would see less
// spent than was, for as long as the key stays idle here. So while any
// key has unwritten changes, a goroutine of the Bucket looks at the cache
// every half sync interval and writes back every key with unwritten
// changes that no request used since its previous look (one unconditional
// update each, as an eviction's write-back; the key then leaves the
// cache): a key's spending reaches the KV within one sync interval of the
// key going idle, while the process runs. The goroutine ends once nothing
// is left unwritten. A Bucket on a clock of its own (Config.Now: tests,
// simulations) has no such goroutine: its idle keys are written by
// WriteIdle, called at the instants the caller chooses.

// idleWriteTimeout bounds one pass's writes.
const idleWriteTimeout = 5 * time.Second

// markDirty notes that a key has unwritten changes: the idle write-back
// starts unless it runs. s.mu of the key is held.
func (b *Bucket) markDirty() {
	if b.ownClock || b.writingIdle.Load() || !b.writingIdle.CompareAndSwap(false, true) {
		return
	}
	go b.writeIdleLoop(time.Duration(b.sync) / 2)
}

func (b *Bucket) writeIdleLoop(every time.Duration) {
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		<-t.C
		ctx, cancel := context.WithTimeout(context.Background(), idleWriteTimeout)
		dirty := b.WriteIdle(ctx)
		cancel()
		if dirty == 0 {
			b.writingIdle.Store(false)
			// A change noted after the pass looked, before the flag fell,
			// started no loop: look again.
			if b.unwritten() == 0 || !b.writingIdle.CompareAndSwap(false, true) {
				return
			}
		}
		t.Reset(every)
	}
}

// WriteIdle writes back the unwritten changes of every key no request has
// used since the previous WriteIdle (a key with changes that it sees for
// the first time is only noted: the next call writes it unless a request
// used it meanwhile), and reports how many keys had unwritten changes when
// it looked. A key whose write fails stays, with its changes, for the next
// call. Each write is one update at the key's last instant of use. A
// Bucket without Config.Now calls it itself every half sync interval while
// any key has unwritten changes; one with a clock of its own leaves it to
// its caller.
func (b *Bucket) WriteIdle(ctx context.Context) (dirty int) {
	for i := range b.cache.shards {
		s := &b.cache.shards[i]
		var due []*entry
		s.mu.Lock()
		look := func(e *entry) {
			if !e.pend.has {
				e.idleSeen = false
				return
			}
			dirty++
			if e.syncing || e.busy || !e.known {
				return
			}
			if !e.idleSeen {
				// Noted; a request that moves used before the next pass
				// clears it (shard.lookup).
				e.idleSeen = true
				return
			}
			e.syncing = true
			due = append(due, e)
		}
		s.t.each(look)
		s.mu.Unlock()
		for _, e := range due {
			b.flush(ctx, s, e, e.used)
		}
	}
	return dirty
}

// unwritten counts the keys with unwritten changes.
func (b *Bucket) unwritten() (n int) {
	for i := range b.cache.shards {
		s := &b.cache.shards[i]
		s.mu.Lock()
		s.t.each(func(e *entry) {
			if e.pend.has {
				n++
			}
		})
		s.mu.Unlock()
	}
	return n
}
