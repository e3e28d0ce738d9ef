// The sampling fields of /v1/completions against a running `retnet serve` (demo model: its
// tokenizer is bytes, so a token id is its character's code), with the official OpenAI client:
// each field changes the output as it should, the defaults are the shared sampler's, and a field
// the server does not read is refused naming it.
//   node fields_test.mjs BASE_URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

import { check, model, openaiClient, results } from "./checks.mjs";

const [base, key] = process.argv.slice(2);
const client = openaiClient(base, key);

async function call(method, route, body) {
  const headers = { Authorization: `Bearer ${key}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(base + route, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) };
}

const complete = (params) => client.completions.create({ model, prompt: "ROMEO:", ...params });
const text = async (params) => (await complete(params)).choices[0].text;

/// A streamed request's text and finish_reason per choice index.
async function streamed(params) {
  const stream = await client.completions.create({ model, prompt: "ROMEO:", ...params, stream: true });
  const out = [];
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      out[c.index] ??= { text: "", finish: null };
      out[c.index].text += c.text;
      if (c.finish_reason) out[c.index].finish = c.finish_reason;
    }
  return out;
}

async function expectApiError(promise, status, param, message) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    assert.equal(e.param, param, e.message);
    if (message) assert.match(e.message, message);
    return e;
  }
  assert.fail(`expected HTTP ${status} naming ${param}`);
}

const shared = { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, repetition_penalty: 1.1,
                 repeat_last_n: 64, presence_penalty: 0, frequency_penalty: 0, logit_bias: {} };

await check("GET /props and /v1/models meta: the shared default sampler; absent fields take its values", async () => {
  const props = await call("GET", "/props");
  assert.equal(props.status, 200);
  assert.deepEqual(props.json.default_sampler, shared);
  assert.equal(props.json.chat_template, "plain");
  const models = await call("GET", "/v1/models");
  assert.deepEqual(models.json.data[0].meta.default_sampler, shared);
  const implicit = await text({ max_tokens: 40, seed: 11 });
  assert.equal(await text({ max_tokens: 40, seed: 11, ...shared }), implicit);
  // And they matter: OpenAI's own defaults (temperature 1, nothing cut) give another text.
  assert.notEqual(await text({ max_tokens: 40, seed: 11, temperature: 1, top_k: 0, top_p: 1,
                               min_p: 0, repetition_penalty: 1 }), implicit);
});

await check("seed: reported in the answer; the same seed gives the same text", async () => {
  const a = await complete({ max_tokens: 30 });
  assert.ok(Number.isSafeInteger(a.seed) && a.seed >= 0, `seed ${a.seed}`);
  const b = await complete({ max_tokens: 30, seed: a.seed });
  assert.equal(b.seed, a.seed);
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.equal(await text({ max_tokens: 30, seed: 99 }), await text({ max_tokens: 30, seed: 99 }));
  const s = await streamed({ max_tokens: 30, seed: a.seed });
  assert.equal(s[0].text, a.choices[0].text);
});

await check("logit_bias: -100 bans the greedy token, +100 forces a token", async () => {
  const greedy = await text({ max_tokens: 1, temperature: 0 });
  const id = greedy.charCodeAt(0);  // bytes: the token id is the character's code
  const banned = await text({ max_tokens: 1, temperature: 0, logit_bias: { [id]: -100 } });
  assert.notEqual(banned, greedy);
  assert.equal(await text({ max_tokens: 8, seed: 3, logit_bias: { 65: 100 } }), "AAAAAAAA");
  assert.equal(await text({ max_tokens: 8, temperature: 0, logit_bias: { 122: 100 } }), "zzzzzzzz");
  await expectApiError(complete({ logit_bias: { x1: 5 } }), 400, "logit_bias", /logit_bias/);
  await expectApiError(complete({ logit_bias: { "065": 5 } }), 400, "logit_bias");
  await expectApiError(complete({ logit_bias: { 99999: 5 } }), 400, "logit_bias", /outside/);
  await expectApiError(complete({ logit_bias: { 65: 101 } }), 400, "logit_bias.65");
  await expectApiError(complete({ logit_bias: [65] }), 400, "logit_bias");
});

await check("min_p 1 at temperature 1 is greedy", async () => {
  const greedy = await text({ max_tokens: 40, temperature: 0 });
  const sampled = [];
  for (const seed of [1, 2, 3]) {
    assert.equal(await text({ max_tokens: 40, temperature: 1, min_p: 1, seed }), greedy, `seed ${seed}`);
    sampled.push(await text({ max_tokens: 40, temperature: 1, min_p: 0, seed }));
  }
  assert.ok(sampled.some((t) => t !== greedy), "without min_p every seed gave the greedy text");
  await expectApiError(complete({ min_p: 1.5 }), 400, "min_p");
});

// The penalties against a hand computation from the model's own log-probabilities: at
// temperature 0 the chosen token maximises logprob - presence * [count > 0] - frequency * count,
// counted over the last repeat_last_n tokens (prompt and generated).
async function checkPenalties(presence, frequency) {
  const window = 16;
  const prompt = "ROMEO:";
  const params = { prompt, max_tokens: 40, temperature: 0, repetition_penalty: 1, repeat_last_n: window,
                   logprobs: 5 };
  const free = await text(params);
  const r = await complete({ ...params, presence_penalty: presence, frequency_penalty: frequency });
  const lp = r.choices[0].logprobs;
  assert.notEqual(r.choices[0].text, free, "the penalties changed nothing");
  const seen = [...prompt];
  let compared = 0;
  for (const [t, chosen] of lp.tokens.entries()) {
    assert.equal(chosen.length, 1, `token ${JSON.stringify(chosen)}`);
    const recent = seen.slice(-window);
    const score = (tok, logprob) => {
      const count = recent.filter((x) => x === tok).length;
      return logprob - presence * (count > 0 ? 1 : 0) - frequency * count;
    };
    const mine = score(chosen, lp.token_logprobs[t]);
    for (const [tok, logprob] of Object.entries(lp.top_logprobs[t])) {
      assert.ok(mine >= score(tok, logprob) - 1e-3,
                `step ${t}: chose ${JSON.stringify(chosen)} (${mine}) over ${JSON.stringify(tok)} (${score(tok, logprob)})`);
      compared += 1;
    }
    seen.push(chosen);
  }
  assert.ok(compared >= 100, `only ${compared} comparisons`);
}

await check("frequency_penalty and presence_penalty: the greedy choice of the hand-penalised scores", async () => {
  await checkPenalties(0, 1.5);
  await checkPenalties(2, 0);
  await checkPenalties(0.5, 0.7);
  await expectApiError(complete({ presence_penalty: 2.5 }), 400, "presence_penalty");
  await expectApiError(complete({ frequency_penalty: -3 }), 400, "frequency_penalty");
});

await check("n: choices 0..n-1 sampled with seed, seed + 1, ...; streamed too", async () => {
  const r = await complete({ max_tokens: 20, n: 3, seed: 21 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.seed, 21);
  for (const [i, c] of r.choices.entries())
    assert.equal(c.text, await text({ max_tokens: 20, seed: 21 + i }), `choice ${i}`);
  assert.equal(r.usage.completion_tokens, 60);
  assert.equal(r.usage.prompt_tokens, 6);
  assert.equal(new Set(r.choices.map((c) => c.text)).size, 3);
  const s = await streamed({ max_tokens: 20, n: 3, seed: 21 });
  assert.equal(s.length, 3);
  for (const [i, c] of s.entries()) {
    assert.equal(c.text, r.choices[i].text, `streamed choice ${i}`);
    assert.equal(c.finish, "length");
  }
  await expectApiError(complete({ n: 9 }), 400, "n");
  await expectApiError(complete({ n: 0 }), 400, "n");
  const session = await call("POST", "/v1/sessions", {});
  await expectApiError(complete({ n: 2, session: session.json.id }), 400, "n", /session/);
  await call("DELETE", `/v1/sessions/${session.json.id}`);
});

await check("echo: the prompt's text before the completion", async () => {
  const plain = await text({ max_tokens: 12, seed: 5 });
  assert.equal(await text({ max_tokens: 12, seed: 5, echo: true }), "ROMEO:" + plain);
  const ids = [...Buffer.from("ROMEO:")];
  assert.equal(await text({ prompt: ids, max_tokens: 12, seed: 5, echo: true }), "ROMEO:" + plain);
  const s = await streamed({ max_tokens: 12, seed: 5, echo: true, n: 2 });
  assert.equal(s[0].text, "ROMEO:" + plain);
  assert.ok(s[1].text.startsWith("ROMEO:"));
  assert.equal(await text({ max_tokens: 0, echo: true }), "ROMEO:");
  await expectApiError(complete({ echo: true, logprobs: 1 }), 400, "echo", /logprobs/);
});

await check("unknown and unsupported fields are refused, naming them", async () => {
  for (const [field, value] of [["grammar", "root ::= \"a\""], ["response_format", { type: "json_object" }],
                                ["tools", []], ["suffix", "end"], ["best_of", 2], ["mirostat", 2],
                                ["top_logprobs", 2]]) {
    const e = await expectApiError(complete({ [field]: value }), 400, field);
    assert.match(e.message, new RegExp(field));
  }
  await expectApiError(complete({ stream: true, stream_options: { include_usage: true, other: 1 } }), 400,
                       "stream_options.other");
  // Fields OpenAI defines that change nothing here, and null for "absent", are accepted.
  assert.equal((await complete({ max_tokens: 2, user: "someone", best_of: 1, suffix: "", grammar: null }))
    .choices.length, 1);
});

await check("JSON answers end with a newline", async () => {
  for (const [method, route, body] of [["GET", "/props"], ["GET", "/v1/models"], ["GET", "/health"],
                                       ["POST", "/v1/completions", { prompt: "a", max_tokens: 2 }],
                                       ["POST", "/v1/completions", { prompt: 5 }],
                                       ["POST", "/tokenize", { content: "a" }]]) {
    const r = await call(method, route, body);
    assert.ok(r.text.endsWith("}\n") && !r.text.endsWith("\n\n"), `${route}: ${JSON.stringify(r.text.slice(-20))}`);
  }
});

console.log(`${results.failures ? "FAILED" : "passed"}: sampling field checks`);
process.exit(results.failures ? 1 : 0);
