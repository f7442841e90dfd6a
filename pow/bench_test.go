package pow

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
)

// BenchmarkVerifyProof is the server's cost of checking a valid proof: one
// SHA-256 of 44 bytes and one HMAC with a reused key state.
func BenchmarkVerifyProof(b *testing.B) {
	c := newTest(b, 8)
	proof := solve(b, c.IssueAt(t0, keyA, policy).Value)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.VerifyAt(t0, proof, keyA, policy); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyProofParallel is BenchmarkVerifyProof on every core.
func BenchmarkVerifyProofParallel(b *testing.B) {
	c := newTest(b, 8)
	proof := solve(b, c.IssueAt(t0, keyA, policy).Value)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.VerifyAt(t0, proof, keyA, policy); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRejectGarbageProof is the cost of a well-formed proof that did
// not do the work: it is refused after one SHA-256, before any HMAC.
func BenchmarkRejectGarbageProof(b *testing.B) {
	c := newTest(b, 16)
	ch := c.IssueAt(t0, keyA, policy)
	proof := proofString(ch.Value, failingNonce(b, ch.Value))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.VerifyAt(t0, proof, keyA, policy); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkIssue is the cost of a challenge: 12 random bytes, one HMAC, one
// encoding.
func BenchmarkIssue(b *testing.B) {
	c, err := New(Config{Secrets: [][]byte{secretA}, Bits: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.IssueAt(t0, keyA, policy)
	}
}

// BenchmarkHash is one solver attempt: SHA-256 of the 44-byte message.
func BenchmarkHash(b *testing.B) {
	var msg [workSize]byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		msg[workSize-1] = byte(i)
		sum := sha256.Sum256(msg[:])
		if LeadingZeroBits(sum[:]) > 64 {
			b.Fatal()
		}
	}
}

// BenchmarkSolve measures the solver on every core over distinct
// challenges; hashes/op is the mean work (2^bits expected). Run with
// -benchtime=Nx for the 20-bit case.
func BenchmarkSolve(b *testing.B) {
	for _, bits := range []int{8, 12, 16, 20} {
		b.Run(fmt.Sprintf("bits=%d", bits), func(b *testing.B) {
			c := newTest(b, bits)
			var tries float64
			for b.Loop() {
				ch := c.IssueAt(t0, keyA, policy)
				proof, err := Solve(context.Background(), ch.Value)
				if err != nil {
					b.Fatal(err)
				}
				p, err := c.VerifyAt(t0, proof, keyA, policy)
				if err != nil {
					b.Fatal(err)
				}
				tries += float64(p.Nonce + 1)
			}
			b.ReportMetric(tries/float64(b.N), "hashes/op")
		})
	}
}
