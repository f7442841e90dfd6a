package pow

import (
	"encoding/json"
	"testing"
	"time"
)

// TestChallengeExtension: Extension writes what encoding/json writes for
// the {"challenge": ch} member, for whole and fractional expiries and for a
// value that needs escaping.
func TestChallengeExtension(t *testing.T) {
	c := newTest(t, 12)
	for _, ch := range []Challenge{
		c.IssueAt(t0, keyA, policy),
		c.IssueAt(t0.Add(1234*time.Millisecond), keyA, policy),
		{Value: "a\"b\\c\u2028<&>", Bits: 32, Expires: time.UnixMilli(1).UTC()},
		{},
	} {
		want, err := json.Marshal(struct {
			Challenge Challenge `json:"challenge"`
		}{ch})
		if err != nil {
			t.Fatal(err)
		}
		if got := ch.Extension(); got != string(want) {
			t.Errorf("Extension() = %s, want %s", got, want)
		}
	}
}
