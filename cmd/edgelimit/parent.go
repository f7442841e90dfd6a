package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// parentPollInterval is how often serve --exit-with-parent looks at its
// parent process.
const parentPollInterval = 250 * time.Millisecond

// withParent returns a context that is cancelled when the process that
// started this one has gone, as seen by getppid: on Unix an orphan is
// re-parented (to init or a subreaper), so its parent id changes. `make run`
// passes --exit-with-parent so that stopping make stops the server even
// when make cannot pass a signal on (SIGKILL, or a shell between them).
// Where the parent id never changes when the parent ends (Windows), the
// context is only cancelled with ctx.
func withParent(ctx context.Context, getppid func() int, interval time.Duration, stderr io.Writer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	parent := getppid()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if p := getppid(); p != parent {
					fmt.Fprintf(stderr, "edgelimit serve: the process that started it (pid %d) has exited; stopping\n", parent)
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
