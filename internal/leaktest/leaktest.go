// Package leaktest holds malformed values of the two secret variables,
// EDGELIMIT_SECRETS and EDGELIMIT_HASH_KEY, each with the secrets it
// carries, and finds any trace of those secrets in an error, a log or a
// process's output. It is shared by the parser, setup, serve and Lambda
// function tests, so that every layer is tried with the same slips.
//
// A trace is any run of 8 or more characters of a secret's text as it
// appears in the value, or of the secret's bytes, or of those bytes
// re-encoded (base64 in either alphabet, padded or not, hex, a Go quoted
// string): an error that shows a third of a key has shown too much.
package leaktest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// The variables, named here so that this package imports neither
// signedwindow nor setup (whose own tests import it).
const (
	Secrets = "EDGELIMIT_SECRETS"
	HashKey = "EDGELIMIT_HASH_KEY"
)

// MinRun is the shortest run of a secret that counts as a trace.
const MinRun = 8

// Shape is one value of Var, malformed (or, for a few, merely odd but
// valid), with the secret material it carries.
type Shape struct {
	Name  string
	Var   string // Secrets or HashKey
	Value string
	// Keys are the secrets' bytes; Texts the secrets' text as the value
	// shows it (the encodings of Keys are added by Trace).
	Keys  [][]byte
	Texts []string
	// Want is a phrase the error must hold (besides the entry's position),
	// "" for a value the parser accepts.
	Want string
	// Entry is the position ParseKeyRing must name ("entry 2 of ..."), 0
	// when the error is about the whole value.
	Entry int
	// Short marks an error that must wrap secret.ErrShort (internal/secret).
	Short bool
	// Process marks the handful of shapes also run through `edgelimit
	// serve` and a Lambda function (each costs a process start).
	Process bool
}

// Malformed reports whether the parser must refuse the value.
func (s Shape) Malformed() bool { return s.Want != "" }

func randomBytes(gen *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(gen.Uint32())
	}
	return b
}

// secretWhere returns n random bytes whose encoding by enc satisfies ok.
func secretWhere(gen *rand.Rand, n int, enc *base64.Encoding, ok func(string) bool) ([]byte, string) {
	for {
		b := randomBytes(gen, n)
		if s := enc.EncodeToString(b); ok(s) {
			return b, s
		}
	}
}

func has(chars string) func(string) bool {
	return func(s string) bool { return strings.ContainsAny(s, chars) }
}

