package setup_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/leaktest"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// TestHashKeyNeverShowsTheSecret tries every malformed shape of
// EDGELIMIT_HASH_KEY: the error says what is wrong with the value's shape
// and what it must be, and shows no run of 8 characters of it.
func TestHashKeyNeverShowsTheSecret(t *testing.T) {
	for _, s := range leaktest.Shapes() {
		if s.Var != leaktest.HashKey {
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			key, err := setup.HashKey(s.Value)
			if !s.Malformed() {
				if err != nil || len(key) < 32 {
					t.Fatalf("HashKey = %d bytes, %v; want the key", len(key), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("HashKey accepted the value (%d bytes)", len(key))
			}
			wantHelpfulError(t, s, err, "openssl rand -base64 32")
		})
	}
}

// TestFromEnvNeverShowsASecret is issue #10, item 2, one layer up: every
// malformed shape of both variables, through FromEnv as a function's main
// calls it. Neither the error nor anything FromEnv logged (at debug level)
// shows a run of 8 characters of a secret.
func TestFromEnvNeverShowsASecret(t *testing.T) {
	for _, s := range leaktest.Shapes() {
		t.Run(s.Var+"/"+s.Name, func(t *testing.T) {
			vars, policies := map[string]string{s.Var: s.Value, setup.EnvLogLevel: "debug"}, durableFile
			if s.Var == leaktest.Secrets {
				policies = signedFile
			}
			_, stdout, stderr, err := fromEnv(t, vars, policies)
			if trace, ok := s.Trace(stdout.String() + stderr.String()); ok {
				t.Errorf("FromEnv's output shows a secret (%s):\n%s%s", trace, stdout, stderr)
			}
			if !s.Malformed() {
				if err != nil {
					t.Fatalf("FromEnv = %v, want an engine", err)
				}
				return
			}
			if err == nil {
				t.Fatal("FromEnv accepted the value")
			}
			if !errors.Is(err, setup.ErrEnv) {
				t.Errorf("error %v does not wrap setup.ErrEnv", err)
			}
			switch {
			case strings.TrimSpace(s.Value) == "":
				s.Want = s.Var + " is not set"
			case s.Var == leaktest.Secrets && !errors.Is(err, signedwindow.ErrBadKey) && !errors.Is(err, signedwindow.ErrNoKeys):
				t.Errorf("error %v wraps neither signedwindow.ErrBadKey nor ErrNoKeys", err)
			}
			wantHelpfulError(t, s, err, "")
		})
	}
}

// wantHelpfulError checks that err shows no secret of s, is one line, and
// says what is wrong (s.Want, the entry's position) and what is expected.
func wantHelpfulError(t *testing.T, s leaktest.Shape, err error, expected string) {
	t.Helper()
	msg := err.Error()
	for _, f := range []string{"%v", "%+v", "%#v", "%q"} {
		if trace, ok := s.Trace(fmt.Sprintf(f, err)); ok {
			t.Fatalf("the error shows a secret (%s): %s", trace, msg)
		}
	}
	want := []string{s.Want, expected}
	if s.Entry > 0 {
		want = append(want, fmt.Sprintf("entry %d of %s: ", s.Entry, s.Var), "expected kid:base64")
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error %q is more than one line", msg)
	}
}
