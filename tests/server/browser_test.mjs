// Headless Chromium on the page at "/": type a prompt, press Generate, and see the completion
// arrive piece by piece; then the sampler's fields, a seed's text against the command line's,
// an error after a run, Stop, the session label and the page without its key. The screenshot
// is kept as a test artifact.
//   node browser_test.mjs BASE_URL API_KEY CHROMIUM SCREENSHOT.png CLI_TEXT
// CLI_TEXT: a file with `retnet generate -p "ROMEO:" -n 40 --seed 7` 's standard output.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

import { pageChecks } from "./page_checks.mjs";

const [base, key, executable, screenshot, cliTextFile] = process.argv.slice(2);
const t0 = Date.now();
const browser = await chromium.launch({
  executablePath: executable,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  timeout: 60_000,
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base + "/", { timeout: 20_000 });
  await page.fill("#api_key", key);
  await page.fill("#prompt", "ROMEO:");
  // Long enough (about a second of the demo model) that the page sees many network reads even
  // when the browser gets the CPU only now and then: a short answer can arrive in 2 reads.
  await page.fill("#max_tokens", "2000");
  await page.fill("#seed", "3");
  // Watch the output while it streams: one big update would not be a stream. The number of
  // updates is the number of the browser's network reads, which depends on how busy the
  // machine is (several decoding steps may share one write, and one read takes all that has
  // arrived), so what is checked is that text was shown part by part: several updates, and the
  // completion on the page while it was still growing.
  await page.evaluate(() => {
    window.__updates = 0;
    window.__lengths = [];
    new MutationObserver(() => {
      window.__updates += 1;
      const c = document.querySelector("#out .completion");
      window.__lengths.push(c ? c.textContent.length : 0);
    }).observe(document.getElementById("out"), {
      childList: true, subtree: true, characterData: true,
    });
  });
  await page.click("#go");
  await page.waitForSelector("#stats[data-done='1']", { timeout: 60_000 });
  const text = await page.textContent("#out .completion");
  const stats = await page.textContent("#stats");
  const updates = await page.evaluate(() => window.__updates);
  const lengths = await page.evaluate(() => window.__lengths);
  const partial = lengths.filter((n) => n > 0 && n < text.length).length;
  await page.screenshot({ path: screenshot, fullPage: true });
  assert.ok(text.length >= 100, `the completion has ${text.length} characters`);
  assert.ok(updates >= 5 && partial >= 3,
            `the output changed ${updates} times, ${partial} of them with part of the text: ` +
            "not streamed");
  assert.match(stats, /2000 tokens · [0-9.]+ tokens\/s · first token after \d+ ms/);
  assert.deepEqual(errors, []);
  console.log(`ok   browser: ${text.length} characters in ${updates} updates (${partial} ` +
              `partial); "${stats}" ` +
              `(${Date.now() - t0} ms, screenshot ${screenshot})`);
  await pageChecks({ browser, page, base, key, cliText: readFileSync(cliTextFile, "utf8") });
  assert.deepEqual(errors, []);
} finally {
  await browser.close();
}
