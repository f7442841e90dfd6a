// Package client is the reference Go client of edgelimit's signed-window
// protocol: an http.RoundTripper that keeps window tokens, answers
// proof-of-work challenges and honours Retry-After, so that callers see only
// final responses.
//
//	tr := &client.Transport{}        // every field optional
//	resp, err := tr.Client().Get(url)
//
// Transport keeps each response's Edgelimit-Token in a Jar (per origin, per
// policy) and sends the origin's tokens back. On a 429 with
// Edgelimit-Challenge it solves the challenge with pow.Solver (every core,
// at most MaxBits, cancelled with the request's context) and retries with
// Edgelimit-Proof; on a 429 without one it waits for Retry-After (at most
// MaxWait; NoWait returns the 429 at once) and retries. Retries are bounded
// by MaxRetries. Observe reports each step (challenge, solved, wait, token,
// give-up) for verbose output.
//
// Against a policy with proof_of_work, a client of this package spends
// exactly limit requests per window per proof: it solves one challenge, then
// sends the token of each response with the next request until the window is
// spent or expires (tested against the engine over real HTTP).
//
// `edgelimit get URL` is a thin wrapper over Transport, and `edgelimit solve
// CHALLENGE` over pow.Solve.
package client
