package inflight_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/storetest"
)

func newMemory(t *testing.T) inflight.Store {
	s, err := inflight.NewMemoryStore(inflight.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, newMemory, storetest.Options{Churn: 200})
}

func TestMemoryEngine(t *testing.T) { storetest.RunEngine(t, newMemory) }
