package keyhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// TestSipHashVectors checks the SipHash-2-4-128 core against the reference
// implementation's vectors (key 00..0f, message 00..len-1).
func TestSipHashVectors(t *testing.T) {
	key := make([]byte, 16)
	msg := make([]byte, 64)
	for i := range key {
		key[i] = byte(i)
	}
	for i := range msg {
		msg[i] = byte(i)
	}
	l := newSip(key)
	for _, tt := range []struct {
		n    int
		want string
	}{
		{0, "a3817f04ba25a8e66df67214c7550293"},
		{1, "da87c1d86b99af44347659119b22fc45"},
		{7, "a1f1ebbed8dbc153c0b84aa61ff08239"},
		{8, "3b62a9ba6258f5610f83e264f31497b4"},
		{15, "5493e99933b0a8117e08ec0f97cfc3d9"},
		{16, "6ee2a4ca67b054bbfd3315bf85230577"},
		{63, "5150d1772f50834a503e069a973fbd7c"},
	} {
		// Whole, and fed in pieces through both writers.
		s := newSipState(l.k0, l.k1)
		s.write(msg[:tt.n])
		if got := s.sum128(); hex.EncodeToString(got[:]) != tt.want {
			t.Errorf("SipHash-2-4-128(%d bytes) = %x, want %s", tt.n, got, tt.want)
		}
		if got := sum128(l.k0, l.k1, msg[:tt.n]); hex.EncodeToString(got[:]) != tt.want {
			t.Errorf("sum128(%d bytes) = %x, want %s", tt.n, got, tt.want)
		}
		s = newSipState(l.k0, l.k1)
		cut := tt.n / 3
		s.writeString(string(msg[:cut]))
		s.write(msg[cut : 2*cut])
		for _, c := range msg[2*cut : tt.n] {
			s.writeByte(c)
		}
		if got := s.sum128(); hex.EncodeToString(got[:]) != tt.want {
			t.Errorf("SipHash-2-4-128(%d bytes, in pieces) = %x, want %s", tt.n, got, tt.want)
		}
	}
}

var testKey = []byte(strings.Repeat("k", 32))

// TestLocalHash pins the in-process hash: SipHash-2-4-128 over policy, a
// zero byte and the raw key, keyed by HMAC-SHA256(secret, label)[:16],
// base64url.
func TestLocalHash(t *testing.T) {
	l, err := NewLocal(testKey)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte(localLabel))
	ref := newSip(m.Sum(nil)[:16])
	for _, tt := range []struct{ pol, raw string }{{"paid", "h:key-1"}, {"", ""}, {"p", strings.Repeat("x", 5000)}} {
		s := newSipState(ref.k0, ref.k1)
		s.write([]byte(tt.pol + "\x00" + tt.raw))
		sum := s.sum128()
		want := base64.RawURLEncoding.EncodeToString(sum[:])
		if got := l.Hash(tt.pol, []byte(tt.raw)); got != want || len(got) != Length {
			t.Errorf("Local.Hash(%q, %.20q) = %q, want %q", tt.pol, tt.raw, got, want)
		}
		h, _ := New(testKey)
		if h.Hash(tt.pol, []byte(tt.raw)) == want {
			t.Errorf("Local.Hash(%q, %.20q) equals the HMAC form", tt.pol, tt.raw)
		}
	}
	if _, err := NewLocal(testKey[:31]); err == nil {
		t.Error("NewLocal accepted a 31-byte secret")
	}
}

// TestAppendIsHash: Append writes what Hash returns, after dst.
func TestAppendIsHash(t *testing.T) {
	h, _ := New(testKey)
	l, _ := NewLocal(testKey)
	for _, raw := range []string{"h:a", "i:10.0.0.1/32", strings.Repeat("y", 100)} {
		if got := string(h.Append([]byte("x"), "p", []byte(raw))); got != "x"+h.Hash("p", []byte(raw)) {
			t.Errorf("Hasher.Append = %q", got)
		}
		if got := string(l.Append([]byte("x"), "p", []byte(raw))); got != "x"+l.Hash("p", []byte(raw)) {
			t.Errorf("Local.Append = %q", got)
		}
	}
}

func BenchmarkHash(b *testing.B) {
	h, _ := New(testKey)
	l, _ := NewLocal(testKey)
	raw := []byte("h:ak_0123456789abcdef0123456789abcdef")
	var buf [Length]byte
	b.Run("hmac", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.Append(buf[:0], "bench", raw)
		}
	})
	b.Run("siphash", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Append(buf[:0], "bench", raw)
		}
	})
}
