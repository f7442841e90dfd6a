package pow_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/edgelimit/edgelimit/pow"
)

func ExampleChallenger() {
	t0 := time.Unix(1_700_000_000, 0)
	c, err := pow.New(pow.Config{
		Secrets: [][]byte{[]byte("example secret of at least 32 bytes!")},
		Bits:    8,
		Rand:    mrand.NewChaCha8([32]byte{}), // deterministic salts for the example (not safe for concurrent use)
	})
	if err != nil {
		panic(err)
	}
	const key, policy = "x4mrL0ZvN1cQ9bAqP7sT2w", "tts" // key: the engine's hashed client key

	// The server answers 429 with a challenge ...
	ch := c.IssueAt(t0, key, policy)
	fmt.Println("challenge:", ch.Value, ch.Bits, "bits, expires", ch.Expires.Format(time.RFC3339))

	// ... the client solves it ...
	proof, err := pow.Solve(context.Background(), ch.Value)
	if err != nil {
		panic(err)
	}
	fmt.Println("proof:", proof)

	// ... and the server redeems it once.
	_, err = c.RedeemAt(t0.Add(time.Second), proof, key, policy)
	fmt.Println("first redeem:", err)
	_, err = c.RedeemAt(t0.Add(2*time.Second), proof, key, policy)
	fmt.Println("replayed:", errors.Is(err, pow.ErrReplayed))
	_, err = c.VerifyAt(t0.Add(time.Second), proof, "another-client", policy)
	fmt.Println("another client:", errors.Is(err, pow.ErrSignature))
	// Output:
	// challenge: AQgBi8_ljxDZh37ObTaKrBpvQZ4zuqlxkip3LJbI4BY2GpdB 8 bits, expires 2023-11-14T22:13:30Z
	// proof: AQgBi8_ljxDZh37ObTaKrBpvQZ4zuqlxkip3LJbI4BY2GpdB.AAAAAAAAAiw
	// first redeem: <nil>
	// replayed: true
	// another client: true
}

func ExampleParseChallenge() {
	st, err := pow.ParseChallenge("AQgBi8_ljxDZh37ObTaKrBpvQZ4zuqlxkip3LJbI4BY2GpdB")
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Bits, "bits, about", pow.ExpectedTries(st.Bits), "hashes; expires", st.Expires.Format(time.RFC3339))
	// Output: 8 bits, about 256 hashes; expires 2023-11-14T22:13:30Z
}

func ExampleSolver() {
	s := pow.Solver{Workers: 2, MaxBits: 20} // refuse challenges above 20 bits
	_, err := s.Solve(context.Background(), "ASABi8_ljxDZh37ObTaKrBpvQZ4zuqlxkip3LJbI4BY2GpdB")
	fmt.Println(err)
	// Output: pow: challenge is harder than the solver's limit
}
