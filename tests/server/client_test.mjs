// Drives a running `retnet serve` with the official OpenAI client for Node and with plain HTTP.
//   node client_test.mjs BASE_URL API_KEY WORK_DIR main            (everything but the restart)
//   node client_test.mjs BASE_URL API_KEY WORK_DIR after-restart   (a session saved by main)
// Every request goes to BASE_URL (loopback); counts and times are bounded.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";

import { check, model, openaiClient, results } from "./checks.mjs";

const [base, key, work, phase] = process.argv.slice(2);
const client = openaiClient(base, key);

/// Plain HTTP: { status, json, text }.
async function call(method, route, body, { auth = key, raw = false } = {}) {
  const headers = {};
  if (auth !== null) headers.Authorization = `Bearer ${auth}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(base + route, {
    method,
    headers,
    body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, json, text };
}

async function health() {
  return (await call("GET", "/health", undefined, { auth: null })).json;
}

async function complete(params) {
  const r = await client.completions.create({ model, ...params });
  return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage, raw: r };
}

async function streamed(params) {
  const stream = await client.completions.create({ model, ...params, stream: true });
  let text = "", finish = null, chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      chunks += 1;
    }
  }
  return { text, finish, chunks };
}

async function expectApiError(promise, status, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    if (param) assert.equal(e.param, param);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

/// Waits until /health satisfies `pred` (bounded).
async function until(pred, ms = 5000) {
  const t0 = Date.now();
  let h;
  while (Date.now() - t0 < ms) {
    h = await health();
    if (pred(h)) return h;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`timed out waiting; last /health: ${JSON.stringify(h)}`);
}

const idle = (h) => h.requests.decoding === 0 && h.requests.prefilling === 0 && h.requests.queued === 0;

// ---------------------------------------------------------------------------------------------

async function main() {
  await check("models and health", async () => {
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [model]);
    assert.ok(list.data[0].meta.state_bytes > 0);
    const h = await health();
    assert.equal(h.status, "ok");
  });

  let reference;
  await check("completion: text, usage, same seed same text, token-id prompt", async () => {
    const a = await complete({ prompt: "ROMEO:", max_tokens: 40, seed: 7, temperature: 0.8 });
    assert.equal(a.finish, "length");
    assert.deepEqual(a.usage, { prompt_tokens: 6, completion_tokens: 40, total_tokens: 46 });
    assert.ok(a.text.length > 0);
    const b = await complete({ prompt: "ROMEO:", max_tokens: 40, seed: 7, temperature: 0.8 });
    assert.equal(b.text, a.text);
    const ids = [...Buffer.from("ROMEO:")];
    const c = await complete({ prompt: ids, max_tokens: 40, seed: 7, temperature: 0.8 });
    assert.equal(c.text, a.text);
    const d = await complete({ prompt: "ROMEO:", max_tokens: 40, seed: 8, temperature: 0.8 });
    assert.notEqual(d.text, a.text);
    reference = a.text;
  });

  await check("streaming equals the plain answer and ends with [DONE]", async () => {
    const s = await streamed({ prompt: "ROMEO:", max_tokens: 40, seed: 7, temperature: 0.8 });
    assert.equal(s.text, reference);
    assert.equal(s.finish, "length");
    assert.ok(s.chunks >= 10, `only ${s.chunks} chunks`);
    const raw = await call("POST", "/v1/completions", {
      prompt: "a", max_tokens: 3, stream: true, stream_options: { include_usage: true },
    });
    assert.equal(raw.status, 200);
    const events = raw.text.split("\n\n").filter((e) => e.startsWith("data: "));
    assert.equal(events.at(-1), "data: [DONE]");
    const usage = JSON.parse(events.at(-2).slice(6));
    assert.deepEqual(usage.usage, { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 });
  });

  await check("stop sequences (one and several, plain and streamed)", async () => {
    const free = await complete({ prompt: "KING RICHARD II:", max_tokens: 80, temperature: 0 });
    const stop = free.text.slice(30, 33);
    const expected = free.text.slice(0, free.text.indexOf(stop));
    const a = await complete({ prompt: "KING RICHARD II:", max_tokens: 80, temperature: 0, stop });
    assert.equal(a.text, expected);
    assert.equal(a.finish, "stop");
    const s = await streamed({ prompt: "KING RICHARD II:", max_tokens: 80, temperature: 0, stop });
    assert.equal(s.text, expected);
    assert.equal(s.finish, "stop");
    const other = free.text.slice(10, 12);
    const b = await complete({ prompt: "KING RICHARD II:", max_tokens: 80, temperature: 0,
                               stop: [stop, other] });
    const cut = Math.min(free.text.indexOf(stop), free.text.indexOf(other));
    assert.equal(b.text, free.text.slice(0, cut));
  });

  await check("logprobs", async () => {
    // Without the repetition penalty the greedy token is the model's most likely one.
    const r = await complete({ prompt: "ROMEO:", max_tokens: 5, temperature: 0, logprobs: 2,
                               repetition_penalty: 1 });
    const lp = r.raw.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.tokens.join(""), r.text);
    assert.equal(lp.top_logprobs.length, 5);
    for (const [i, top] of lp.top_logprobs.entries()) {
      assert.equal(Object.keys(top).length, 2);
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.equal(Math.max(...Object.values(top)), lp.token_logprobs[i]);  // greedy: the top one
    }
  });

  await check("errors through the OpenAI client", async () => {
    await expectApiError(complete({ prompt: "a", max_tokens: 100000 }), 400, "max_tokens");
    await expectApiError(complete({ prompt: "a", temperature: "hot" }), 400, "temperature");
    await expectApiError(complete({ prompt: "a", session: "never-created" }), 404, "session");
    await expectApiError(complete({ prompt: "a", session: "../../etc/passwd" }), 400, "session");
    const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 });
    const e = await expectApiError(wrong.completions.create({ model, prompt: "a" }), 401);
    assert.ok(e instanceof OpenAI.AuthenticationError);
    await expectApiError(client.models.retrieve("gpt-4"), 404);
  });

  await check("bad input over plain HTTP", async () => {
    const cases = [
      ["{", 400, "invalid_json"],
      ["[1, 2]", 400, "invalid_json"],
      [{}, 400, "missing"],
      [{ prompt: 5 }, 400, "invalid_type"],
      [{ prompt: "a", max_tokens: "5" }, 400, "invalid_type"],
      [{ prompt: "a", max_tokens: -1 }, 400, "out_of_range"],
      [{ prompt: "a", max_tokens: 1e6 }, 400, "max_tokens_too_large"],
      [{ prompt: "a", temperature: 5 }, 400, "out_of_range"],
      [{ prompt: "a", top_p: 0 }, 400, "out_of_range"],
      [{ prompt: "a", stream: "yes" }, 400, "invalid_type"],
      [{ prompt: "a", stop: [1] }, 400, "invalid_type"],
      [{ prompt: "a", seed: 1.5 }, 400, "invalid_type"],
      [{ prompt: [1, 99999] }, 400, "invalid_token"],
      [{ prompt: ["a", "b"] }, 400, "unsupported"],
      [{ prompt: "a", n: 9 }, 400, "out_of_range"],
      [{ prompt: "" }, 400, "empty_prompt"],
      [{ prompt: "a", session: 5 }, 400, "invalid_type"],
      [{ prompt: "a", session: "a/b" }, 400, "invalid_session_id"],
      [{ prompt: "a", session: "x".repeat(65) }, 400, "invalid_session_id"],
      [{ prompt: "a", session: "" }, 400, "invalid_session_id"],
      [{ prompt: "a", session: "unknown-id" }, 404, "session_not_found"],
    ];
    for (const [body, status, code] of cases) {
      const r = await call("POST", "/v1/completions", typeof body === "string" ? body : body,
                           { raw: typeof body === "string" });
      assert.equal(r.status, status, `${JSON.stringify(body)} -> ${r.text}`);
      assert.equal(r.json.error.code, code, `${JSON.stringify(body)} -> ${r.text}`);
      assert.ok(r.json.error.message.length > 0);
    }
    // A field error names the field's path in `param`.
    for (const [body, param, code] of [
      [{ prompt: "a", temperature: 5 }, "temperature", "out_of_range"],
      [{ prompt: "a", seed: 1.5 }, "seed", "invalid_type"],
      [{ prompt: "a", stream_options: { include_usage: 1 } }, "stream_options.include_usage",
       "invalid_type"],
      [{ prompt: "a", stream_options: 5 }, "stream_options", "invalid_type"],
      [{}, "prompt", "missing"],
    ]) {
      const r = await call("POST", "/v1/completions", body);
      assert.equal(r.status, 400, `${JSON.stringify(body)} -> ${r.text}`);
      assert.equal(r.json.error.param, param, `${JSON.stringify(body)} -> ${r.text}`);
      assert.equal(r.json.error.code, code, `${JSON.stringify(body)} -> ${r.text}`);
      assert.match(r.json.error.message, new RegExp(param.replace(".", "\\.")), r.text);
    }
    // Bodies are parsed with the library's bounded JSON reader: a key given twice and nesting
    // beyond its depth are refused.
    for (const raw of ['{"prompt": "a", "prompt": "b"}',
                       '{"prompt": ' + "[".repeat(100) + "]".repeat(100) + "}"]) {
      const r = await call("POST", "/v1/completions", raw, { raw: true });
      assert.equal(r.status, 400, `${raw.slice(0, 40)} -> ${r.text}`);
      assert.equal(r.json.error.code, "invalid_json", `${raw.slice(0, 40)} -> ${r.text}`);
    }
    const big = await call("POST", "/v1/completions",
                           JSON.stringify({ prompt: "a".repeat(2 << 20) }), { raw: true });
    assert.equal(big.status, 413);
    assert.equal(big.json.error.type, "invalid_request_error");
    assert.equal((await call("POST", "/v1/completions", { prompt: "a" }, { auth: null })).status, 401);
    assert.equal((await call("POST", "/v1/completions", { prompt: "a" }, { auth: "no" })).status, 401);
    assert.equal((await call("GET", "/v1/models", undefined, { auth: null })).status, 401);
    assert.equal((await call("GET", "/health", undefined, { auth: null })).status, 200);
    const page = await call("GET", "/", undefined, { auth: null });
    assert.equal(page.status, 200);
    assert.match(page.text, /<textarea id="prompt"/);
    assert.equal((await call("GET", "/v1/nothing")).status, 404);
    for (const bad of ["a%2Fb", "..%2Fetc", "a%20b", "x".repeat(65)]) {
      assert.equal((await call("DELETE", `/v1/sessions/${bad}`)).status, 400, bad);
      assert.equal((await call("GET", `/v1/sessions/${bad}`)).status, 400, bad);
    }
    assert.equal((await call("DELETE", "/v1/sessions/never-made")).status, 404);
    assert.equal((await call("POST", "/v1/sessions", { id: "a/b" })).status, 400);
    const tokenize = await call("POST", "/tokenize", { content: 5 });
    assert.equal(tokenize.status, 400);
    assert.equal(tokenize.json.error.param, "content");
    const missing = await call("POST", "/tokenize", {});
    assert.equal(missing.status, 400);
    assert.equal(missing.json.error.code, "missing");
    assert.equal((await call("POST", "/detokenize", { tokens: [300] })).status, 400);
    assert.equal((await call("POST", "/detokenize", { tokens: "abc" })).status, 400);
  });

  await check("tokenize and detokenize", async () => {
    const t = await call("POST", "/tokenize", { content: "héllo" });
    assert.deepEqual(t.json.tokens, [104, 195, 169, 108, 108, 111]);
    const d = await call("POST", "/detokenize", { tokens: t.json.tokens });
    assert.equal(d.json.content, "héllo");
  });

  await check("sessions: continuing reads only the new text and equals one long request", async () => {
    const whole = await complete({ prompt: "JULIET:", max_tokens: 50, temperature: 0 });
    const created = await call("POST", "/v1/sessions", { id: "chat-1" });
    assert.equal(created.status, 201);
    assert.equal((await call("POST", "/v1/sessions", { id: "chat-1" })).status, 409);
    const a = await complete({ prompt: "JULIET:", max_tokens: 20, temperature: 0, session: "chat-1" });
    assert.equal(a.raw.session.tokens, 7 + 20);
    const b = await complete({ prompt: "", max_tokens: 30, temperature: 0, session: "chat-1" });
    assert.equal(a.text + b.text, whole.text);
    assert.equal(b.usage.prompt_tokens, 0);
    assert.equal(b.raw.session.tokens, 7 + 50);
    // New text continues the conversation exactly as the whole history sent at once would.
    const c = await complete({ prompt: "\nROMEO:", max_tokens: 20, temperature: 0, session: "chat-1" });
    assert.equal(c.usage.prompt_tokens, 7);
    const full = await complete({ prompt: "JULIET:" + whole.text + "\nROMEO:", max_tokens: 20,
                                  temperature: 0 });
    assert.equal(c.text, full.text);
    const info = await call("GET", "/v1/sessions/chat-1");
    assert.equal(info.json.tokens, 7 + 50 + 7 + 20);
    // Streamed requests use sessions too; a busy session refuses a second request.
    const s = await call("POST", "/v1/sessions", {});
    const id = s.json.id;
    const controller = new AbortController();
    const res = await fetch(`${base}/v1/completions`, {
      method: "POST", signal: controller.signal,
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "x", max_tokens: 4000, stream: true, session: id }),
    });
    const reader = res.body.getReader();
    await reader.read();
    assert.equal((await call("POST", "/v1/completions", { prompt: "y", session: id })).status, 409);
    assert.equal((await call("DELETE", `/v1/sessions/${id}`)).status, 409);
    controller.abort();
    await until((h) => idle(h) && h.sessions.busy === 0);
    // The cancelled request left the session as it was: empty.
    assert.equal((await call("GET", `/v1/sessions/${id}`)).json.tokens, 0);
    assert.equal((await call("DELETE", `/v1/sessions/${id}`)).status, 200);
    assert.equal((await call("GET", `/v1/sessions/${id}`)).status, 404);
  });

  await check("32 concurrent streaming clients each equal their solo run", async () => {
    const prompts = Array.from({ length: 32 }, (_, i) => ({
      prompt: ["ROMEO:", "JULIET:", "First Citizen:\n", "KING HENRY:"][i % 4] + " ".repeat(i % 3),
      max_tokens: 24 + (i % 5) * 8, seed: 1000 + i, temperature: 0.9, top_k: 40, top_p: 0.95,
    }));
    const solo = [];
    for (const p of prompts) solo.push((await streamed(p)).text);
    const before = await health();
    const t0 = Date.now();
    const together = await Promise.all(prompts.map((p) => streamed(p)));
    const seconds = (Date.now() - t0) / 1000;
    for (let i = 0; i < prompts.length; ++i) {
      assert.equal(together[i].text, solo[i], `client ${i}`);
      assert.ok(["length", "stop"].includes(together[i].finish));
    }
    const after = await until(idle);
    assert.equal(after.requests.completed - before.requests.completed, 32);
    console.log(`     32 streams in ${seconds.toFixed(2)} s; ${after.requests.steps - before.requests.steps} steps, ` +
                `at most ${after.requests.largest_step} rows in one`);
    assert.ok(after.requests.largest_step > 1, "the 32 streams never shared a step");
  });

  await check("a client that leaves mid-stream is cancelled and the server goes on", async () => {
    const before = await health();
    const controller = new AbortController();
    const res = await fetch(`${base}/v1/completions`, {
      method: "POST", signal: controller.signal,
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "ROMEO:", max_tokens: 4000, stream: true }),
    });
    const reader = res.body.getReader();
    let events = 0;
    while (events < 5) {
      const { value } = await reader.read();
      events += new TextDecoder().decode(value).split("data: ").length - 1;
    }
    controller.abort();
    const after = await until((h) => idle(h) && h.requests.cancelled > before.requests.cancelled);
    assert.ok(after.requests.tokens - before.requests.tokens < 1000,
              `the request ran on: ${after.requests.tokens - before.requests.tokens} tokens`);
    const r = await complete({ prompt: "ROMEO:", max_tokens: 10 });
    assert.equal(r.usage.completion_tokens, 10);
  });

  await check("1000 sequential requests: memory flat, no leaked sessions or threads", async () => {
    const one = async (i) => {
      if (i % 50 === 0) {  // a session made, used twice and deleted
        const id = `leak-${i}`;
        assert.equal((await call("POST", "/v1/sessions", { id })).status, 201);
        await complete({ prompt: "ROMEO:", max_tokens: 4, session: id });
        await complete({ prompt: "more", max_tokens: 4, session: id });
        assert.equal((await call("DELETE", `/v1/sessions/${id}`)).status, 200);
      } else if (i % 10 === 0) {
        await streamed({ prompt: "JULIET:", max_tokens: 8, seed: i });
      } else if (i % 97 === 0) {
        assert.equal((await call("POST", "/v1/completions", { prompt: 5 })).status, 400);
      } else {
        await complete({ prompt: `Request ${i}:`, max_tokens: 8, seed: i });
      }
    };
    for (let i = 0; i < 100; ++i) await one(i);  // warm-up: pools and caches reach their size
    const start = await until(idle);
    const t0 = Date.now();
    for (let i = 0; i < 1000; ++i) {
      await one(i);
      assert.ok(Date.now() - t0 < 120_000, "1000 requests took over 2 minutes");
    }
    const end = await until(idle);
    const growth = end.process.rss_bytes / start.process.rss_bytes - 1;
    console.log(`     1000 requests in ${((Date.now() - t0) / 1000).toFixed(1)} s; RSS ` +
                `${(start.process.rss_bytes / 1e6).toFixed(1)} -> ${(end.process.rss_bytes / 1e6).toFixed(1)} MB ` +
                `(${(100 * growth).toFixed(2)} %), threads ${start.process.threads} -> ${end.process.threads}`);
    // One-sided: the allocator may hand pages back after the warm-up, and a drop is no leak.
    assert.ok(growth <= 0.05, `RSS grew by ${(100 * growth).toFixed(2)} %`);
    assert.equal(end.process.threads, start.process.threads);
    assert.equal(end.sessions.in_memory, start.sessions.in_memory);
    assert.equal(end.sessions.on_disk, start.sessions.on_disk);
    assert.equal(end.sessions.busy, 0);
    assert.equal(end.requests.decoding, 0);
  });

  await check("a session saved for the restart", async () => {
    assert.equal((await call("POST", "/v1/sessions", { id: "kept" })).status, 201);
    const a = await complete({ prompt: "MENENIUS:", max_tokens: 30, temperature: 0, session: "kept" });
    const whole = await complete({ prompt: "MENENIUS:", max_tokens: 60, temperature: 0 });
    assert.ok(whole.text.startsWith(a.text));
    fs.writeFileSync(path.join(work, "kept.json"),
                     JSON.stringify({ rest: whole.text.slice(a.text.length), tokens: 9 + 30 }));
  });
}

async function afterRestart() {
  await check("after a restart a session continues from its file", async () => {
    const kept = JSON.parse(fs.readFileSync(path.join(work, "kept.json"), "utf8"));
    const info = await call("GET", "/v1/sessions/kept");
    assert.equal(info.status, 200);
    assert.equal(info.json.tokens, kept.tokens);
    assert.equal(info.json.in_memory, false);
    const b = await complete({ prompt: "", max_tokens: 30, temperature: 0, session: "kept" });
    assert.equal(b.text, kept.rest);
    assert.equal((await call("DELETE", "/v1/sessions/kept")).status, 200);
    assert.equal((await call("GET", "/v1/sessions/chat-1")).status, 200);  // still on disk
  });
}

const t0 = Date.now();
await (phase === "after-restart" ? afterRestart() : main());
console.log(`${results.failures ? "FAILED" : "passed"}: client checks (${phase}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(results.failures ? 1 : 0);
