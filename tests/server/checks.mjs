// What the server's Node tests share: the official OpenAI client on the server under test, and
// named checks whose failures are counted (each test exits 1 when any failed).
import OpenAI from "openai";

export const model = "shakespeare";

export function openaiClient(base, key) {
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60_000 });
}

export const results = { failures: 0 };

/// Runs one named check: "ok NAME (ms)", or "FAIL NAME: stack" and one more failure.
export async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.failures += 1;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
