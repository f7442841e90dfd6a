package signedwindow

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit/pow"
)

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// derived returns the token MAC key of a secret, as stock golang-jwt needs it.
func derived(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tokenLabel))
	return m.Sum(nil)
}

// rawToken assembles header.payload and MACs it with HMAC-SHA256 under key
// (nil: empty signature).
func rawToken(header, payload string, key []byte) string {
	in := b64(header) + "." + b64(payload)
	if key == nil {
		return in + "."
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func TestIssueVerify(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 10, time.Minute, 0), nil)
	d := f.allow(t, keyA, "", "")
	if !d.Allowed || d.Remaining != 9 || d.Reset != time.Minute || tokenOf(d) == "" || challengeOf(d) != nil {
		t.Fatalf("first request = %+v, want allowed, 9 remaining, reset 1m, a token", d)
	}
	c, err := f.l.Verify(tokenOf(d), keyA)
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != "tts" || c.Subject != keyA || c.Count != 1 || !c.Start.Equal(t0) || !c.Expires.Equal(t0.Add(time.Minute)) || c.ID == (pow.ID{}) {
		t.Errorf("Verify = %+v, want tts/%s, count 1, [t0, t0+1m), an id", c, keyA)
	}
	// The header names the signing key and HS256 only.
	head, _ := base64.RawURLEncoding.DecodeString(strings.Split(tokenOf(d), ".")[0])
	if string(head) != `{"alg":"HS256","kid":"k1"}` {
		t.Errorf("header = %s", head)
	}
}

func TestIncrementAndExpire(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 3, time.Minute, 0), nil)
	steps := []struct {
		at            time.Duration
		wantAllowed   bool
		wantRemaining int64
		wantRetry     time.Duration
		newWindow     bool
	}{
		{0, true, 2, 0, true},
		{10 * time.Second, true, 1, 0, false},
		{20 * time.Second, true, 0, 0, false},
		{30 * time.Second, false, 0, 30 * time.Second, false}, // spent: wait for the window end
		{59 * time.Second, false, 0, time.Second, false},
		{time.Minute, true, 2, 0, true}, // the token expired: a new window
		{61 * time.Second, true, 1, 0, false},
	}
	tok := ""
	for _, s := range steps {
		f.clock.Set(t0.Add(s.at))
		d := f.allow(t, keyA, tok, "")
		if d.Allowed != s.wantAllowed || d.Remaining != s.wantRemaining || d.RetryAfter != s.wantRetry {
			t.Fatalf("at +%v: Allow = %+v, want allowed %v, remaining %d, retry after %v", s.at, d, s.wantAllowed, s.wantRemaining, s.wantRetry)
		}
		if d.Allowed {
			c, err := f.l.Verify(tokenOf(d), keyA)
			if err != nil {
				t.Fatal(err)
			}
			if s.newWindow != c.Start.Equal(t0.Add(s.at)) {
				t.Errorf("at +%v: window starts %v", s.at, c.Start.Sub(t0))
			}
			tok = tokenOf(d)
		} else if tokenOf(d) != "" {
			t.Errorf("at +%v: a denial carries a token", s.at)
		}
	}
	// Expired exactly at exp, valid just before.
	c, _ := f.l.Verify(tok, keyA)
	f.clock.Set(c.Expires.Add(-time.Nanosecond))
	if _, err := f.l.Verify(tok, keyA); err != nil {
		t.Errorf("Verify 1ns before exp = %v", err)
	}
	f.clock.Set(c.Expires)
	if _, err := f.l.Verify(tok, keyA); !errors.Is(err, ErrExpired) {
		t.Errorf("Verify at exp = %v, want ErrExpired", err)
	}
}

