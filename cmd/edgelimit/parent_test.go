package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// withParent cancels its context once the parent id changes (the parent
// exited and the process was re-parented), and not before.
func TestWithParentCancelsWhenReparented(t *testing.T) {
	var ppid, calls atomic.Int64
	ppid.Store(4242)
	polled := make(chan struct{})
	getppid := func() int {
		if calls.Add(1) == 4 { // the first read and three polls
			close(polled)
		}
		return int(ppid.Load())
	}
	stderr := &syncBuffer{}
	ctx, cancel := withParent(context.Background(), getppid, time.Millisecond, stderr)
	defer cancel()

	// Three polls that saw the same parent: still running.
	select {
	case <-polled:
	case <-time.After(time.Minute):
		t.Fatal("the parent was not polled within a minute")
	}
	if ctx.Err() != nil {
		t.Fatalf("cancelled while the parent is alive: %v", ctx.Err())
	}
	ppid.Store(1)
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("not cancelled within a minute of the parent's exit")
	}
	if got := stderr.String(); !strings.Contains(got, "pid 4242") || !strings.Contains(got, "stopping") {
		t.Errorf("stderr = %q, want it to say the parent (pid 4242) exited and serve is stopping", got)
	}
}

// Cancelling the parent context stops the watcher without a message.
func TestWithParentFollowsItsContext(t *testing.T) {
	stderr := &syncBuffer{}
	base, stop := context.WithCancel(context.Background())
	ctx, cancel := withParent(base, func() int { return 7 }, time.Millisecond, stderr)
	defer cancel()
	stop()
	<-ctx.Done()
	if got := stderr.String(); got != "" {
		t.Errorf("stderr = %q, want nothing", got)
	}
}
