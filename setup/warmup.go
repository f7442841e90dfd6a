package setup

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// EnvStoreWarmUp is the time budget of the call FromEnv makes to each
// store while the function starts, so that the connection (DNS, TCP and
// TLS: on Lambda, paid by the first call of every cold start) is open
// before the first request, whose store calls then fit their
// store_timeout; default 1s (DefaultWarmUp), "off" for none. A warm-up
// that fails or runs out of time is logged and the function starts
// anyway: its first request's store call opens the connection then.
const EnvStoreWarmUp = "EDGELIMIT_STORE_WARMUP"

// DefaultWarmUp is EDGELIMIT_STORE_WARMUP's default: ten times the
// default store_timeout, room for a connection set-up that a cold start on
// a busy host makes slow, and a tenth of the ten seconds Lambda gives a
// function to start.
const DefaultWarmUp = time.Second

// warmUps are the calls the backends registered while they opened.
type warmUps struct {
	mu    sync.Mutex
	calls []warmUp
}

type warmUp struct {
	name string
	call func(context.Context) error
}

// WarmUp registers a cheap call to the backend's store (one read of an
// item that need not exist) that FromEnv makes once every backend has
// opened, within EDGELIMIT_STORE_WARMUP, each store's at the same time.
// Its error is logged, never fatal: an error from the store (a missing
// table, a missing permission) still opened the connection. Outside
// FromEnv (setup.Limiters called by a program itself) it does nothing.
func (env *BackendEnv) WarmUp(name string, call func(context.Context) error) {
	if env.warm == nil {
		return
	}
	env.warm.mu.Lock()
	env.warm.calls = append(env.warm.calls, warmUp{name, call})
	env.warm.mu.Unlock()
}

// warmUpBudget reads EDGELIMIT_STORE_WARMUP: the budget, or 0 for off.
func warmUpBudget(getenv func(string) string) (time.Duration, error) {
	s := strings.TrimSpace(getenv(EnvStoreWarmUp))
	switch s {
	case "":
		return DefaultWarmUp, nil
	case "off":
		return 0, nil
	}
	d, err := policy.ParseDuration(s)
	if err != nil || d > 10*time.Second {
		return 0, fmt.Errorf("%w: %s %q must be off or a duration of at most 10s, like 1s", ErrEnv, EnvStoreWarmUp, s)
	}
	return d, nil
}

// run makes the registered calls at once, each within budget, and logs
// how each went.
func (w *warmUps) run(ctx context.Context, budget time.Duration, log *slog.Logger) {
	w.mu.Lock()
	calls := w.calls
	w.mu.Unlock()
	if budget <= 0 || len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := c.call(ctx)
			ms := slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000)
			if err != nil {
				log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: store warm-up failed", slog.String("store", c.name), ms,
					slog.String("error", err.Error()))
				return
			}
			log.LogAttrs(ctx, slog.LevelDebug, "edgelimit: store warmed up", slog.String("store", c.name), ms)
		}()
	}
	wg.Wait()
}
