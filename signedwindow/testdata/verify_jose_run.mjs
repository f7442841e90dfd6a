// The harness of signedwindow/jose_test.go and e2e/jose_test.go: it runs
// verify_jose.mjs (the example of docs/signed.md, unchanged) on the cases
// it reads as JSON on stdin and prints one result per case as JSON.
//
// stdin: {"secrets": "kid:b64,...", "hashKey": "b64", "cases": [{"name",
//         "token", "policy", "rawKey"?, "windowSeconds"?, "now" (Unix s)?}]}
// stdout: [{"name", "ok", "payload"?, "subject"?, "code"?, "claim"?, "message"?}]
import { tokenKeys, clientSubject, verifyWindowToken } from "./verify_jose.mjs";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secrets, hashKey, cases } = JSON.parse(input);
const keys = await tokenKeys(secrets);
const results = [];
for (const c of cases) {
  const r = { name: c.name };
  try {
    const subject = c.rawKey === undefined ? undefined : await clientSubject(hashKey, c.policy, c.rawKey);
    r.subject = subject;
    r.payload = await verifyWindowToken(c.token, {
      keys,
      policy: c.policy,
      subject,
      windowSeconds: c.windowSeconds,
      currentDate: c.now === undefined ? undefined : new Date(c.now * 1000),
    });
    r.ok = true;
  } catch (err) {
    r.ok = false;
    r.code = err.code;
    r.claim = err.claim;
    r.message = err.message;
  }
  results.push(r);
}
process.stdout.write(JSON.stringify(results));
