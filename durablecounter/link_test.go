package durablecounter_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/policy"
)

// TestNewLinked: a Counter built with NewLinked enforces the algorithms it
// was given as New does, refuses any other by name (ErrUnsupportedAlgorithm:
// "algorithm gcra is not linked", naming its Code), and without MemoryCode
// has neither a default Store nor an in-process twin (Local), both refused
// with ErrConfig; with MemoryCode both work.
func TestNewLinked(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	pol := func(alg durablecounter.Algorithm) *policy.Policy {
		return &policy.Policy{Name: "p", Limit: 2, Window: time.Minute, Options: &durablecounter.Options{Algorithm: alg, Shards: 1}}
	}
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	for _, alg := range durablecounter.Algorithms {
		var code, others []durablecounter.Code
		for _, a := range durablecounter.Algorithms {
			if a == alg {
				code = append(code, codeOf(a))
			} else {
				others = append(others, codeOf(a))
			}
		}
		c, err := durablecounter.NewLinked(durablecounter.Config{Policy: pol(alg), Store: store}, code...)
		if err != nil {
			t.Fatalf("%s: NewLinked with its Code: %v", alg, err)
		}
		for i, want := range []bool{true, true, false} {
			d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k-" + string(alg), At: at})
			if err != nil || d.Allowed != want {
				t.Errorf("%s: request %d: allowed %v, err %v; want %v", alg, i+1, d.Allowed, err, want)
			}
		}
		_, err = durablecounter.NewLinked(durablecounter.Config{Policy: pol(alg), Store: store}, others...)
		if !errors.Is(err, durablecounter.ErrUnsupportedAlgorithm) || !strings.Contains(err.Error(), "algorithm "+string(alg)+" is not linked") {
			t.Errorf("%s: NewLinked without its Code: %v, want ErrUnsupportedAlgorithm naming it", alg, err)
		}
	}
	if _, err := durablecounter.NewLinked(durablecounter.Config{Policy: pol(durablecounter.GCRA), Store: store}, durablecounter.FixedWindowCode); err == nil ||
		!strings.Contains(err.Error(), "GCRACode") {
		t.Errorf("NewLinked without GCRACode: %v, want an error naming GCRACode", err)
	}
	if _, err := durablecounter.NewLinked(durablecounter.Config{Policy: pol(durablecounter.FixedWindow)}, durablecounter.FixedWindowCode); !errors.Is(err, durablecounter.ErrConfig) {
		t.Errorf("NewLinked without a Store or MemoryCode: %v, want ErrConfig", err)
	}
	c, err := durablecounter.NewLinked(durablecounter.Config{Policy: pol(durablecounter.FixedWindow), Store: store}, durablecounter.FixedWindowCode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Local(); !errors.Is(err, durablecounter.ErrConfig) || !strings.Contains(err.Error(), "on_store_error: local") {
		t.Errorf("Local without MemoryCode: %v, want ErrConfig naming on_store_error: local", err)
	}
	c, err = durablecounter.NewLinked(durablecounter.Config{Policy: pol(durablecounter.FixedWindow)}, durablecounter.FixedWindowCode, durablecounter.MemoryCode)
	if err != nil {
		t.Fatalf("NewLinked with MemoryCode and no Store: %v", err)
	}
	tw, err := c.Local()
	if err != nil {
		t.Fatalf("Local with MemoryCode: %v", err)
	}
	if d, err := tw.Allow(context.Background(), edgelimit.Request{Key: "k", At: at}); err != nil || !d.Allowed {
		t.Errorf("the twin: allowed %v, err %v; want allowed", d.Allowed, err)
	}
	// An unknown algorithm is still refused as unknown.
	if _, err := durablecounter.NewLinked(durablecounter.Config{Policy: pol("leaky"), Store: store}, durablecounter.FixedWindowCode); !errors.Is(err, durablecounter.ErrUnsupportedAlgorithm) ||
		!strings.Contains(err.Error(), "unknown algorithm") {
		t.Errorf("unknown algorithm: %v", err)
	}
}

func codeOf(a durablecounter.Algorithm) durablecounter.Code {
	switch a {
	case durablecounter.FixedWindow:
		return durablecounter.FixedWindowCode
	case durablecounter.SlidingWindow:
		return durablecounter.SlidingWindowCode
	case durablecounter.SlidingLog:
		return durablecounter.SlidingLogCode
	}
	return durablecounter.GCRACode
}
