// Verifying edgelimit window tokens with jose (npm "jose", v6), in Node 20+,
// Deno, Bun, Cloudflare Workers or a browser: only Web Crypto is needed.
import { jwtVerify } from "jose";

const TOKEN_LABEL = new TextEncoder().encode("edgelimit/signedwindow/token/v1");

// decodeBase64 decodes standard or URL-safe base64, padded or not.
function decodeBase64(s) {
  const bin = atob(s.trim().replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

async function hmacSHA256(key, message) {
  const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, message));
}

// tokenKeys turns EDGELIMIT_SECRETS ("kid:base64,kid:base64") into each key
// id's token MAC key: HMAC-SHA256(secret, "edgelimit/signedwindow/token/v1").
export async function tokenKeys(secrets) {
  const keys = new Map();
  for (const entry of secrets.split(",").map((e) => e.trim()).filter(Boolean)) {
    const [kid, secret] = entry.split(":");
    keys.set(kid.trim(), await hmacSHA256(decodeBase64(secret), TOKEN_LABEL));
  }
  return keys;
}

// clientSubject is the sub of a client's tokens for a policy: the first 16
// bytes of HMAC-SHA256(EDGELIMIT_HASH_KEY, policy + "\0" + rawKey), base64url.
export async function clientSubject(hashKey, policy, rawKey) {
  const msg = new TextEncoder().encode(`${policy}\0${rawKey}`);
  const sum = await hmacSHA256(decodeBase64(hashKey), msg);
  return btoa(String.fromCharCode(...sum.subarray(0, 16)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// verifyWindowToken returns the claims of token when it is a window token of
// policy (and, with subject, of that client) valid at currentDate (default:
// now), with a window of windowSeconds (when given); otherwise it throws.
export async function verifyWindowToken(token, { keys, policy, subject, windowSeconds, currentDate }) {
  const { payload } = await jwtVerify(
    token,
    (header) => {
      const key = keys.get(header.kid);
      if (!key) throw new Error("unknown key id");
      return key;
    },
    {
      algorithms: ["HS256"], // pinned: none, HS384, RS256 … are refused
      audience: policy,
      subject,
      requiredClaims: ["sub", "jti", "nbf", "exp", "n"],
      currentDate,
    },
  );
  if (windowSeconds !== undefined && payload.exp - payload.nbf !== windowSeconds) {
    throw new Error("not a window of this policy");
  }
  if (!Number.isInteger(payload.n) || payload.n < 1) throw new Error("bad count");
  return payload;
}
