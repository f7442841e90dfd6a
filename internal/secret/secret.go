// Package secret holds the one rule every secret of edgelimit follows (at
// least 32 bytes: the hash key, token and challenge keys) and a source of
// fresh ones.
package secret

import (
	"crypto/rand"
	"fmt"
)

// MinLength is the shortest secret edgelimit accepts for any key.
const MinLength = 32

// ErrShort is returned (wrapped) for a secret shorter than MinLength.
var ErrShort = fmt.Errorf("edgelimit: secret must be at least %d bytes", MinLength)

// Random returns MinLength fresh random bytes.
func Random() []byte {
	b := make([]byte, MinLength)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return b
}
