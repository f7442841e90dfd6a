package pow

import "encoding/base64"

// b64 is the encoding of challenges and nonces: base64url without padding.
var b64 = base64.RawURLEncoding

// b64Rev maps a base64url character to its 6-bit value, or 0xff.
var b64Rev = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

// decodeB64 decodes the unpadded base64url string s into dst, which must be
// exactly the decoded length. It is strict: it rejects padding, other
// alphabets and non-zero trailing bits, so every value has one encoding. It
// works on a string without allocating.
func decodeB64(dst []byte, s string) bool {
	if b64.EncodedLen(len(dst)) != len(s) {
		return false
	}
	si, di := 0, 0
	for ; di+3 <= len(dst); si, di = si+4, di+3 {
		a, b, c, d := b64Rev[s[si]], b64Rev[s[si+1]], b64Rev[s[si+2]], b64Rev[s[si+3]]
		if a|b|c|d == 0xff {
			return false
		}
		v := uint32(a)<<18 | uint32(b)<<12 | uint32(c)<<6 | uint32(d)
		dst[di], dst[di+1], dst[di+2] = byte(v>>16), byte(v>>8), byte(v)
	}
	switch len(dst) - di {
	case 1:
		a, b := b64Rev[s[si]], b64Rev[s[si+1]]
		if a|b == 0xff || b&0x0f != 0 {
			return false
		}
		dst[di] = a<<2 | b>>4
	case 2:
		a, b, c := b64Rev[s[si]], b64Rev[s[si+1]], b64Rev[s[si+2]]
		if a|b|c == 0xff || c&0x03 != 0 {
			return false
		}
		dst[di], dst[di+1] = a<<2|b>>4, b<<4|c>>2
	}
	return true
}