func TestRotate(t *testing.T) {
	k1, k2 := mustKey(t, "k1", secret1), mustKey(t, "k2", secret2)
	p := signedPolicy("tts", 10, time.Minute, 0)
	old := newFixture(t, p, ring(t, k1))
	tok := tokenOf(old.allow(t, keyA, "", ""))

	// Step 1: k2 added, k1 still signs.
	step1 := newFixture(t, p, ring(t, k1, k2))
	if _, err := step1.l.Verify(tok, keyA); err != nil {
		t.Fatalf("ring [k1, k2] rejects a k1 token: %v", err)
	}
	// Step 2: k2 signs, k1 verifies: an old token is spent and re-signed by k2.
	step2 := newFixture(t, p, ring(t, k2, k1))
	d := step2.allow(t, keyA, tok, "")
	if !d.Allowed || d.Remaining != 8 {
		t.Fatalf("ring [k2, k1] with a k1 token = %+v, want allowed with 8 remaining", d)
	}
	if head, _ := base64.RawURLEncoding.DecodeString(strings.Split(tokenOf(d), ".")[0]); !strings.Contains(string(head), `"kid":"k2"`) {
		t.Errorf("new token header %s, want kid k2", head)
	}
	if _, err := step1.l.Verify(tokenOf(d), keyA); err != nil {
		t.Errorf("step-1 instance rejects a k2 token: %v", err)
	}
	// Step 3: k1 retired: its tokens stop verifying.
	step3 := newFixture(t, p, ring(t, k2))
	if _, err := step3.l.Verify(tok, keyA); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("ring [k2] with a k1 token = %v, want ErrUnknownKey", err)
	}
	if _, err := step3.l.Verify(tokenOf(d), keyA); err != nil {
		t.Errorf("ring [k2] with a k2 token = %v", err)
	}
	// A ring whose k1 is another secret: wrong signature.
	impostor := newFixture(t, p, ring(t, mustKey(t, "k1", secret2)))
	if _, err := impostor.l.Verify(tok, keyA); !errors.Is(err, ErrSignature) {
		t.Errorf("k1 with another secret = %v, want ErrSignature", err)
	}
}

