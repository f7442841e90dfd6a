package pow

import (
	"strconv"
	"time"

	"github.com/edgelimit/edgelimit/internal/jsonenc"
)

// The HTTP side of the protocol, shared by every limiter that asks for work
// (package signedwindow for a fresh window, package powgate above a soft
// threshold) and by the clients (package client, pow.js): a challenge goes
// out in a 429, a proof comes back in the retry.
const (
	// HeaderChallenge carries a challenge (Challenge.Value) in a 429; a
	// route whose several policies ask for work sends them as one
	// comma-separated list.
	HeaderChallenge = "Edgelimit-Challenge"
	// HeaderProof carries the client's solutions ("challenge.nonce"), a
	// comma-separated list when it answers several challenges; each
	// policy tries the first MaxProofCandidates of them.
	HeaderProof = "Edgelimit-Proof"
	// MaxProofHeader bounds the Edgelimit-Proof header a verifier reads; a
	// longer one is treated as absent. It holds the eight proofs the Go
	// client keeps, with room to spare.
	MaxProofHeader = 1024
	// MaxProofCandidates bounds how many proofs of one header a verifier
	// tries, so that a long list costs a bounded number of hashes.
	MaxProofCandidates = 8
	// ChallengeDetail is the sentence a 429 with a challenge adds to its
	// problem body's detail.
	ChallengeDetail = "Solve the proof-of-work challenge and retry with the Edgelimit-Proof header."
)

// Extension returns the problem body's extension member for ch, the JSON
// object {"challenge":{"challenge":"...","bits":16,"expires":"..."}}: byte
// for byte what encoding/json writes for it (expires in RFC 3339 with
// fractional seconds as needed), without reflection.
func (ch Challenge) Extension() string {
	b := make([]byte, 0, 48+len(ch.Value)+40)
	b = append(b, `{"challenge":{"challenge":`...)
	b = jsonenc.AppendString(b, ch.Value)
	b = append(b, `,"bits":`...)
	b = strconv.AppendInt(b, int64(ch.Bits), 10)
	b = append(b, `,"expires":"`...)
	b = ch.Expires.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `"}}`...)
	return string(b)
}
