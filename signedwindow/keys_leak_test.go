package signedwindow

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/leaktest"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

// TestParseKeyRingNeverShowsASecret is the regression test of issue #10,
// item 2: a malformed EDGELIMIT_SECRETS entry (halves swapped, `secret:`
// with a trailing colon, ...) printed the secret as the "key id" of the
// error (`key "<secret>": ...`). Every shape of leaktest is parsed; an error
// must name the entry by position, say what is wrong and what is expected,
// and show no run of 8 characters of any secret the value holds. A value
// the parser accepts must not hold a secret where the key id goes either:
// key ids are public (they travel in every token's header).
func TestParseKeyRingNeverShowsASecret(t *testing.T) {
	for _, s := range leaktest.Shapes() {
		if s.Var != leaktest.Secrets {
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			r, err := ParseKeyRing(s.Value)
			if !s.Malformed() {
				if err != nil {
					t.Fatalf("ParseKeyRing = %v, want a ring", err)
				}
				if trace, ok := s.Trace(strings.Join(r.IDs(), "\n")); ok {
					t.Errorf("a key id of the ring is a secret: %s", trace)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseKeyRing accepted the ring %v", r)
			}
			msg := err.Error()
			for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
				if trace, ok := s.Trace(fmt.Sprintf(f, err)); ok {
					t.Fatalf("the error shows a secret (%s): %s", trace, msg)
				}
			}
			if !strings.Contains(msg, s.Want) {
				t.Errorf("error %q does not say %q", msg, s.Want)
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error %q is more than one line", msg)
			}
			if s.Entry > 0 {
				for _, want := range []string{fmt.Sprintf("entry %d of %s: ", s.Entry, EnvSecrets), "expected kid:base64, like k1:<44 base64 characters>"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
			}
			if !errors.Is(err, ErrBadKey) && !errors.Is(err, ErrNoKeys) {
				t.Errorf("error %v wraps neither ErrBadKey nor ErrNoKeys", err)
			}
			if errors.Is(err, isecret.ErrShort) != s.Short {
				t.Errorf("error %v: wraps isecret.ErrShort = %v, want %v", err, !s.Short, s.Short)
			}
		})
	}
}

// TestKeyConstructorsNeverShowTheID: NewKeyFromSecret and NewKeyRing are
// given key ids by a program, which may have read them from anywhere; their
// errors do not repeat them either.
func TestKeyConstructorsNeverShowTheID(t *testing.T) {
	id := "k-would-be-secret-0123456789"
	if _, err := NewKeyFromSecret(id, []byte("short")); err == nil || strings.Contains(err.Error(), id[:8]) || !errors.Is(err, isecret.ErrShort) {
		t.Errorf("NewKeyFromSecret(short) = %v, want ErrShortSecret without the id", err)
	}
	secretID := "vafSO7SA4By5DaA0Pcu0WmVAWI6f3df28Mxl_Kjlbrg" // URL-safe base64 of 32 bytes: a valid kid
	if _, err := NewKeyFromSecret(secretID, secret1); err == nil || strings.Contains(err.Error(), secretID[:8]) || !errors.Is(err, ErrBadKey) {
		t.Errorf("NewKeyFromSecret(a secret as the id) = %v, want ErrBadKey without the id", err)
	}
	k := mustKey(t, id, secret1)
	if _, err := NewKeyRing(k, mustKey(t, id, secret2)); err == nil || strings.Contains(err.Error(), id[:8]) || !errors.Is(err, ErrBadKey) {
		t.Errorf("NewKeyRing(duplicate ids) = %v, want ErrBadKey without the id", err)
	}
}