// Shapes returns every shape of both variables. Each call returns the same
// values.
func Shapes() []Shape {
	// A fixed seed: the same shapes on every run.
	gen := rand.New(rand.NewChaCha8([32]byte{'e', 'd', 'g', 'e', 'l', 'i', 'm', 'i', 't'}))
	// Standard base64 that is not URL-safe (has + or /), and URL-safe
	// base64, unpadded, that is a valid key id (has - or _): the dangerous
	// one, since it passes for a kid.
	s1, std1 := secretWhere(gen, 32, base64.StdEncoding, has("+/"))
	s2, std2 := secretWhere(gen, 32, base64.StdEncoding, has("+/"))
	u1, url1 := secretWhere(gen, 32, base64.RawURLEncoding, has("-_"))
	u2, url2 := secretWhere(gen, 32, base64.RawURLEncoding, has("-_"))
	short, shortStd := secretWhere(gen, 20, base64.StdEncoding, has("+/"))
	shortU, shortURL := secretWhere(gen, 20, base64.RawURLEncoding, has("-_"))
	hk, hkStd := secretWhere(gen, 32, base64.StdEncoding, has("+/"))
	hku, hkURL := secretWhere(gen, 32, base64.RawURLEncoding, has("-_"))
	hkShort, hkShortStd := secretWhere(gen, 16, base64.StdEncoding, has("+/"))
	huge := randomBytes(gen, 60<<10) // 80 KiB of base64: within Linux's 128 KiB for one variable
	hugeURL := base64.RawURLEncoding.EncodeToString(huge)
	hugeStd := base64.StdEncoding.EncodeToString(huge)
	keys := func(k ...[]byte) [][]byte { return k }
	texts := func(t ...string) []string { return t }
	smJSON := `{"hash_key":"` + hkStd + `","token_secrets":"k2:` + std2 + `,k1:` + std1 + `"}`

	const (
		swapped = "looks like a secret"
		notB64  = "is not base64"
		colons  = "colons where one belongs"
	)
	ring := []Shape{
		{Name: "halves swapped, standard base64", Value: std1 + ":k1", Keys: keys(s1), Want: swapped, Entry: 1},
		{Name: "halves swapped, URL-safe base64", Value: url1 + ":k1", Keys: keys(u1), Want: swapped, Entry: 1, Process: true},
		{Name: "halves swapped, short URL-safe secret", Value: shortURL + ":k1", Keys: keys(shortU), Want: "the secret decodes to 1 byte;", Entry: 1, Short: true},
		{Name: "halves swapped, short standard secret", Value: shortStd + ":k1", Keys: keys(short), Want: "the key id has a character other than", Entry: 1},
		{Name: "secret: with a trailing colon, URL-safe", Value: url1 + ":", Keys: keys(u1), Want: "the key id is missing", Entry: 1, Process: true},
		{Name: "secret: with a trailing colon, standard", Value: std1 + ":", Keys: keys(s1), Want: "the key id is missing", Entry: 1},
		{Name: "kid: with a trailing colon", Value: "k1:", Want: "the secret is missing", Entry: 1},
		{Name: "leading colon", Value: ":" + std1, Keys: keys(s1), Want: "the key id is missing", Entry: 1},
		{Name: "a colon alone", Value: ":", Want: "a colon alone", Entry: 1},
		{Name: "secret without kid, standard", Value: std1, Keys: keys(s1), Want: "no colon", Entry: 1},
		{Name: "secret without kid, URL-safe", Value: url1, Keys: keys(u1), Want: "no colon", Entry: 1},
		{Name: "several colons", Value: "k1:" + std1 + ":" + std2, Keys: keys(s1, s2), Want: colons, Entry: 1},
		{Name: "kid:kid:secret", Value: "k2:k1:" + url1, Keys: keys(u1), Want: colons, Entry: 1},
		{Name: "entries on separate lines", Value: "k2:" + std2 + "\nk1:" + std1, Keys: keys(s1, s2), Want: colons, Entry: 1},
		{Name: "entries separated by semicolons", Value: "k2:" + std2 + ";k1:" + std1, Keys: keys(s1, s2), Want: colons, Entry: 1},
		{Name: "space inside the secret", Value: "k1:" + std1[:20] + " " + std1[20:], Keys: keys(s1), Texts: texts(std1[:20], std1[20:]), Want: "white space", Entry: 1},
		{Name: "tab inside the secret", Value: "k1:" + url1[:30] + "\t" + url1[30:], Keys: keys(u1), Texts: texts(url1[:30], url1[30:]), Want: "white space", Entry: 1},
		{Name: "space inside the kid", Value: "k 1:" + std1, Keys: keys(s1), Want: "the key id contains white space", Entry: 1},
		{Name: "space around the colon", Value: "k1 : " + std1, Keys: keys(s1)},
		{Name: "line break inside the secret", Value: "k1:" + std1[:22] + "\n" + std1[22:], Keys: keys(s1), Texts: texts(std1[:22], std1[22:])},
		{Name: "CRLF after the entries", Value: "k2:" + std2 + ",\r\nk1:" + std1 + "\r\n", Keys: keys(s1, s2)},
		{Name: "URL-safe secret", Value: "k1:" + url1, Keys: keys(u1)},
		{Name: "mixed alphabets", Value: "k1:" + mixAlphabets(std1), Keys: keys(s1), Texts: texts(mixAlphabets(std1)), Want: "mixes standard", Entry: 1},
		{Name: "short secret", Value: "k1:" + shortStd, Keys: keys(short), Want: "the secret decodes to 20 bytes", Entry: 1, Short: true},
		{Name: "secret cut short, still decodable", Value: "k1:" + std1[:30], Keys: keys(s1), Texts: texts(std1[:30]), Want: "the secret decodes to 22 bytes", Entry: 1, Short: true},
		{Name: "secret cut short, not decodable", Value: "k1:" + std1[:29], Keys: keys(s1), Texts: texts(std1[:29]), Want: "length or padding is wrong", Entry: 1},
		{Name: "padding doubled", Value: "k1:" + std1 + "=", Keys: keys(s1), Want: "length or padding is wrong", Entry: 1},
		{Name: "empty value", Value: "", Want: "no keys"},
		{Name: "only commas", Value: " , ,", Want: "no keys"},
		{Name: "empty entries", Value: ",,k2:" + std2 + ",,k1:" + std1 + ",", Keys: keys(s1, s2)},
		{Name: "duplicate kid", Value: "k1:" + std1 + ",k1:" + std2, Keys: keys(s1, s2), Want: "entries 1 and 2 of EDGELIMIT_SECRETS have the same key id"},
		{Name: "same secret under two kids", Value: "k2:" + std1 + ",k1:" + std1, Keys: keys(s1), Want: "entries 1 and 2 of EDGELIMIT_SECRETS have the same secret"},
		{Name: "secret pasted twice as kid:secret", Value: url1 + ":" + url1, Keys: keys(u1), Want: swapped, Entry: 1, Process: true},
		{Name: "secret pasted twice, no kid", Value: std1 + "," + std1, Keys: keys(s1), Want: "no colon", Entry: 1},
		{Name: "two secrets as kid:secret", Value: url2 + ":" + std1, Keys: keys(u2, s1), Want: swapped, Entry: 1},
		{Name: "valid entry, then a broken one", Value: "k2:" + std2 + "," + url1 + ":", Keys: keys(s2, u1), Want: "the key id is missing", Entry: 2},
		{Name: "valid entry, then a short one", Value: "k2:" + std2 + ",k1:" + shortStd, Keys: keys(s2, short), Want: "decodes to 20 bytes", Entry: 2, Short: true},
		{Name: "valid entry, empty, then swapped", Value: "k2:" + std2 + ",," + url1 + ":k1", Keys: keys(s2, u1), Want: swapped, Entry: 3},
		{Name: "huge kid", Value: hugeURL + ":" + std1, Keys: keys(huge, s1), Want: swapped, Entry: 1},
		{Name: "huge secret, one bad character", Value: "k1:" + hugeStd[:1000] + "*" + hugeStd[1000:], Keys: keys(huge), Texts: texts(hugeStd[:1000], hugeStd[1000:]), Want: "a character other than", Entry: 1},
		{Name: "huge value without a colon", Value: hugeStd, Keys: keys(huge), Want: "no colon", Entry: 1},
		{Name: "kid too long", Value: strings.Repeat("k.", 40) + ":" + std1, Keys: keys(s1), Want: "the key id is 80 characters long", Entry: 1},
		{Name: "non-UTF-8 in the secret", Value: "k1:" + std1[:10] + "\xff\xfe" + std1[10:], Keys: keys(s1), Texts: texts(std1[:10], std1[10:]), Want: "a character other than", Entry: 1},
		{Name: "non-UTF-8 in the kid", Value: "k\xff1:" + std1, Keys: keys(s1), Want: "the key id has a character other than", Entry: 1},
		{Name: "double quotes", Value: `"k1:` + std1 + `"`, Keys: keys(s1), Want: "in quotes", Entry: 1},
		{Name: "single quotes", Value: `'k2:` + std2 + `,k1:` + std1 + `'`, Keys: keys(s1, s2), Want: "in quotes", Entry: 1},
		{Name: "quotes around the secret", Value: `k1:"` + std1 + `"`, Keys: keys(s1), Want: "in quotes", Entry: 1},
		{Name: "Secrets Manager JSON pasted whole", Value: smJSON, Keys: keys(s1, s2, hk), Want: "holds JSON", Process: true},
		{Name: "JSON array", Value: `["k1:` + std1 + `"]`, Keys: keys(s1), Want: "holds JSON"},
		{Name: "variable name pasted in", Value: Secrets + "=k1:" + std1, Keys: keys(s1), Want: "the key id has a character other than", Entry: 1},
		{Name: "hash key given as the key ring", Value: hkStd, Keys: keys(hk), Want: "no colon", Entry: 1},
	}
	hash := []Shape{
		{Name: "URL-safe base64", Value: hkURL, Keys: keys(hku), Want: "URL-safe base64", Process: true},
		{Name: "URL-safe base64, padded", Value: base64.URLEncoding.EncodeToString(hku), Keys: keys(hku), Want: "URL-safe base64"},
		{Name: "short", Value: hkShortStd, Keys: keys(hkShort), Want: "decodes to 16 bytes", Process: true},
		{Name: "cut short, not decodable", Value: hkStd[:29], Keys: keys(hk), Texts: texts(hkStd[:29]), Want: "length or padding is wrong"},
		{Name: "padding doubled", Value: hkStd + "=", Keys: keys(hk), Want: "length or padding is wrong"},
		{Name: "space inside", Value: hkStd[:20] + " " + hkStd[20:], Keys: keys(hk), Texts: texts(hkStd[:20], hkStd[20:]), Want: "white space"},
		{Name: "line break inside", Value: hkStd[:20] + "\n" + hkStd[20:], Keys: keys(hk), Texts: texts(hkStd[:20], hkStd[20:])},
		{Name: "double quotes", Value: `"` + hkStd + `"`, Keys: keys(hk), Want: "in quotes", Process: true},
		{Name: "single quote at the end", Value: hkStd + `'`, Keys: keys(hk), Want: "in quotes"},
		{Name: "non-UTF-8", Value: hkStd[:10] + "\xff" + hkStd[10:], Keys: keys(hk), Texts: texts(hkStd[:10], hkStd[10:]), Want: "a character other than"},
		{Name: "a key ring entry", Value: "k1:" + hkStd, Keys: keys(hk), Want: "like a key ring entry"},
		{Name: "key ring entry, halves swapped", Value: hkStd + ":k1", Keys: keys(hk), Want: "like a key ring entry"},
		{Name: "variable name pasted in", Value: HashKey + "=" + hkStd, Keys: keys(hk), Want: "a character other than"},
		{Name: "Secrets Manager JSON pasted whole", Value: smJSON, Keys: keys(s1, s2, hk), Want: "holds JSON", Process: true},
		{Name: "huge, one bad character", Value: hugeStd[:500] + "!" + hugeStd[500:], Keys: keys(huge), Texts: texts(hugeStd[:500], hugeStd[500:]), Want: "a character other than"},
		{Name: "white space only", Value: " \t\n", Want: "is not set"},
	}
	for i := range ring {
		ring[i].Var = Secrets
	}
	for i := range hash {
		hash[i].Var = HashKey
	}
	return append(ring, hash...)
}

