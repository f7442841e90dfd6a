package secretsmanager

import (
	"testing"
	"time"
)

// EndpointURL is endpointURL, for the partition table's test.
var EndpointURL = endpointURL

// NoBackoff makes retries immediate for the test's duration.
func NoBackoff(t testing.TB) {
	old := backoff
	backoff = func(int) time.Duration { return 0 }
	t.Cleanup(func() { backoff = old })
}
