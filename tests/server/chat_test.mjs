// POST /v1/chat/completions against a running `retnet serve`, with the official OpenAI client:
// streamed and not, against /v1/completions on the template's rendering written out here.
//   node chat_test.mjs BASE_URL API_KEY TEMPLATE
// TEMPLATE is the template the server was started with (docs/CHAT.md): "plain" for the demo
// folder's default, else the file given to --chat-template.
import assert from "node:assert/strict";
import fs from "node:fs";
import OpenAI from "openai";

import { check, model, openaiClient, results } from "./checks.mjs";

const [base, key, templateArg] = process.argv.slice(2);
const client = openaiClient(base, key);
const format = templateArg === "plain" ? "{Role}:\n{content}\n\n" : fs.readFileSync(templateArg, "utf8");

// The template written out from docs/CHAT.md: each message in the format, then the assistant's
// opening; the reply stops at the closing (trailing whitespace trimmed unless nothing is left)
// and at the user's opening (trimmed).
const fill = (part, role) =>
  part.replaceAll("{role}", role).replaceAll("{Role}", role[0].toUpperCase() + role.slice(1));
const [head, closing] = format.split("{content}");
const render = (messages) =>
  messages.map((m) => fill(head, m.role) + m.content + fill(closing, m.role)).join("") +
  fill(head, "assistant");
const trimmed = (s) => (s.trimEnd() === "" ? s : s.trimEnd());
const stops = [...new Set([trimmed(fill(closing, "assistant")), trimmed(fill(head, "user"))])];

const messages = [
  { role: "system", content: "A scene from a play." },
  { role: "user", content: "Good morrow, sir. Whither goest thou?" },
];

const chat = (params) => client.chat.completions.create({ model, messages, ...params });

/// A streamed chat's content and finish_reason per choice, and whether each began with the role.
async function streamed(params) {
  const stream = await chat({ ...params, stream: true });
  const out = [];
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    for (const c of chunk.choices) {
      if (!out[c.index]) {
        assert.equal(c.delta.role, "assistant", "the first delta names the role");
        out[c.index] = { content: "", finish: null };
      }
      out[c.index].content += c.delta.content ?? "";
      if (c.finish_reason) out[c.index].finish = c.finish_reason;
    }
  }
  return out;
}

async function expectApiError(promise, status, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    assert.equal(e.param, param, e.message);
    return e;
  }
  assert.fail(`expected HTTP ${status} naming ${param}`);
}

await check(`chat (${templateArg === "plain" ? "plain" : "file"} template): whole = streamed = /v1/completions on the rendering`, async () => {
  const whole = await chat({ temperature: 0, max_tokens: 80 });
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.choices.length, 1);
  const reply = whole.choices[0].message;
  assert.equal(reply.role, "assistant");
  assert.ok(reply.content.length > 0);
  const s = await streamed({ temperature: 0, max_tokens: 80 });
  assert.equal(s[0].content, reply.content);
  assert.equal(s[0].finish, whole.choices[0].finish_reason);
  const plain = await client.completions.create({ model, prompt: render(messages), temperature: 0,
                                                  max_tokens: 80, stop: stops });
  assert.equal(reply.content, plain.choices[0].text);
  assert.equal(whole.choices[0].finish_reason, plain.choices[0].finish_reason);
  assert.equal(whole.usage.prompt_tokens, plain.usage.prompt_tokens);
  const props = await (await fetch(`${base}/props`, { headers: { Authorization: `Bearer ${key}` } })).json();
  assert.equal(props.chat_template.startsWith("file ") ? "file" : props.chat_template,
               templateArg === "plain" ? "plain" : "file");
});

await check("chat: the reply stops at the template's stop strings", async () => {
  const long = await chat({ temperature: 0, max_tokens: 400 });
  for (const stop of stops) assert.ok(!long.choices[0].message.content.includes(stop), stop);
  if (long.choices[0].finish_reason === "stop") return;
  assert.equal(long.usage.completion_tokens, 400);
});

await check("chat: same seed same text; seed reported; n choices with their indexes", async () => {
  const a = await chat({ max_tokens: 30, seed: 4 });
  const b = await chat({ max_tokens: 30, seed: 4 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.seed, 4);
  const drawn = await chat({ max_tokens: 30 });
  const again = await chat({ max_tokens: 30, seed: drawn.seed });
  assert.equal(again.choices[0].message.content, drawn.choices[0].message.content);
  const n = await chat({ max_tokens: 30, seed: 4, n: 3 });
  assert.deepEqual(n.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(n.choices[0].message.content, a.choices[0].message.content);
  const s = await streamed({ max_tokens: 30, seed: 4, n: 3 });
  assert.deepEqual(s.map((c) => c.content), n.choices.map((c) => c.message.content));
});

await check("chat: max_completion_tokens, sampling fields, logprobs, usage chunk", async () => {
  const r = await chat({ max_completion_tokens: 3, temperature: 0, stop: ["\n\n"] });
  assert.ok(r.usage.completion_tokens <= 3);
  const biased = await chat({ max_tokens: 5, temperature: 0, logit_bias: { 65: 100 } });
  assert.equal(biased.choices[0].message.content, "AAAAA");
  const lp = await chat({ max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
  const entries = lp.choices[0].logprobs.content;
  assert.equal(entries.length, lp.usage.completion_tokens);
  for (const e of entries) {
    assert.equal(e.top_logprobs.length, 2);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
  }
  const stream = await chat({ max_tokens: 3, stream: true, stream_options: { include_usage: true } });
  let usage = null;
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
  assert.equal(usage.completion_tokens, 3);
});

await check("chat: bad requests are refused naming the field", async () => {
  await expectApiError(client.chat.completions.create({ model, messages: [] }), 400, "messages");
  await expectApiError(client.chat.completions.create({ model, messages: [{ role: "tool", content: "x" }] }),
                       400, "messages[0].role");
  await expectApiError(client.chat.completions.create({
    model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }],
  }), 400, "messages[0].content[0].type");
  await expectApiError(chat({ tools: [{ type: "function", function: { name: "f" } }] }), 400, "tools");
  await expectApiError(chat({ response_format: { type: "json_object" } }), 400, "response_format");
  await expectApiError(chat({ session: "s" }), 400, "session");
  await expectApiError(chat({ max_tokens: 3, max_completion_tokens: 4 }), 400, "max_completion_tokens");
  await expectApiError(chat({ top_logprobs: 2 }), 400, "top_logprobs");
  const parts = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 20,
    messages: [messages[0], { role: "user", content: [{ type: "text", text: messages[1].content }] }],
  });
  const whole = await chat({ temperature: 0, max_tokens: 20 });
  assert.equal(parts.choices[0].message.content, whole.choices[0].message.content);
});

console.log(`${results.failures ? "FAILED" : "passed"}: chat checks`);
process.exit(results.failures ? 1 : 0);