// mixAlphabets turns a standard base64 text (with + or /) into one that
// also has a URL-safe character, which no decoder accepts.
func mixAlphabets(std string) string {
	b := []byte(std)
	b[strings.IndexFunc(std, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })] = '-'
	return string(b)
}

// forbidden returns every text whose runs of MinRun must not be shown.
func (s Shape) forbidden() []string {
	out := append([]string(nil), s.Texts...)
	for _, k := range s.Keys {
		q := strconv.Quote(string(k))
		out = append(out, string(k),
			base64.StdEncoding.EncodeToString(k), base64.RawStdEncoding.EncodeToString(k),
			base64.URLEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k),
			hex.EncodeToString(k), strings.ToUpper(hex.EncodeToString(k)), q[1:len(q)-1])
	}
	return out
}

// Trace returns the first run of MinRun or more characters of one of s's
// secrets that output shows (output is searched as it is and with its JSON
// lines' strings unescaped), and whether there is one.
func (s Shape) Trace(output string) (string, bool) {
	hay := output + "\n" + jsonStrings(output)
	if len(hay) < MinRun {
		return "", false
	}
	grams := make(map[string]struct{}, len(hay))
	for i := 0; i+MinRun <= len(hay); i++ {
		grams[hay[i:i+MinRun]] = struct{}{}
	}
	for n, f := range s.forbidden() {
		for i := 0; i+MinRun <= len(f); i++ {
			if _, ok := grams[f[i:i+MinRun]]; ok {
				return fmt.Sprintf("form %d of the secrets, at %d: %q", n, i, f[i:i+MinRun]), true
			}
		}
	}
	return "", false
}

// jsonStrings returns the string values of output's JSON lines, unescaped,
// one a line: a secret escaped by a JSON log is still a secret.
func jsonStrings(output string) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			b.WriteString(v)
			b.WriteByte('\n')
		case map[string]any:
			for k, x := range v {
				walk(k)
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, line := range bytes.Split([]byte(output), []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' && line[0] != '[' && line[0] != '"' {
			continue
		}
		var v any
		if json.Unmarshal(line, &v) == nil {
			walk(v)
		}
	}
	return b.String()
}
