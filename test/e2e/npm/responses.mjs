// Drives /v1/responses with the official openai npm client (pinned in package.json) and prints
// one JSON object with what it observed; test/e2e/responses_test.go asserts on it.
//   node responses.mjs BASE_URL MODEL MODE [SESSIONS TURNS]
// MODE tools: create with a function tool (the worker calls it), a follow-up by
//   previous_response_id with the function_call_output (the worker answers), streamed with
//   responses.stream; then retrieve, input_items.list, delete, and retrieve again (404).
// MODE turns: SESSIONS conversations of TURNS turns, each turn by previous_response_id,
//   alternating create and create(stream); records the worker (x-kvgate-worker) and usage.
import OpenAI from "openai";

const [baseURL, model, mode, sessions = "3", turns = "4"] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.KVGATE_KEY ?? "unused", maxRetries: 0, timeout: 60_000 });
const tools = [{
  type: "function", name: "get_weather", description: "Current weather of a city", strict: false,
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const out = {};
// text is the output messages' text (output_text is the client's convenience on create only).
const text = (r) => r.output.filter((o) => o.type === "message").flatMap((o) => o.content.map((c) => c.text ?? "")).join("");
const summary = (r) => ({
  id: r.id, object: r.object, status: r.status, model: r.model, previous_response_id: r.previous_response_id ?? null,
  output: r.output.map((o) => ({ type: o.type, id: o.id, status: o.status ?? null, text: o.type === "message" ? o.content.map((c) => c.text).join("") : undefined,
    reasoning: o.type === "reasoning" ? (o.content ?? []).map((c) => c.text).join("") : undefined, name: o.name, call_id: o.call_id, arguments: o.arguments })),
  output_text: text(r), usage: r.usage,
});

if (mode === "tools") {
  const { data: first, response: h1 } = await client.responses.create({
    model, instructions: "You are a weather assistant.", input: "What is the weather in Paris right now?", tools,
  }).withResponse();
  out.first = { ...summary(first), worker: h1.headers.get("x-kvgate-worker") };
  const call = first.output.find((o) => o.type === "function_call");
  const events = [];
  const stream = client.responses.stream({
    model, previous_response_id: first.id, tools,
    input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ temperature: 21, sky: "sunny" }) }],
  });
  stream.on("event", (e) => events.push({ type: e.type, seq: e.sequence_number }));
  let deltas = "";
  stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const second = await stream.finalResponse();
  out.second = { ...summary(second), events, deltas };
  out.retrieved = summary(await client.responses.retrieve(second.id));
  const items = [];
  for await (const it of client.responses.inputItems.list(second.id, { order: "asc" })) items.push({ type: it.type, id: it.id, call_id: it.call_id ?? null });
  out.input_items = items;
  const firstItems = [];
  for await (const it of client.responses.inputItems.list(first.id)) firstItems.push({ type: it.type, role: it.role ?? null });
  out.first_input_items = firstItems;
  await client.responses.delete(first.id);
  try {
    await client.responses.retrieve(first.id);
    out.after_delete = "found";
  } catch (e) {
    out.after_delete = e.status ?? String(e);
  }
} else if (mode === "turns") {
  const questions = [
    "I want to travel from Paris to Lyon next week. What are my options?",
    "How long does the fastest train take, roughly?",
    "And if I continue to Marseille the same day?",
    "Summarise the whole trip in two sentences.",
    "Which station in Marseille would I arrive at?",
  ];
  out.sessions = [];
  for (let s = 0; s < Number(sessions); s++) {
    let prev = null;
    const rec = [];
    for (let t = 0; t < Number(turns); t++) {
      const params = {
        model, max_output_tokens: 48,
        instructions: "You are a meticulous assistant for a travel agency. Answer in short sentences and cite the city.",
        input: t === 0 ? `Session ${s}: my name is traveller number ${s * 7919}. ${questions[0]}` : questions[t % questions.length],
        ...(prev ? { previous_response_id: prev } : {}),
      };
      let r, headers;
      if (t % 2 === 1) {
        const { data: stream, response } = await client.responses.create({ ...params, stream: true }).withResponse();
        headers = response.headers;
        for await (const e of stream) if (e.type === "response.completed" || e.type === "response.incomplete") r = e.response;
      } else {
        const { data, response } = await client.responses.create(params).withResponse();
        r = data;
        headers = response.headers;
      }
      prev = r.id;
      rec.push({ id: r.id, status: r.status, worker: headers.get("x-kvgate-worker"), reason: headers.get("x-kvgate-route-reason"),
        matched_blocks: Number(headers.get("x-kvgate-matched-blocks") ?? -1), input_tokens: r.usage?.input_tokens ?? 0,
        cached_tokens: r.usage?.input_tokens_details?.cached_tokens ?? 0, reasoning_tokens: r.usage?.output_tokens_details?.reasoning_tokens ?? 0,
        text: text(r), types: r.output.map((o) => o.type) });
    }
    out.sessions.push(rec);
  }
} else {
  throw new Error(`unknown mode ${mode}`);
}
process.stdout.write(JSON.stringify(out) + "\n");
