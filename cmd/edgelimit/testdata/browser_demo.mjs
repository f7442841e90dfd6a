// Loads edgelimit serve's demo page in headless Chromium (Debian's, driven by
// playwright-core), lets it solve the signed route's proof-of-work challenge
// in the browser, and prints what the page shows as JSON.
//
//   node browser_demo.mjs URL CHROMIUM_PATH
import { chromium } from "playwright-core";

const [url, executablePath] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForSelector('body[data-state="allowed"]', { timeout: 60000 });
  const result = await page.evaluate(() => ({
    state: document.body.dataset.state,
    status: document.getElementById("status").textContent,
    remaining: document.getElementById("remaining").textContent,
    work: document.getElementById("work").textContent,
    log: [...document.querySelectorAll("#log li")].map((li) => li.textContent),
  }));
  result.errors = errors;
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
