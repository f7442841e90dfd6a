package signedwindow

import "errors"

// Why a token is treated as absent. Verify returns these private causes for
// logs and tests; Allow never returns them: to the client an invalid token is
// simply no token. Key-ring errors are configuration errors, returned by
// ParseKeyRing, NewKeyRing and New.
var (
	// ErrNoToken: the request carries no token for this policy.
	ErrNoToken = errors.New("signedwindow: no token")
	// ErrTooLarge: the token is longer than MaxTokenLength.
	ErrTooLarge = errors.New("signedwindow: token larger than 4 KiB")
	// ErrMalformed: not a JWT, not base64url, not JSON, or claims not as
	// this package issues them.
	ErrMalformed = errors.New("signedwindow: malformed token")
	// ErrAlgorithm: the header names an algorithm other than HS256
	// (including "none").
	ErrAlgorithm = errors.New("signedwindow: token algorithm is not HS256")
	// ErrUnknownKey: the kid is not in the key ring (unknown or retired).
	ErrUnknownKey = errors.New("signedwindow: token key id unknown or retired")
	// ErrSignature: the signature does not match (tampered or forged).
	ErrSignature = errors.New("signedwindow: token signature does not match")
	// ErrExpired: the token's window has ended.
	ErrExpired = errors.New("signedwindow: token expired")
	// ErrNotYetValid: the token's window has not started.
	ErrNotYetValid = errors.New("signedwindow: token not valid yet")
	// ErrPolicy: the token was issued for another policy (aud).
	ErrPolicy = errors.New("signedwindow: token issued for another policy")
	// ErrSubject: the token was issued to another client key (sub).
	ErrSubject = errors.New("signedwindow: token issued to another client")
	// ErrWindow: the token's window is not the policy's (the policy changed).
	ErrWindow = errors.New("signedwindow: token window does not match the policy")
	// ErrReplayed: the token was already spent on this instance.
	ErrReplayed = errors.New("signedwindow: token already spent on this instance")

	// ErrNoKeys: a key ring needs at least one key.
	ErrNoKeys = errors.New("signedwindow: no keys; set " + EnvSecrets + " (generate an entry with `edgelimit keygen`)")
	// ErrBadKey: a key ring entry is not kid:base64 with a valid kid.
	ErrBadKey = errors.New("signedwindow: bad key")
)