// TestRejectedAsAbsent: each bad token is refused by Verify with its cause,
// and Allow treats it exactly as no token: a challenge with proof of work
// (never an error, never allowed), a fresh free window without.
func TestRejectedAsAbsent(t *testing.T) {
	p := signedPolicy("tts", 10, time.Minute, 8)
	f := newFixture(t, p, nil)
	dk := derived(secret1)
	id := base64.RawURLEncoding.EncodeToString(make([]byte, 12))
	claims := func(aud, sub string, nbf, exp time.Time, n int64) string {
		return `{"aud":"` + aud + `","sub":"` + sub + `","jti":"` + id + `","nbf":` + itoa(nbf.Unix()) + `,"exp":` + itoa(exp.Unix()) + `,"n":` + itoa(n) + `}`
	}
	hs := `{"alg":"HS256","kid":"k1"}`
	good := claims("tts", keyA, t0, t0.Add(time.Minute), 1)
	valid := rawToken(hs, good, dk)
	if _, err := f.l.Verify(valid, keyA); err != nil {
		t.Fatalf("the unmodified token is rejected: %v", err)
	}
	parts := strings.Split(valid, ".")

	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rs256, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"aud": "tts", "sub": keyA, "jti": id, "nbf": t0.Unix(), "exp": t0.Add(time.Minute).Unix(), "n": 1}).SignedString(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	hs384 := jwt.NewWithClaims(jwt.SigningMethodHS384, jwt.MapClaims{"aud": "tts", "sub": keyA, "jti": id, "nbf": t0.Unix(), "exp": t0.Add(time.Minute).Unix(), "n": 1})
	hs384.Header["kid"] = "k1"
	hs384Tok, err := hs384.SignedString(dk)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		tok  string
		want error
	}{
		{"tampered payload", parts[0] + "." + b64(strings.Replace(good, `"n":1`, `"n":2`, 1)) + "." + parts[2], ErrSignature},
		{"wrong signature", rawToken(hs, good, derived(secret2)), ErrSignature},
		{"signature of the raw secret", rawToken(hs, good, secret1), ErrSignature},
		{"truncated signature", valid[:len(valid)-4], ErrSignature},
		{"alg none", rawToken(`{"alg":"none","kid":"k1"}`, good, nil), ErrAlgorithm},
		{"alg none with a MAC", rawToken(`{"alg":"none","kid":"k1"}`, good, dk), ErrAlgorithm},
		{"alg HS384", hs384Tok, ErrAlgorithm},
		{"alg RS256 (real signature)", rs256, ErrAlgorithm},
		{"alg RS256 header, HMAC signature", rawToken(`{"alg":"RS256","kid":"k1"}`, good, dk), ErrAlgorithm},
		{"alg missing", rawToken(`{"kid":"k1"}`, good, dk), ErrAlgorithm},
		{"alg unknown", rawToken(`{"alg":"XS256","kid":"k1"}`, good, dk), ErrAlgorithm},
		{"unknown kid", rawToken(`{"alg":"HS256","kid":"k9"}`, good, dk), ErrUnknownKey},
		{"no kid", rawToken(`{"alg":"HS256"}`, good, dk), ErrUnknownKey},
		{"expired", rawToken(hs, claims("tts", keyA, t0.Add(-time.Minute), t0, 1), dk), ErrExpired},
		{"not yet valid", rawToken(hs, claims("tts", keyA, t0.Add(time.Second), t0.Add(61*time.Second), 1), dk), ErrNotYetValid},
		{"another policy", rawToken(hs, claims("other", keyA, t0, t0.Add(time.Minute), 1), dk), ErrPolicy},
		{"another client key", rawToken(hs, claims("tts", keyB, t0, t0.Add(time.Minute), 1), dk), ErrSubject},
		{"another window length", rawToken(hs, claims("tts", keyA, t0, t0.Add(time.Hour), 1), dk), ErrWindow},
		{"count zero", rawToken(hs, claims("tts", keyA, t0, t0.Add(time.Minute), 0), dk), ErrMalformed},
		{"oversized", rawToken(hs, good[:len(good)-1]+`,"x":"`+strings.Repeat("a", MaxTokenLength)+`"}`, dk), ErrTooLarge},
		{"non-base64", "!!!.###.$$$", ErrMalformed},
		{"non-base64 payload", parts[0] + ".*" + parts[1][1:] + "." + parts[2], ErrMalformed},
		{"empty", "", ErrNoToken},
		{"two segments", parts[0] + "." + parts[1], ErrMalformed},
		{"four segments", valid + ".x", ErrMalformed},
		{"not JSON", rawToken(hs, "n=1", dk), ErrMalformed},
		{"extra claim", rawToken(hs, good[:len(good)-1]+`,"admin":true}`, dk), ErrMalformed},
		{"duplicate claim", rawToken(hs, good[:len(good)-1]+`,"n":1}`, dk), ErrMalformed},
		{"missing exp", rawToken(hs, strings.Replace(good, `,"exp":`+itoa(t0.Add(time.Minute).Unix()), "", 1), dk), ErrMalformed},
		{"fractional n", rawToken(hs, strings.Replace(good, `"n":1`, `"n":1.5`, 1), dk), ErrMalformed},
		{"negative n", rawToken(hs, strings.Replace(good, `"n":1`, `"n":-1`, 1), dk), ErrMalformed},
		{"n as string", rawToken(hs, strings.Replace(good, `"n":1`, `"n":"1"`, 1), dk), ErrMalformed},
		{"aud as array", rawToken(hs, strings.Replace(good, `"aud":"tts"`, `"aud":["tts"]`, 1), dk), ErrMalformed},
		{"escaped sub", rawToken(hs, strings.Replace(good, keyA, `x4mrL0ZvN1cQ9bAqP7sT2\u0077`, 1), dk), ErrMalformed},
		{"huge exp", rawToken(hs, strings.Replace(good, itoa(t0.Add(time.Minute).Unix()), "99999999999999999999", 1), dk), ErrMalformed},
		{"bad jti", rawToken(hs, strings.Replace(good, id, "short", 1), dk), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.l.Verify(tc.tok, keyA); !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
			d := f.allow(t, keyA, tc.tok, "")
			if d.Allowed || challengeOf(d) == nil || tokenOf(d) != "" {
				t.Errorf("Allow = %+v, want a denial with a challenge, as for no token", d)
			}
		})
	}
	// Without proof of work, a rejected token is no token: a free window.
	free := newFixture(t, signedPolicy("tts", 10, time.Minute, 0), nil)
	for _, tc := range cases {
		if d := free.allow(t, keyA, tc.tok, ""); !d.Allowed || d.Remaining != 9 {
			t.Errorf("%s without proof of work: Allow = %+v, want a fresh window (9 remaining)", tc.name, d)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestStockJWTInterop: tokens are standard HS256 JWTs (with the derived
// key): stock golang-jwt verifies ours, and ours verifies stock ones.
func TestStockJWTInterop(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 10, time.Minute, 0), nil)
	tok := tokenOf(f.allow(t, keyA, "", ""))
	dk := derived(secret1)
	parsed, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return dk, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(func() time.Time { return t0 }), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatalf("stock golang-jwt rejects our token: %v", err)
	}
	mc := parsed.Claims.(jwt.MapClaims)
	if mc["aud"] != "tts" || mc["sub"] != keyA || mc["n"] != 1.0 || parsed.Header["kid"] != "k1" {
		t.Errorf("stock claims = %v, header %v", mc, parsed.Header)
	}
	stock := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"aud": "tts", "sub": keyA, "jti": mc["jti"], "nbf": t0.Unix(), "exp": t0.Add(time.Minute).Unix(), "n": 4,
	})
	stock.Header["kid"] = "k1"
	s, err := stock.SignedString(dk)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.l.Verify(s, keyA)
	if err != nil || c.Count != 4 {
		t.Errorf("Verify(stock token) = %+v, %v; want count 4", c, err)
	}
	// Same claims, our encoder: the same bytes but for the header's typ.
	var jti pow.ID
	base64.RawURLEncoding.Decode(jti[:], []byte(mc["jti"].(string)))
	if ours := f.keys.keys[0].sign("tts", keyA, jti, t0.Unix(), t0.Add(time.Minute).Unix(), 1); ours != tok {
		t.Errorf("re-signing the same claims gave %q, want %q", ours, tok)
	}
}

// TestSigningMethod: hs256 is a complete jwt.SigningMethod: stock
// golang-jwt signs with it and a ring key, and it refuses other key types.
func TestSigningMethod(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 10, time.Minute, 0), nil)
	k := f.keys.keys[0]
	tok := jwt.NewWithClaims(hs256{}, jwt.MapClaims{
		"aud": "tts", "sub": keyA, "jti": "AAAAAAAAAAAAAAAA", "nbf": t0.Unix(), "exp": t0.Add(time.Minute).Unix(), "n": 2,
	})
	tok.Header["kid"] = k.id
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := f.l.Verify(s, keyA); err != nil || c.Count != 2 {
		t.Errorf("Verify(token signed through jwt with hs256) = %+v, %v", c, err)
	}
	if _, err := (hs256{}).Sign("x", []byte("raw key")); !errors.Is(err, jwt.ErrInvalidKeyType) {
		t.Errorf("Sign with a []byte key = %v, want ErrInvalidKeyType", err)
	}
	if err := (hs256{}).Verify("x", nil, []byte("raw key")); !errors.Is(err, jwt.ErrInvalidKeyType) {
		t.Errorf("Verify with a []byte key = %v, want ErrInvalidKeyType", err)
	}
}
