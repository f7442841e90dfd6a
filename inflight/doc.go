// Package inflight limits how many requests of one client run at once: at
// most limit of a key hold a slot, however many Lambda instances and
// goroutines ask, and a request is refused only when that many hold one.
// It is the `strategy: inflight` of a policy file, for endpoints whose cost
// is the work they do while they run (speech, images, AI calls: "at most 2
// jobs per user"), next to the quotas of durable and kv that count how many
// start.
//
//	policies:
//	  - name: speech-concurrency
//	    routes: ["POST /tts"]
//	    key: header:X-Api-Key
//	    strategy: inflight
//	    limit: 2          # requests of one key running at once
//	    window: 15m       # the lease: no shorter than the function's timeout
//	    retry_after: 2s   # optional: what a refused client is told to wait (default 1s)
//
// # The model
//
// A slot is taken before the handler runs (Allow) and released after it
// returns (Finish, which the engine calls from Verdict.Finish for every
// admitted request, whatever its status: the middleware calls it after a
// 5xx and after a panic too). When another policy of the route denies the
// request, the engine refunds, and Refund releases the slot the same way.
// Each admitted Decision's Receipt names its slot (Receipt.ID, 16 random
// bytes) and when its lease ends (Receipt.Slot, Unix nanoseconds), so a
// release removes exactly that holder: releasing twice, or after the slot
// was reclaimed, changes nothing.
//
// A holder that never releases (its instance died mid-request, was frozen
// and never thawed, or its release failed) holds its slot until its lease
// ends: the policy's window after the take. From that instant on the slot is
// free, and the next take reclaims it. That is the whole cost of a crash: a
// slot, for at most one lease.
//
// # The lease rule
//
// The window must be no shorter than the timeout of the function the
// policy guards (its Timeout in template.yaml; at most 15 min on Lambda).
// API Gateway gives up on a request after its own integration timeout
// (about 30 s), but the function runs on until its Timeout, and so must
// its slot. A lease
// that ends while its request still runs frees its slot early: the next
// take is admitted, and one more request runs than the limit allows. With a
// lease at least the timeout, a request either releases its slot or is dead
// by the time its lease ends. A longer lease only makes a crashed holder's
// slot come back later. The policy file refuses a window under MinLease (1
// s, Lambda's shortest timeout); nothing can check the function's own
// timeout, so set it.
//
// Leases are measured by the clock of the instance that asks (see the
// clock skew note in package inflight/dynamostore). A Limiter with its own
// Config.Now decides by it; otherwise by the engine's instant for the
// request (Request.At), or time.Now.
//
// # What a decision says
//
// Limit is the limit and Window the lease: RateLimit-Policy says
// `"speech";q=2;w=900`. Remaining is the number of free slots after this
// request (after the take, for an admission; now, for a peek or a denial).
//
// Reset (draft-11's t) and a denial's RetryAfter are the same value: the
// retry hint (Options.RetryAfter, retry_after in the file, default 1 s), or
// the time until the earliest lease among the key's live holders ends, if
// that is sooner. A concurrency limit has no refill schedule: a slot comes
// back whenever a holder finishes, which nothing can tell in advance, so
// there is no honest "t within which no more than r": the earliest lease's
// end is the one true upper bound of when a slot is free again, but it is a
// function timeout away (minutes) while jobs typically finish in seconds.
// Telling clients to wait that long would idle the endpoint; telling them
// to retry in a second costs one cheap denied take per retry, at most one
// per second per waiting client. The hint is capped by the earliest lease
// because by then a slot is free for certain (RetryAfter is never shorter
// than Reset, as the contract requires, and never longer than a guaranteed
// slot).
//
// A request holds its cost in slots ("at most 8 GPU-seconds running":
// limit 8, and a request of a 3-second job holds 3): the policy's `cost`,
// or what the application set for the request with
// edgelimit.WithReservation before the middleware decides. The take is one
// atomic write, all the units or none, and the release gives them all back
// together; a crashed holder's units come back together when its lease
// ends. A cost above the limit is refused by the policy file; a request of
// more units than the limit in force (an override, a reservation) is
// denied (429, RetryAfter the lease), since no release can make it fit.
// The policy file refuses `charge`, `charge_status`, `refund_status` (a
// slot is given back after every response, whatever its status) and
// `on_store_error: local` (a slot taken from an in-process twin while the
// store fails would never be released).
// Tiers and per-key overrides may set the limit (at most MaxLimit) and the
// lease. A limit of 0 refuses everything without a store call.
//
// # Stores
//
// A Limiter keeps its slots in a Store: a Memory store in the process (exact
// for one process; the default of `edgelimit serve`), or the DynamoDB
// store of package inflight/dynamostore, shared by every instance through
// the project's one table, item "if#<policy>#<keyhash>". The key is the
// engine's keyed hash, never the raw client key. The conformance suite of
// concurrency limits, limitertest.RunInFlight (and RunInFlightEngine,
// through the engine and the net/http middleware), holds both to the same
// semantics, at fixed instants and with 64 clients at once; that suite is
// what backs the claims above:
//
//   - at no instant do the requests of a key hold more than limit slots (a
//     counter raised by each admission's units and lowered before its
//     release never exceeds the limit, 64 goroutines taking and releasing
//     on memory, dynalite and moto, with costs 1 and mixed costs 1, 2, 3);
//   - no spurious denial: every round of 64 simultaneous takes admits
//     exactly the free slots, whether they were never taken, released, or
//     freed by their leases' end (reclaimed by contending takes);
//   - a holder process killed with SIGKILL holds its slot until its lease
//     ends, to the nanosecond, and not after (TestCrashedHolder).
//
// On DynamoDB a take is one conditional UpdateItem in the common case, a
// release one UpdateItem, a peek one consistent GetItem; a take that
// reclaims expired holders costs one more write (the details are in
// package inflight/dynamostore and docs/inflight.md).
//
// # Failures
//
// An error from Allow is a store failure: the engine applies the policy's
// on_store_error, deny (503) by default, for a limit that protects
// something that cannot take more; allow admits without a slot. A take
// whose write failed without a definite answer may still have landed; the
// DynamoDB store then releases the holder it tried to add (at most
// CleanupTimeout), and if that fails too, the lease bounds it. A release
// ignores its context's cancellation but keeps its deadline, so a client
// that disconnected mid-request still gives its slot back; a release that
// fails (the store is down) leaves the slot held until its lease ends, and
// is logged by the engine.
package inflight
