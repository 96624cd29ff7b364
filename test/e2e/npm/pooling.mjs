// Drives the pooling endpoints through the gateway with the official openai npm client
// (pinned in package.json) and prints one JSON object with what it observed;
// test/e2e/pooling_test.go asserts on it.
//   node pooling.mjs BASE_URL MODEL
// embeddings.create with the client's default encoding (base64, decoded by the client) and
// with encoding_format float; a rerank call (POST /rerank through the client's post);
// audio.transcriptions.create (a multipart upload; plain and stream) and
// audio.translations.create.
import OpenAI, { toFile } from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.KVGATE_KEY ?? "unused", maxRetries: 0, timeout: 60_000 });
const out = {};
const { data: emb, response } = await client.embeddings.create({ model, input: ["The quick brown fox", "jumps over the lazy dog", "The quick brown fox"] }).withResponse();
out.embeddings = { model: emb.model, object: emb.object, vectors: emb.data.map((d) => d.embedding), usage: emb.usage, worker: response.headers.get("x-kvgate-worker") };
const floats = await client.embeddings.create({ model, input: "The quick brown fox", encoding_format: "float" });
out.float = floats.data[0].embedding;
try {
  await client.embeddings.create({ model: "no-such-model", input: "x" });
  out.unknown = 200;
} catch (e) {
  out.unknown = e.status ?? String(e);
}
out.rerank = await client.post("/rerank", { body: { model, query: "capital of France", documents: ["Berlin is in Germany", "capital of France: Paris", "Germany and France"] } });
const clip = () => toFile(Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 256)), "clip.wav", { type: "audio/wav" });
out.transcription = (await client.audio.transcriptions.create({ model, file: await clip(), language: "en" })).text;
let streamed = "";
for await (const ev of await client.audio.transcriptions.create({ model, file: await clip(), stream: true })) {
  streamed += ev.choices?.[0]?.delta?.content ?? "";
}
out.transcription_stream = streamed;
out.translation = (await client.audio.translations.create({ model, file: await clip() })).text;
console.log(JSON.stringify(out));
