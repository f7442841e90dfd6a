/*! edgelimit pow.js — solves Edgelimit-Challenge proof-of-work challenges.
 *
 * No dependencies. In a page:
 *
 *   <script src="/pow.js"></script>
 *   const ac = new AbortController();
 *   const proof = await EdgelimitPow.solve(challenge, {
 *     signal: ac.signal,                           // cancel with ac.abort()
 *     onProgress: (p) => bar.value = p.fraction,   // {tries, expected, fraction}
 *   });
 *   fetch(url, {method: "POST", headers: {"Edgelimit-Proof": proof}});
 *
 * Hashing runs in Web Workers started from this same script (one per core,
 * at most 8), or in small slices on the calling thread where workers are
 * unavailable. In Node, require() returns the same API.
 *
 * Format (version 1): a challenge is 48 base64url characters encoding 36
 * bytes — version (1), bits (1), expiry in Unix milliseconds (6, big-endian),
 * salt (12), MAC (16). A proof is challenge + "." + the base64url encoding of
 * an 8-byte big-endian nonce such that SHA-256(the 36 challenge bytes ‖ the
 * 8 nonce bytes) starts with at least `bits` zero bits. That message is 44
 * bytes, one SHA-256 block, so this file carries its own small SHA-256.
 */
(function (root) {
  "use strict";

  var VERSION = 1;
  var MAX_BITS = 32;
  var RAW_SIZE = 36;
  var CHALLENGE_LENGTH = 48;
  var PROGRESS_EVERY = 65536;

  var K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
  ]);
  var IV = new Int32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
  ]);

  // schedule fills w[16..63] from w[0..15].
  function schedule(w) {
    for (var i = 16; i < 64; i++) {
      var x = w[i - 15], y = w[i - 2];
      var s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      var s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
  }

  // rounds runs SHA-256 rounds from..63 on the working state s (8 words,
  // a..h) with the schedule w.
  function rounds(s, w, from) {
    var a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (var i = from; i < 64; i++) {
      var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      var t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      var t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    s[0] = a; s[1] = b; s[2] = c; s[3] = d; s[4] = e; s[5] = f; s[6] = g; s[7] = h;
  }

  // sha256 returns the SHA-256 digest of bytes (a Uint8Array) as a Uint8Array.
  function sha256(bytes) {
    var n = bytes.length;
    var total = ((n + 9 + 63) >>> 6) << 6;
    var m = new Uint8Array(total);
    m.set(bytes);
    m[n] = 0x80;
    var bitsHi = Math.floor(n / 0x20000000), bitsLo = (n << 3) >>> 0;
    m[total - 8] = bitsHi >>> 24; m[total - 7] = bitsHi >>> 16; m[total - 6] = bitsHi >>> 8; m[total - 5] = bitsHi;
    m[total - 4] = bitsLo >>> 24; m[total - 3] = bitsLo >>> 16; m[total - 2] = bitsLo >>> 8; m[total - 1] = bitsLo;
    var H = new Int32Array(IV), w = new Int32Array(64), s = new Int32Array(8), i, j;
    for (var off = 0; off < total; off += 64) {
      for (i = 0; i < 16; i++) {
        j = off + 4 * i;
        w[i] = (m[j] << 24) | (m[j + 1] << 16) | (m[j + 2] << 8) | m[j + 3];
      }
      schedule(w);
      s.set(H);
      rounds(s, w, 0);
      for (i = 0; i < 8; i++) H[i] = (H[i] + s[i]) | 0;
    }
    var out = new Uint8Array(32);
    for (i = 0; i < 8; i++) {
      out[4 * i] = H[i] >>> 24; out[4 * i + 1] = H[i] >>> 16; out[4 * i + 2] = H[i] >>> 8; out[4 * i + 3] = H[i];
    }
    return out;
  }

  // leadingZeroBits counts the leading zero bits of a byte array.
  function leadingZeroBits(bytes) {
    var n = 0;
    for (var i = 0; i < bytes.length; i++) {
      if (bytes[i] !== 0) return n + Math.clz32(bytes[i]) - 24;
      n += 8;
    }
    return n;
  }

  var ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

  // decodeBase64url decodes unpadded base64url, or returns null.
  function decodeBase64url(str) {
    if (typeof str !== "string" || str.length % 4 === 1) return null;
    var out = new Uint8Array(Math.floor(str.length * 3 / 4)), acc = 0, nbits = 0, o = 0;
    for (var i = 0; i < str.length; i++) {
      var v = ALPHABET.indexOf(str.charAt(i));
      if (v < 0) return null;
      acc = ((acc << 6) | v) & 0xffffff;
      nbits += 6;
      if (nbits >= 8) {
        nbits -= 8;
        out[o++] = (acc >>> nbits) & 0xff;
      }
    }
    return out;
  }

  // encodeBase64url encodes bytes as unpadded base64url.
  function encodeBase64url(bytes) {
    var s = "", acc = 0, nbits = 0;
    for (var i = 0; i < bytes.length; i++) {
      acc = ((acc << 8) | bytes[i]) & 0xffffff;
      nbits += 8;
      while (nbits >= 6) {
        nbits -= 6;
        s += ALPHABET.charAt((acc >>> nbits) & 63);
      }
    }
    if (nbits > 0) s += ALPHABET.charAt((acc << (6 - nbits)) & 63);
    return s;
  }

  // parseChallenge reads what a client can know of a challenge: version,
  // bits, expiry (a Date) and its 36 raw bytes. It throws on a bad challenge.
  function parseChallenge(challenge) {
    var raw = typeof challenge === "string" && challenge.length === CHALLENGE_LENGTH ? decodeBase64url(challenge) : null;
    if (!raw || raw.length !== RAW_SIZE) throw new Error("edgelimit pow: malformed challenge");
    if (raw[0] !== VERSION) throw new Error("edgelimit pow: unsupported challenge version " + raw[0]);
    var bits = raw[1];
    if (bits < 1 || bits > MAX_BITS) throw new Error("edgelimit pow: challenge bits " + bits + " out of range");
    var ms = (raw[2] * 0x10000 + raw[3] * 0x100 + raw[4]) * 0x1000000 + raw[5] * 0x10000 + raw[6] * 0x100 + raw[7];
    return { challenge: challenge, version: raw[0], bits: bits, expires: new Date(ms), raw: raw };
  }

  // Attempt hashes challenge ‖ nonce fast: the message is one block whose
  // first 9 words never change, so the first 9 rounds are done once.
  function Attempt(raw) {
    this.w = new Int32Array(64);
    this.s = new Int32Array(8);
    this.mid = new Int32Array(8);
    this.w0 = new Int32Array(16);
    for (var i = 0; i < 9; i++) {
      this.w0[i] = (raw[4 * i] << 24) | (raw[4 * i + 1] << 16) | (raw[4 * i + 2] << 8) | raw[4 * i + 3];
    }
    this.w0[11] = 0x80000000 | 0; // padding after 44 bytes
    this.w0[15] = 44 * 8; // message length in bits
    var s = new Int32Array(IV), w = this.w0;
    // rounds 0..8 depend on w[0..8] only
    var a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (i = 0; i < 9; i++) {
      var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      var t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      var t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    this.mid[0] = a; this.mid[1] = b; this.mid[2] = c; this.mid[3] = d;
    this.mid[4] = e; this.mid[5] = f; this.mid[6] = g; this.mid[7] = h;
  }

  // zeros returns the number of leading zero bits of SHA-256(raw ‖ hi ‖ lo),
  // where hi and lo are the nonce's big-endian 32-bit halves.
  Attempt.prototype.zeros = function (hi, lo) {
    var w = this.w, s = this.s;
    w.set(this.w0);
    w[9] = hi;
    w[10] = lo;
    schedule(w);
    s.set(this.mid);
    rounds(s, w, 9);
    var n = 0;
    for (var i = 0; i < 8; i++) {
      var z = Math.clz32((IV[i] + s[i]) | 0);
      n += z;
      if (z < 32) break;
    }
    return n;
  };

  function nonceBytes(hi, lo) {
    return new Uint8Array([hi >>> 24, hi >>> 16, hi >>> 8, hi, lo >>> 24, lo >>> 16, lo >>> 8, lo]);
  }

  // proofFor returns the proof string for a nonce given as 32-bit halves.
  function proofFor(challenge, hi, lo) {
    return challenge + "." + encodeBase64url(nonceBytes(hi >>> 0, lo >>> 0));
  }

  // search tries nonces (hi, lo), (hi, lo+1), ... at most `count` of them,
  // moving hi by `step` when lo wraps. It returns {found, hi, lo, tries}.
  function search(attempt, bits, hi, lo, step, count) {
    for (var t = 0; t < count; t++) {
      if (attempt.zeros(hi | 0, lo | 0) >= bits) return { found: true, hi: hi, lo: lo, tries: t + 1 };
      lo = (lo + 1) >>> 0;
      if (lo === 0) hi = (hi + step) >>> 0;
    }
    return { found: false, hi: hi, lo: lo, tries: count };
  }

  // solveSync solves on the calling thread, starting at nonce 0 unless
  // opts.hi/opts.lo say otherwise, and returns the proof, or null after
  // opts.maxTries (default unlimited) hashes. From nonce 0 it finds the
  // smallest nonce, as the Go solver does.
  function solveSync(challenge, opts) {
    opts = opts || {};
    var c = parseChallenge(challenge);
    var at = new Attempt(c.raw);
    var max = opts.maxTries || Infinity, hi = opts.hi >>> 0 || 0, lo = opts.lo >>> 0 || 0, done = 0;
    while (done < max) {
      var r = search(at, c.bits, hi, lo, 1, Math.min(PROGRESS_EVERY, max - done));
      done += r.tries;
      if (r.found) return proofFor(challenge, r.hi, r.lo);
      hi = r.hi; lo = r.lo;
    }
    return null;
  }

  function abortError() {
    if (typeof DOMException === "function") return new DOMException("proof of work cancelled", "AbortError");
    var e = new Error("proof of work cancelled");
    e.name = "AbortError";
    return e;
  }

  function progressInfo(tries, bits) {
    var expected = Math.pow(2, bits);
    return { tries: tries, expected: expected, fraction: 1 - Math.exp(-tries / expected) };
  }

  // The URL this script was loaded from, to start workers running it.
  var scriptURL = typeof document !== "undefined" && document.currentScript && document.currentScript.src || "";

  // solve resolves to a proof for challenge. opts: workers (default: cores,
  // at most 8), onProgress({tries, expected, fraction}), signal (an
  // AbortSignal; aborting rejects with an AbortError and stops all hashing),
  // scriptURL (where to load workers from; default this script's URL).
  function solve(challenge, opts) {
    opts = opts || {};
    return new Promise(function (resolve, reject) {
      var c;
      try {
        c = parseChallenge(challenge);
      } catch (e) {
        reject(e);
        return;
      }
      var signal = opts.signal, onProgress = opts.onProgress, tries = 0, finished = false, workers = [], onAbort;
      function report(n) {
        tries += n;
        if (onProgress) {
          try { onProgress(progressInfo(tries, c.bits)); } catch (e) { /* a UI error must not stop the work */ }
        }
      }
      function finish(err, proof) {
        if (finished) return;
        finished = true;
        for (var i = 0; i < workers.length; i++) workers[i].terminate();
        if (signal && onAbort) signal.removeEventListener("abort", onAbort);
        if (err) reject(err); else resolve(proof);
      }
      if (signal) {
        if (signal.aborted) { finish(abortError()); return; }
        onAbort = function () { finish(abortError()); };
        signal.addEventListener("abort", onAbort);
      }
      // inline hashes in slices on this thread, yielding between them: where
      // workers are unavailable, or when they fail (a CSP may block them).
      function inline() {
        for (var i = 0; i < workers.length; i++) workers[i].terminate();
        workers = [];
        var at = new Attempt(c.raw), hi = 0, lo = 0;
        (function slice() {
          if (finished) return;
          var r = search(at, c.bits, hi, lo, 1, 16384);
          report(r.tries);
          if (r.found) { finish(null, proofFor(challenge, r.hi, r.lo)); return; }
          hi = r.hi; lo = r.lo;
          setTimeout(slice, 0);
        })();
      }
      var url = opts.scriptURL || scriptURL;
      var n = opts.workers || Math.min((typeof navigator !== "undefined" && navigator.hardwareConcurrency) || 2, 8);
      if (typeof Worker !== "function" || !url) {
        inline();
        return;
      }
      var failed = false;
      function onWorkerError(ev) {
        if (ev && ev.preventDefault) ev.preventDefault();
        if (failed || finished) return;
        failed = true;
        inline();
      }
      try {
        for (var i = 0; i < n; i++) {
          var wk = new Worker(url);
          wk.onmessage = function (ev) {
            var m = ev.data;
            if (failed) return;
            if (m && m.type === "progress") report(m.tries);
            else if (m && m.type === "found") { report(m.tries); finish(null, proofFor(challenge, m.hi, m.lo)); }
          };
          wk.onerror = onWorkerError;
          workers.push(wk);
          wk.postMessage({ type: "solve", challenge: challenge, hi: i, step: n });
        }
      } catch (e) {
        failed = true;
        inline();
      }
    });
  }

  var api = {
    version: VERSION,
    maxBits: MAX_BITS,
    parseChallenge: parseChallenge,
    solve: solve,
    solveSync: solveSync,
    proofFor: proofFor,
    sha256: sha256,
    leadingZeroBits: leadingZeroBits,
    decodeBase64url: decodeBase64url,
    encodeBase64url: encodeBase64url,
    expectedTries: function (bits) { return Math.pow(2, bits); },
    Attempt: Attempt
  };

  var isWorker = typeof WorkerGlobalScope !== "undefined" && typeof self !== "undefined" && self instanceof WorkerGlobalScope;
  if (isWorker) {
    // Worker: hash nonces (hi, 0..2^32-1), then (hi+step, ...), until found
    // or terminated; report progress every PROGRESS_EVERY hashes.
    self.onmessage = function (ev) {
      var m = ev.data;
      if (!m || m.type !== "solve") return;
      var c = parseChallenge(m.challenge), at = new Attempt(c.raw), hi = m.hi >>> 0, lo = 0;
      for (;;) {
        var r = search(at, c.bits, hi, lo, m.step, PROGRESS_EVERY);
        if (r.found) { self.postMessage({ type: "found", hi: r.hi, lo: r.lo, tries: r.tries }); return; }
        self.postMessage({ type: "progress", tries: r.tries });
        hi = r.hi; lo = r.lo;
      }
    };
  } else if (typeof module === "object" && module.exports) {
    module.exports = api;
  } else {
    root.EdgelimitPow = api;
  }
})(typeof self !== "undefined" ? self : this);
