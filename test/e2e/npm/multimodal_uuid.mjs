// Drives a multi-turn image chat whose image carries a uuid through /v1/chat/completions with the
// official openai npm client and prints one JSON object with what it observed;
// test/e2e/multimodal_test.go (TestMultimodalChatUUID) asserts on it.
//   node multimodal_uuid.mjs BASE_URL ADMIN_URL MODEL IMAGE_DATA_URL
// It sends four turns of one conversation with the image (uuid "photo-1"), then the first turn
// with the same pixels under another uuid ("photo-2"), and records /debug/route for the last
// turn and for the first turn with and without the uuid.
import OpenAI from "openai";

const [baseURL, adminURL, model, image] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const system = {
  role: "system",
  content: "You describe photographs for a museum's audio guide. Describe what is visible, in order from the " +
    "foreground to the background, name colours precisely, and keep each description under one hundred words.",
};
const ask = (uuid) => {
  const part = { type: "image_url", image_url: { url: image } };
  if (uuid) part.uuid = uuid;
  return {
    role: "user",
    content: [
      { type: "text", text: "Please describe this picture." },
      part,
      { type: "text", text: "Start with the largest shape, then the smaller ones, and say which colour covers most of the picture." },
    ],
  };
};

function record(data, response) {
  return {
    content: data.choices[0].message.content ?? "", finish_reason: data.choices[0].finish_reason,
    worker: response.headers.get("x-kvgate-worker"), reason: response.headers.get("x-kvgate-route-reason"),
    matched_blocks: Number(response.headers.get("x-kvgate-matched-blocks") ?? -1),
    prompt_tokens: data.usage?.prompt_tokens ?? 0, cached_tokens: data.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

async function send(messages) {
  const { data, response } = await client.chat.completions.create({ model, messages, max_completion_tokens: 24, temperature: 0 }).withResponse();
  return record(data, response);
}

async function explain(messages) {
  const r = await fetch(adminURL + "/debug/route", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, messages }) });
  return r.json();
}

const out = { turns: [] };
const conv = [system, ask("photo-1")];
const followUps = ["Which colour stands out most?", "Is there anything in the background?", "Describe it again in one sentence."];
for (let i = 0; i <= followUps.length; i++) {
  const t = await send(conv);
  out.turns.push(t);
  if (i < followUps.length) conv.push({ role: "assistant", content: t.content }, { role: "user", content: followUps[i] });
}
out.debug_last = await explain(conv);
out.other_uuid = await send([system, ask("photo-2")]);
out.debug_uuid = await explain([system, ask("photo-1")]);
out.debug_no_uuid = await explain([system, ask(null)]);
process.stdout.write(JSON.stringify(out) + "\n");
