package pow

import "errors"

// Errors returned by Verify, Redeem, ParseChallenge and Solve. They are the
// private causes of a rejected proof, for logs and tests; a client is only
// ever told to solve a new challenge.
var (
	// ErrMalformed: the challenge or proof is not in the v1 format.
	ErrMalformed = errors.New("pow: malformed challenge or proof")
	// ErrVersion: the challenge has a version this package does not know.
	ErrVersion = errors.New("pow: unsupported challenge version")
	// ErrExpired: the challenge's expiry has passed.
	ErrExpired = errors.New("pow: challenge expired")
	// ErrWeakChallenge: the challenge asks for fewer bits than the verifier
	// requires (it was issued under an older, easier configuration).
	ErrWeakChallenge = errors.New("pow: challenge difficulty below the required bits")
	// ErrTooFewBits: SHA-256(challenge ‖ nonce) has fewer leading zero bits
	// than the challenge asks for.
	ErrTooFewBits = errors.New("pow: proof has too few leading zero bits")
	// ErrSignature: the challenge was not issued by any of our keys for this
	// client key and policy (tampered, forged, or for someone else).
	ErrSignature = errors.New("pow: challenge signature does not match")
	// ErrReplayed: the proof was already redeemed on this instance.
	ErrReplayed = errors.New("pow: proof already spent on this instance")
	// ErrTooHard: the challenge asks for more bits than the solver accepts.
	ErrTooHard = errors.New("pow: challenge is harder than the solver's limit")
)
