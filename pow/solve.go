package pow

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// solveBatch is how many nonces a solver worker takes at a time; between
// batches it checks for cancellation.
const solveBatch = 1 << 12

// Solver finds proofs for challenges. The zero value uses every core.
type Solver struct {
	// Workers is the number of goroutines hashing; default
	// runtime.GOMAXPROCS(0).
	Workers int
	// MaxBits refuses challenges harder than this with ErrTooHard; default
	// MaxBits (32). A client may lower it to bound the work a server can
	// make it do.
	MaxBits int
	// Progress, if set, is called with the number of hashes computed so far,
	// about every 65536 hashes. Calls are serialised.
	Progress func(tries uint64)
}

// Solve finds a proof for challenge using every core; see Solver.Solve.
func Solve(ctx context.Context, challenge string) (string, error) {
	var s Solver
	return s.Solve(ctx, challenge)
}

// Solve returns a proof for challenge: challenge + "." + the base64url
// big-endian 8-byte nonce such that SHA-256(challenge bytes ‖ nonce) has at
// least the challenge's bits of leading zeros. The nonce is the smallest
// such one, so the result does not depend on the number of workers. It
// returns ctx's error if ctx ends first. It does not check the expiry: only
// the server's clock decides that.
func (s *Solver) Solve(ctx context.Context, challenge string) (string, error) {
	nonce, err := s.solve(ctx, challenge)
	if err != nil {
		return "", err
	}
	return proofString(challenge, nonce), nil
}

func proofString(challenge string, nonce uint64) string {
	var n [nonceSize]byte
	binary.BigEndian.PutUint64(n[:], nonce)
	buf := make([]byte, 0, ProofLength)
	buf = append(buf, challenge...)
	buf = append(buf, '.')
	return string(b64.AppendEncode(buf, n[:]))
}

func (s *Solver) solve(ctx context.Context, challenge string) (uint64, error) {
	var msg [workSize]byte
	if len(challenge) != ChallengeLength || !decodeB64(msg[:rawSize], challenge) {
		return 0, ErrMalformed
	}
	if msg[0] != Version {
		return 0, ErrVersion
	}
	bits := int(msg[1])
	maxBits := s.MaxBits
	if maxBits <= 0 || maxBits > MaxBits {
		maxBits = MaxBits
	}
	if bits > maxBits {
		return 0, ErrTooHard
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	workers := s.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		next     atomic.Uint64 // next batch to hand out
		best     atomic.Uint64 // smallest solution found
		tries    atomic.Uint64
		progress sync.Mutex
		wg       sync.WaitGroup
	)
	best.Store(math.MaxUint64)
	done := ctx.Done()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msg
			for {
				select {
				case <-done:
					return
				default:
				}
				b := next.Add(1) - 1
				start := b * solveBatch
				if start > best.Load() {
					return
				}
				for n := start; n < start+solveBatch; n++ {
					binary.BigEndian.PutUint64(m[rawSize:], n)
					sum := sha256.Sum256(m[:])
					if LeadingZeroBits(sum[:]) >= bits {
						for cur := best.Load(); n < cur && !best.CompareAndSwap(cur, n); cur = best.Load() {
						}
						break
					}
				}
				t := tries.Add(solveBatch)
				if s.Progress != nil && t%(16*solveBatch) == 0 {
					progress.Lock()
					s.Progress(t)
					progress.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if n := best.Load(); n != math.MaxUint64 {
		return n, nil
	}
	return 0, ctx.Err()
}
