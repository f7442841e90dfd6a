package keyhash

import "math/bits"

// SipHash-2-4 with a 128-bit output (Aumasson and Bernstein, "SipHash: a
// fast short-input PRF", 2012, and the reference implementation's
// 128-bit variant), streaming so that a key is hashed where it lies.

type sipState struct {
	v0, v1, v2, v3 uint64
	tail           uint64 // the bytes of an unfinished word, little-endian
	ntail          uint   // how many, 0..7
	length         uint64
}

func newSipState(k0, k1 uint64) sipState {
	return sipState{
		v0: k0 ^ 0x736f6d6570736575,
		v1: k1 ^ 0x646f72616e646f6d ^ 0xee, // 0xee: the 128-bit output
		v2: k0 ^ 0x6c7967656e657261,
		v3: k1 ^ 0x7465646279746573,
	}
}

func (s *sipState) round() {
	s.v0 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 13)
	s.v1 ^= s.v0
	s.v0 = bits.RotateLeft64(s.v0, 32)
	s.v2 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 16)
	s.v3 ^= s.v2
	s.v0 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 21)
	s.v3 ^= s.v0
	s.v2 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 17)
	s.v1 ^= s.v2
	s.v2 = bits.RotateLeft64(s.v2, 32)
}

// compress absorbs one 64-bit word with the two c-rounds.
func (s *sipState) compress(m uint64) {
	s.v3 ^= m
	s.round()
	s.round()
	s.v0 ^= m
}

func (s *sipState) writeByte(c byte) {
	s.length++
	s.tail |= uint64(c) << (8 * s.ntail)
	if s.ntail++; s.ntail == 8 {
		s.compress(s.tail)
		s.tail, s.ntail = 0, 0
	}
}

func (s *sipState) write(p []byte) {
	for len(p) > 0 && s.ntail != 0 {
		s.writeByte(p[0])
		p = p[1:]
	}
	for len(p) >= 8 {
		s.compress(le64(p))
		s.length += 8
		p = p[8:]
	}
	if s.ntail == 0 {
		// The last, partial word in one go.
		var t uint64
		for i := len(p) - 1; i >= 0; i-- {
			t = t<<8 | uint64(p[i])
		}
		s.tail, s.ntail = t, uint(len(p))
		s.length += uint64(len(p))
		return
	}
	for _, c := range p {
		s.writeByte(c)
	}
}

func (s *sipState) writeString(p string) {
	for len(p) > 0 && s.ntail != 0 {
		s.writeByte(p[0])
		p = p[1:]
	}
	for len(p) >= 8 {
		s.compress(uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
			uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56)
		s.length += 8
		p = p[8:]
	}
	for i := 0; i < len(p); i++ {
		s.writeByte(p[i])
	}
}

// sum128 finishes the hash: the last word carries the length's low byte,
// then four d-rounds give each half of the output.
func (s *sipState) sum128() [16]byte {
	s.compress(s.tail | s.length<<56)
	s.v2 ^= 0xee
	for range 4 {
		s.round()
	}
	lo := s.v0 ^ s.v1 ^ s.v2 ^ s.v3
	s.v1 ^= 0xdd
	for range 4 {
		s.round()
	}
	hi := s.v0 ^ s.v1 ^ s.v2 ^ s.v3
	var out [16]byte
	put64(out[0:8], lo)
	put64(out[8:16], hi)
	return out
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func put64(b []byte, v uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
}

// sum128 is SipHash-2-4-128 of p in one pass, its state in locals (the
// compiler keeps them in registers): the common case of a short key,
// several times faster than the streaming state.
func sum128(k0, k1 uint64, p []byte) [16]byte {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d ^ 0xee
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(p)
	for ; len(p) >= 8; p = p[8:] {
		m := le64(p)
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
	}
	m := uint64(n) << 56
	for i := len(p) - 1; i >= 0; i-- {
		m |= uint64(p[i]) << (8 * uint(i))
	}
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xee
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	lo := v0 ^ v1 ^ v2 ^ v3
	v1 ^= 0xdd
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	hi := v0 ^ v1 ^ v2 ^ v3
	var out [16]byte
	put64(out[0:8], lo)
	put64(out[8:16], hi)
	return out
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13) ^ v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16) ^ v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21) ^ v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17) ^ v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
