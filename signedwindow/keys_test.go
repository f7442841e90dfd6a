package signedwindow

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

func TestParseKeyRing(t *testing.T) {
	std := base64.StdEncoding.EncodeToString(secret1)
	url := base64.RawURLEncoding.EncodeToString(secret2)
	r, err := ParseKeyRing(" k2:" + url + " ,\n k1:" + std + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.IDs(), ","); got != "k2,k1" || r.SigningKeyID() != "k2" {
		t.Errorf("IDs = %s, signing %s; want k2,k1 signing k2", got, r.SigningKeyID())
	}
	if !bytes.Equal(r.byID["k1"].secret, secret1) || !bytes.Equal(r.byID["k2"].secret, secret2) {
		t.Error("secrets not decoded")
	}
	if r.String() != "signedwindow.KeyRing{k2 (signs), k1}" {
		t.Errorf("String = %q", r.String())
	}
}

func TestParseKeyRingErrors(t *testing.T) {
	short := base64.StdEncoding.EncodeToString([]byte("only-31-bytes-of-secret-0123456"))
	good := base64.StdEncoding.EncodeToString(secret1)
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"empty", "", ErrNoKeys},
		{"only commas", " , ,", ErrNoKeys},
		{"no colon", good, ErrBadKey},
		{"empty kid", ":" + good, ErrBadKey},
		{"kid with a quote", `k"1:` + good, ErrBadKey},
		{"kid too long", strings.Repeat("k", 65) + ":" + good, ErrBadKey},
		{"not base64", "k1:" + good[:10] + "!" + good[11:], ErrBadKey},
		{"empty secret", "k1:", ErrBadKey},
		{"short secret", "k1:" + short, isecret.ErrShort},
		{"duplicate kid", "k1:" + good + ",k1:" + good, ErrBadKey},
		{"swapped (secret first)", good + ":k1", ErrBadKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeyRing(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseKeyRing(%q) = %v, want %v", tc.in, err, tc.want)
			}
			for _, secret := range []string{good, good[:20], short, short[:20]} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows the secret", err)
				}
			}
		})
	}
}

func TestNewKey(t *testing.T) {
	entry := NewKey()
	if !regexp.MustCompile(`^k[0-9a-f]{8}:[A-Za-z0-9+/]{43}=$`).MatchString(entry) {
		t.Fatalf("NewKey() = %q, want k<8 hex>:<base64 of 32 bytes>", entry)
	}
	r, err := ParseKeyRing(entry + "," + NewKey())
	if err != nil {
		t.Fatalf("ParseKeyRing(NewKey()) = %v", err)
	}
	if len(r.keys[0].secret) != 32 || r.keys[0].id == r.keys[1].id {
		t.Errorf("keys %v: want 32-byte secrets under distinct ids", r)
	}
	if r := EphemeralKeyRing(); len(r.IDs()) != 1 {
		t.Errorf("EphemeralKeyRing = %v, want one key", r)
	}
}

// TestSecretsNeverPrinted formats keys and rings every way a program might
// print or log them.
func TestSecretsNeverPrinted(t *testing.T) {
	k := mustKey(t, "k1", secret1)
	r := ring(t, k)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("keys", "key", k, "ring", r, "keys", []Key{k})
	//lint:ignore SA9005 a Key marshals to {} on purpose: the test shows its JSON holds no secret.
	js, _ := json.Marshal(k)
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outs = append(outs, fmt.Sprintf(verb, k), fmt.Sprintf(verb, r), fmt.Sprintf(verb, []Key{k}), fmt.Sprintf(verb, r.keys[0]), fmt.Sprintf(verb, r.keys))
	}
	outs = append(outs, logs.String(), string(js), k.String(), r.String(), k.GoString(), r.GoString())
	forms := []string{
		string(secret1), base64.StdEncoding.EncodeToString(secret1), base64.RawURLEncoding.EncodeToString(secret1),
		fmt.Sprintf("%x", secret1), fmt.Sprintf("%X", secret1), fmt.Sprint([]byte(secret1)), fmt.Sprintf("%d", secret1[:4]),
		fmt.Sprint(secret1[:4]),
	}
	for _, out := range outs {
		for _, f := range forms {
			if strings.Contains(out, strings.Trim(f, "[]")) {
				t.Fatalf("output %q contains the secret (as %q)", out, f)
			}
		}
	}
	if !strings.Contains(k.Entry(), base64.StdEncoding.EncodeToString(secret1)) {
		t.Error("Entry does not carry the secret")
	}
}
