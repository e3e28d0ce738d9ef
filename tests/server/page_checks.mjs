// The page's behaviour beyond streaming (browser_test.mjs runs these on its page): what it
// sends, what it shows after an error, after Stop, without a session and without the key.
import assert from "node:assert/strict";

const done = "#stats[data-done='1']";

/// Fills the page's fields (id -> value; "" empties one) and presses Generate.
async function generate(page, fields) {
  for (const [id, value] of Object.entries(fields)) await page.fill("#" + id, String(value));
  await page.click("#go");
}

/// The sampler's fields travel in the request, and the page shows the text the server answers
/// for the same request without streaming.
async function samplerFieldsSent(page, base, key) {
  const fields = { prompt: "JULIET:", max_tokens: 30, seed: 11, temperature: 0.7, top_k: 5,
                   top_p: 0.9, min_p: 0.1, repetition_penalty: 1.2 };
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/completions"));
  await generate(page, fields);
  const body = JSON.parse((await sent).postData());
  await page.waitForSelector(done, { timeout: 30_000 });
  for (const f of ["seed", "temperature", "top_k", "top_p", "min_p", "repetition_penalty"])
    assert.equal(body[f], fields[f], `the page sent ${f} = ${body[f]}, typed ${fields[f]}`);
  assert.match(await page.textContent("#stats"), / · seed 11$/, "the stats do not name the seed");
  const shown = await page.textContent("#out .completion");
  const direct = await fetch(base + "/v1/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + key },
    body: JSON.stringify({ ...body, stream: false, stream_options: undefined }),
  }).then((r) => r.json());
  assert.equal(shown, direct.choices[0].text, "the page and the API disagree on one request");
}

/// With every sampler field left empty, a seed gives the command line's text: one default
/// sampler for the CLI, the server and the page.
async function sameTextAsCommandLine(page, cliText) {
  for (const f of ["temperature", "top_k", "top_p", "min_p", "repetition_penalty"])
    await page.fill("#" + f, "");
  const placeholder = await page.getAttribute("#temperature", "placeholder");
  assert.ok(placeholder && placeholder !== "", "the page does not show the default temperature");
  await generate(page, { prompt: "ROMEO:", max_tokens: 40, seed: 7 });
  await page.waitForSelector(done, { timeout: 30_000 });
  const shown = await page.textContent("#out .completion");
  const cli = cliText.slice("ROMEO:".length);
  assert.ok(cli === shown || cli === shown + "\n",
            `seed 7: the page shows ${JSON.stringify(shown)}, retnet generate wrote ` +
            JSON.stringify(cli));
}

/// A failed run leaves no numbers of the run before it.
async function errorClearsStats(page) {
  await generate(page, { max_tokens: 30, seed: 1 });
  await page.waitForSelector(done, { timeout: 30_000 });
  assert.notEqual(await page.textContent("#stats"), "");
  await generate(page, { max_tokens: 100000 });  // above the server's --max-tokens
  await page.waitForSelector("#out .error", { timeout: 10_000 });
  await page.waitForSelector("#go:not([disabled])");
  assert.equal(await page.textContent("#stats"), "", "the previous run's stats stay after an error");
  assert.match(await page.textContent("#out .error"), /max_tokens/);
}

/// Stop ends the stream and says so, in the text and in the stats. 4000 tokens of the demo model
/// take a fraction of a second on a quiet machine, so a run can end before the click lands: it
/// is tried again then, up to 5 times.
async function stopIsMarked(page) {
  const stopped = "#stats[data-stopped='1']";
  for (let attempt = 1; ; ++attempt) {
    await generate(page, { max_tokens: 4000, seed: 2 });
    await page.waitForFunction(() => {
      const c = document.querySelector("#out .completion");
      return c && c.textContent.length > 20;
    }, null, { timeout: 30_000 });
    await page.click("#stop", { force: true });  // no wait for it to be enabled: the run may be over
    await page.waitForSelector(`${stopped}, ${done}`, { timeout: 10_000 });
    if (await page.$(stopped)) break;
    assert.ok(attempt < 5, "the run ended before Stop was clicked, 5 times");
    await page.waitForSelector("#go:not([disabled])");
  }
  assert.equal(await page.textContent("#out .stopped"), " [stopped]");
  assert.match(await page.textContent("#stats"), /^stopped after \d+ tokens/);
  assert.equal(await page.$(done), null, "a stopped run is marked done");
}

/// The session's label shows only while "continue a session" is checked.
async function sessionLabelFollowsCheckbox(page) {
  await page.click("#new_session");
  await page.waitForFunction(() => document.getElementById("session_info").textContent !== "");
  assert.equal(await page.isChecked("#use_session"), true);
  await page.uncheck("#use_session");
  assert.equal(await page.textContent("#session_info"), "", "the session label stays unchecked");
  await page.check("#use_session");
  assert.match(await page.textContent("#session_info"), /^session \S+/);
  await page.uncheck("#use_session");
}

/// Without the key the model line says nothing false, and the reason stands apart from it.
async function noKeyNotice(browser, base) {
  const page = await browser.newPage({ viewport: { width: 390, height: 800 } });  // a phone
  await page.goto(base + "/", { timeout: 20_000 });
  await page.waitForFunction(() => document.getElementById("notice").textContent !== "");
  const model = await page.textContent("#model");
  assert.ok(!/key/i.test(model), `the model line says ${JSON.stringify(model)}`);
  assert.match(await page.textContent("#notice"), /API key/i);
  await page.close();
}

export async function pageChecks({ browser, page, base, key, cliText }) {
  const t0 = Date.now();
  await samplerFieldsSent(page, base, key);
  await sameTextAsCommandLine(page, cliText);
  await errorClearsStats(page);
  await stopIsMarked(page);
  await sessionLabelFollowsCheckbox(page);
  await noKeyNotice(browser, base);
  console.log(`ok   page: sampler fields sent, seed 7 as the command line, stats cleared after ` +
              `an error, Stop marked, session label, no-key notice (${Date.now() - t0} ms)`);
}
