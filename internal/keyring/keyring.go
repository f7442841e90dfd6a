// Package keyring parses the key ring of EDGELIMIT_SECRETS: comma-separated
// "kid:base64" entries, newest first. The signed strategy signs window
// tokens with it, and package powgate keys its challenges with it; both
// parse it here, so that a program that only gates durable or kv policies
// behind proof of work links no token code. Errors name an entry by its
// position and say what is wrong with its shape, never any part of its
// text: a slip can put a secret anywhere, including where the key id
// belongs.
package keyring

import (
	"crypto/hmac"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode"

	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

// EnvSecrets is the variable the ring comes from, for messages.
const EnvSecrets = "EDGELIMIT_SECRETS"

// MaxIDLength bounds a key id.
const MaxIDLength = 64

// Entry is one parsed key: its id and its secret.
type Entry struct {
	ID     string
	Secret []byte
}

// Secrets returns the entries' secrets, in order.
func Secrets(es []Entry) [][]byte {
	out := make([][]byte, len(es))
	for i, e := range es {
		out[i] = e.Secret
	}
	return out
}

// Parse parses the ring: see signedwindow.ParseKeyRing for the rules. A
// ring without entries (empty, or commas alone) is no error here: the
// caller says what a ring is needed for.
func Parse(s string) ([]Entry, error) {
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		return nil, fmt.Errorf("%s holds JSON (the whole Secrets Manager secret?); set it to the token_secrets value alone "+
			"(or name the secret in EDGELIMIT_SECRET_ID): %s", EnvSecrets, ExpectedEntry)
	}
	var keys []Entry
	var pos []int
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		k, err := parseEntry(entry)
		if err != nil {
			return nil, fmt.Errorf("entry %d of %s: %w", i+1, EnvSecrets, err)
		}
		for j, prev := range keys {
			switch {
			case prev.ID == k.ID:
				return nil, fmt.Errorf("entries %d and %d of %s have the same key id; each key needs its own", pos[j], i+1, EnvSecrets)
			case hmac.Equal(prev.Secret, k.Secret):
				return nil, fmt.Errorf("entries %d and %d of %s have the same secret; each key needs its own (edgelimit keygen makes one)", pos[j], i+1, EnvSecrets)
			}
		}
		keys = append(keys, k)
		pos = append(pos, i+1)
	}
	return keys, nil
}

// ExpectedEntry ends every entry error: the shape wanted, with an example
// that is obviously not a key.
const ExpectedEntry = "expected kid:base64, like k1:<44 base64 characters> (`edgelimit keygen` prints one)"

// entryError is what is wrong with one entry: its shape, never its text.
type entryError struct {
	problem string
	short   bool // the secret is too short: wraps isecret.ErrShort
}

func (e *entryError) Error() string { return e.problem + "; " + ExpectedEntry }

func (e *entryError) Unwrap() error {
	if e.short {
		return isecret.ErrShort
	}
	return nil
}

// parseEntry parses one trimmed, non-empty "kid:base64" entry. Its errors
// describe the entry's shape only.
func parseEntry(entry string) (Entry, error) {
	bad := func(problem string) (Entry, error) { return Entry{}, &entryError{problem: problem} }
	if q := entry[0]; q == '"' || q == '\'' || q == '`' || strings.ContainsAny(entry[len(entry)-1:], "\"'`") {
		return bad("it is in quotes; remove them")
	}
	switch n := strings.Count(entry, ":"); {
	case n == 0:
		if LooksLikeSecret(entry) {
			return bad("it has no colon: it looks like a secret without its key id")
		}
		return bad("it has no colon")
	case n > 1:
		return bad(fmt.Sprintf("it has %d colons where one belongs, between the key id and the secret (are two entries "+
			"run together? entries are separated by commas)", n))
	}
	id, b64, _ := strings.Cut(entry, ":")
	id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
	switch {
	case id == "" && b64 == "":
		return bad("it is a colon alone")
	case id == "":
		return bad("nothing stands before the colon: the key id is missing")
	case b64 == "" && LooksLikeSecret(id):
		return bad("nothing stands after the colon, and the part before it looks like a secret: the key id is missing")
	case b64 == "":
		return bad("nothing stands after the colon: the secret is missing")
	case LooksLikeSecret(id):
		// Also a valid kid of URL-safe characters: refused all the same,
		// since the kid is sent to every client in its tokens.
		return bad("the part before the colon looks like a secret (43 or more base64 characters): are the halves swapped, " +
			"or the secret pasted twice? The key id comes first, and is a short name")
	case strings.ContainsFunc(id, unicode.IsSpace):
		return bad("the key id contains white space")
	case len(id) > MaxIDLength:
		return bad(fmt.Sprintf("the key id is %d characters long; at most %d", len(id), MaxIDLength))
	case !ValidID(id):
		return bad("the key id has a character other than A-Z a-z 0-9 . _ -" + swapHint(id, b64))
	}
	secret, ok := decodeSecret(b64)
	if !ok {
		return bad("the part after the colon is not base64: " + base64Problem(b64) + swapHint(id, b64))
	}
	defer clear(secret)
	if len(secret) < isecret.MinLength {
		return Entry{}, &entryError{short: true, problem: fmt.Sprintf("the secret decodes to %s; it needs at least %d%s",
			plural(len(secret), "byte"), isecret.MinLength, swapHint(id, b64))}
	}
	return Entry{ID: id, Secret: append([]byte(nil), secret...)}, nil
}

// swapHint suggests that the halves are swapped when the part before the
// colon is longer than the part after it and looks like base64 of some
// length (a short secret, too short for looksLikeSecret).
func swapHint(id, b64 string) string {
	if len(id) <= len(b64) || len(id) < 16 {
		return ""
	}
	if _, ok := decodeSecret(id); !ok {
		return ""
	}
	return " (the part before the colon looks like base64: are the halves swapped? The key id comes first)"
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// LooksLikeSecret reports whether s decodes as base64 to a secret's length.
func LooksLikeSecret(s string) bool {
	b, ok := decodeSecret(s)
	clear(b)
	return ok && len(b) >= isecret.MinLength
}

// base64Problem says why s, which no base64 encoding decodes, is not
// base64, without quoting it.
func base64Problem(s string) string {
	switch {
	case strings.ContainsFunc(s, unicode.IsSpace):
		return "it contains white space"
	case strings.ContainsFunc(s, func(r rune) bool { return !isBase64Char(r) }):
		return "it has a character other than A-Z a-z 0-9 + / - _ ="
	case strings.ContainsAny(s, "+/") && strings.ContainsAny(s, "-_"):
		return "it mixes standard (+ /) and URL-safe (- _) characters"
	}
	return "its length or padding is wrong (cut short?)"
}

func isBase64Char(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("+/-_=", r)
}

// decodeSecret decodes standard or URL-safe base64, padded or not (line
// breaks inside are skipped, as Go's decoder does).
func decodeSecret(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && s != "" {
			return b, true
		}
	}
	return nil, false
}

// ValidID reports whether id is a key id: 1-64 characters of A-Z a-z 0-9 . _ -.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
