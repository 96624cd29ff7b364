// Drives image chats through /v1/chat/completions with the official openai npm client (pinned in
// package.json) and prints one JSON object with what it observed; test/e2e/multimodal_test.go
// asserts on it.
//   node multimodal.mjs BASE_URL ADMIN_URL MODEL IMAGE_DATA_URL OTHER_IMAGE_DATA_URL [TEXT_BASE_URL TEXT_MODEL]
// It sends: an image chat (non-streaming), the same streaming with usage, the same again, the
// conversation's next turn, a chat with the other image and the same text, and, when
// TEXT_BASE_URL is given, the image chat to a text-only model there (recording its error); last
// it records the gateway's /debug/route explanation of the first chat (ADMIN_URL).
import OpenAI from "openai";

const [baseURL, adminURL, model, image, other, textBaseURL, textModel] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const system = {
  role: "system",
  content: "You describe photographs for a museum's audio guide. Describe what is visible, in order from the " +
    "foreground to the background, name colours precisely, estimate sizes against familiar objects, never " +
    "guess at the identity of people, say when something is unclear, and keep each description under one " +
    "hundred words. Prefer plain words over technical terms, and end with one sentence on the mood of the " +
    "picture. Visitors listen while they walk, so avoid long lists and parenthetical remarks.",
};
const ask = (url) => ({
  role: "user",
  content: [
    { type: "text", text: "Please describe this picture." },
    { type: "image_url", image_url: { url } },
    { type: "text", text: "Start with the largest shape, then the smaller ones, and say which colour covers most of the picture." },
  ],
});
const out = {};

function record(data, response) {
  return {
    content: data.choices[0].message.content ?? "", finish_reason: data.choices[0].finish_reason,
    worker: response.headers.get("x-kvgate-worker"), reason: response.headers.get("x-kvgate-route-reason"),
    matched_blocks: Number(response.headers.get("x-kvgate-matched-blocks") ?? -1),
    prompt_tokens: data.usage?.prompt_tokens ?? 0, cached_tokens: data.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

async function send(messages) {
  const { data, response } = await client.chat.completions.create({ model, messages, max_completion_tokens: 32, temperature: 0 }).withResponse();
  return record(data, response);
}

const first = [system, ask(image)];
out.first = await send(first);
const stream = await client.chat.completions.create({ model, messages: first, max_completion_tokens: 32, stream: true, stream_options: { include_usage: true } });
out.stream = { chunks: 0, first_role: null, content: "", finish_reason: null, usage: null };
for await (const chunk of stream) {
  out.stream.chunks++;
  for (const c of chunk.choices ?? []) {
    if (out.stream.chunks === 1) out.stream.first_role = c.delta?.role ?? null;
    out.stream.content += c.delta?.content ?? "";
    if (c.finish_reason) out.stream.finish_reason = c.finish_reason;
  }
  if (chunk.usage) out.stream.usage = chunk.usage;
}
out.repeat = await send(first);
out.next_turn = await send([...first, { role: "assistant", content: out.first.content }, { role: "user", content: "Which colour stands out most?" }]);
out.other_image = await send([system, ask(other)]);
if (textBaseURL) {
  const text = new OpenAI({ baseURL: textBaseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
  try {
    await text.chat.completions.create({ model: textModel, messages: first, max_completion_tokens: 8 });
    out.text_model = { status: 200 };
  } catch (e) {
    out.text_model = { status: e.status ?? -1, message: e.error?.message ?? e.message };
  }
}
const dbg = await fetch(adminURL + "/debug/route", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, messages: first }) });
out.debug_route = await dbg.json();
process.stdout.write(JSON.stringify(out) + "\n");
