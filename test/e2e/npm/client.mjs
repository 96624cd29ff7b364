// Drives the gateway with the official openai npm client (pinned in package.json) and prints one
// JSON object with what it observed; test/e2e/openai_client_test.go asserts on it.
//   node client.mjs BASE_URL MODEL PROMPT
import OpenAI from "openai";

const [baseURL, model, prompt] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const full = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
out.nonstream = {
  id: full.id,
  object: full.object,
  model: full.model,
  text: full.choices[0].text,
  finish_reason: full.choices[0].finish_reason,
  usage: full.usage,
};

const stream = await client.completions.create({
  model, prompt, max_tokens: 16, stream: true, stream_options: { include_usage: true },
});
const s = { chunks: 0, text: "", finish_reason: null, usage: null, arrivals_ms: [] };
const t0 = Date.now();
for await (const chunk of stream) {
  s.chunks++;
  s.arrivals_ms.push(Date.now() - t0);
  for (const c of chunk.choices ?? []) {
    s.text += c.text ?? "";
    if (c.finish_reason) s.finish_reason = c.finish_reason;
  }
  if (chunk.usage) s.usage = chunk.usage;
}
out.stream = s;

const ids = await client.completions.create({ model, prompt: [1, 2, 3, 4, 5, 6, 7, 8], max_tokens: 4 });
out.token_ids = { text: ids.choices[0].text, usage: ids.usage };

try {
  await client.completions.create({ model: "no-such-model", prompt, max_tokens: 4 });
  out.unknown_model = { status: 200 };
} catch (e) {
  out.unknown_model = { status: e.status ?? null, type: e.constructor?.name, message: e.message };
}

process.stdout.write(JSON.stringify(out) + "\n");
