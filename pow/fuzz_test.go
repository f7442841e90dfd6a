package pow

import (
	"encoding/base64"
	"testing"
	"time"
)

// FuzzParseChallenge: ParseChallenge never panics, accepts only canonical
// 48-character base64url of a version-1 statement, and agrees with the
// encoding it reads.
func FuzzParseChallenge(f *testing.F) {
	c := newTest(f, 12)
	for _, s := range []string{
		c.IssueAt(t0, keyA, policy).Value,
		newTest(f, 1).IssueAt(t0, keyB, "p").Value,
		newTest(f, 32).IssueAt(t0.Add(100*365*24*time.Hour), keyA, policy).Value,
		"", "AAAA", "AQ" + string(make([]byte, 46)),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseChallenge(s)
		if err != nil {
			return
		}
		raw, derr := base64.RawURLEncoding.Strict().DecodeString(s)
		if derr != nil || len(raw) != rawSize {
			t.Fatalf("ParseChallenge(%q) accepted a string that is not 36 bytes of canonical base64url", s)
		}
		if st.Version != Version || st.Bits < 1 || st.Bits > MaxBits || int(raw[1]) != st.Bits {
			t.Fatalf("ParseChallenge(%q) = %+v: fields out of range or not from the bytes", s, st)
		}
		if got := b64.EncodeToString(raw); got != s {
			t.Fatalf("ParseChallenge accepted %q, which re-encodes as %q", s, got)
		}
	})
}

// FuzzVerifyProof: VerifyAt never panics on any input, and whatever it
// accepts is a proof of the required work on a challenge c issued for this
// key and policy, unexpired.
func FuzzVerifyProof(f *testing.F) {
	c := newTest(f, 4)
	for i := range 4 {
		ch := c.IssueAt(t0, keyA, policy)
		f.Add(solve(f, ch.Value), int64(i))
		f.Add(ch.Value+"."+"AAAAAAAAAAA", int64(i))
	}
	f.Add("", int64(0))
	f.Add(string(make([]byte, ProofLength)), int64(0))
	f.Fuzz(func(t *testing.T, proof string, ms int64) {
		now := t0.Add(time.Duration(ms%20_000) * time.Millisecond)
		p, err := c.VerifyAt(now, proof, keyA, policy)
		if err != nil {
			if p != (Proof{}) {
				t.Fatalf("VerifyAt(%q) returned %+v with error %v", proof, p, err)
			}
			return
		}
		if zeros(proof[:ChallengeLength], p.Nonce) < c.Bits() || p.Bits < c.Bits() {
			t.Fatalf("VerifyAt(%q) accepted a proof without the work", proof)
		}
		if !now.Before(p.Expires) {
			t.Fatalf("VerifyAt(%q) at %v accepted a challenge expiring %v", proof, now, p.Expires)
		}
		if _, err := c.VerifyAt(now, proof, keyB, policy); err == nil {
			t.Fatalf("VerifyAt(%q) accepted the proof for another client key", proof)
		}
		if _, err := c.VerifyAt(now, proof, keyA, "other"); err == nil {
			t.Fatalf("VerifyAt(%q) accepted the proof for another policy", proof)
		}
	})
}
