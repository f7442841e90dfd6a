//go:build unix

package pow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestPowJS checks pow.js (SHA-256, leading zero bits, challenge parsing and
// the solver) against vectors made here, by running
// testdata/pow_js.test.cjs with `node --test`.
func TestPowJS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found in PATH: pow.js is not tested (install Node.js 18 or later to run this test)")
	}
	type shaVec struct {
		Msg string `json:"msg"`
		Sum string `json:"sum"`
	}
	type zeroVec struct {
		Bytes string `json:"bytes"`
		Zeros int    `json:"zeros"`
	}
	type chVec struct {
		Challenge string `json:"challenge"`
		Bits      int    `json:"bits"`
		ExpiresMS int64  `json:"expiresMs"`
		Proof     string `json:"proof"`
	}
	type attemptVec struct {
		Challenge string `json:"challenge"`
		Hi        uint32 `json:"hi"`
		Lo        uint32 `json:"lo"`
		Zeros     int    `json:"zeros"`
	}
	var v struct {
		SHA256     []shaVec     `json:"sha256"`
		Zeros      []zeroVec    `json:"zeros"`
		Challenges []chVec      `json:"challenges"`
		Attempts   []attemptVec `json:"attempts"`
		Hard       string       `json:"hard"`
	}
	r := mrand.New(mrand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 3, 44, 55, 56, 63, 64, 65, 119, 120, 1000} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(r.Uint32())
		}
		if n == 3 {
			msg = []byte("abc")
		}
		sum := sha256.Sum256(msg)
		v.SHA256 = append(v.SHA256, shaVec{hex.EncodeToString(msg), hex.EncodeToString(sum[:])})
	}
	for _, b := range [][]byte{{}, {0x80}, {0x01}, {0, 0x40}, {0, 0, 0, 0, 0x10}, make([]byte, 32), {0xff, 0}} {
		v.Zeros = append(v.Zeros, zeroVec{hex.EncodeToString(b), LeadingZeroBits(b)})
	}
	for bits := 1; bits <= 12; bits++ {
		c := newTest(t, bits)
		ch := c.IssueAt(t0.Add(time.Duration(bits)*time.Hour), keyA, policy)
		proof, err := (&Solver{Workers: 2}).Solve(context.Background(), ch.Value)
		if err != nil {
			t.Fatal(err)
		}
		v.Challenges = append(v.Challenges, chVec{ch.Value, bits, ch.Expires.UnixMilli(), proof})
		for range 8 {
			hi, lo := r.Uint32(), r.Uint32()
			v.Attempts = append(v.Attempts, attemptVec{ch.Value, hi, lo, zeros(ch.Value, uint64(hi)<<32|uint64(lo))})
		}
	}
	v.Hard = newTest(t, 32).IssueAt(t0, keyA, policy).Value

	dir := t.TempDir()
	file := filepath.Join(dir, "vectors.json")
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", filepath.Join("testdata", "pow_js.test.cjs"))
	cmd.Env = append(os.Environ(), "EDGELIMIT_POW_VECTORS="+file)
	// node --test runs the file in a child process: on timeout, kill the
	// whole process group, not only node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test testdata/pow_js.test.cjs: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}
