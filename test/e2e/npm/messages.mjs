// Drives /v1/messages with the official @anthropic-ai/sdk client (pinned in package.json) and
// prints one JSON object with what it observed; test/e2e/messages_test.go asserts on it.
//   node messages.mjs BASE_URL MODEL MODE
// MODE plain: messages.create and messages.stream with a system prompt; records the text,
//   the stream's event types and text deltas, usage and the worker (x-kvgate-worker).
// MODE agent: a coding agent's turn: a long cached system prompt (text blocks with
//   cache_control) and a tool; create (the worker calls the tool), countTokens of the
//   follow-up, then the follow-up with the tool_result streamed with messages.stream (the
//   worker answers); records the blocks, stop reasons, usage and workers.
// MODE tool_stream: messages.stream of a turn where the worker calls a tool with nested
//   arguments; records the events, the input_json_delta fragments (the SDK's inputJson
//   events), its last parsed snapshot and the final message.
// MODE errors: a body without max_tokens and a tool_result answering nothing, as the
//   client's typed errors (status, error.type).
// The key is KVGATE_KEY when set (sent as x-api-key, as Anthropic clients send it).
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, model, mode] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: process.env.KVGATE_KEY ?? "unused", maxRetries: 0, timeout: 60_000 });
const system = "You are a careful coding agent working in a Go repository. Read before you write, keep functions " +
  "short, run the tests of every package you touch, and explain each change in one sentence. ".repeat(3);
const tools = [{
  name: "get_weather", description: "Current weather of a city",
  input_schema: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
}];
const out = {};
const blocks = (m) => m.content.map((b) => ({ type: b.type, text: b.text, thinking: b.thinking, id: b.id, name: b.name, input: b.input }));
const summary = (m, response) => ({
  id: m.id, type: m.type, role: m.role, model: m.model, stop_reason: m.stop_reason, stop_sequence: m.stop_sequence,
  content: blocks(m), usage: m.usage, worker: response?.headers.get("x-kvgate-worker") ?? null,
  reason: response?.headers.get("x-kvgate-route-reason") ?? null,
});

// streamed runs messages.stream and records its events, text deltas and final message.
async function streamed(params) {
  const stream = client.messages.stream(params);
  const events = [];
  let text = "";
  stream.on("streamEvent", (e) => events.push(e.type === "content_block_delta" ? `${e.type}:${e.delta.type}` : e.type));
  stream.on("text", (t) => { text += t; });
  const { response } = await stream.withResponse();
  const final = await stream.finalMessage();
  return { ...summary(final, response), events, text };
}

if (mode === "plain") {
  const params = { model, max_tokens: 64, system, messages: [{ role: "user", content: "Which package holds the router?" }] };
  const { data, response } = await client.messages.create(params).withResponse();
  out.create = summary(data, response);
  out.stream = await streamed(params);
} else if (mode === "agent") {
  const sys = [{ type: "text", text: system }, { type: "text", text: "Tools are cheap; call them.", cache_control: { type: "ephemeral" } }];
  const first = [{ role: "user", content: "What is the weather in Paris right now?" }];
  const { data, response } = await client.messages.create({ model, max_tokens: 256, system: sys, tools, messages: first }).withResponse();
  out.first = summary(data, response);
  const use = data.content.find((b) => b.type === "tool_use");
  const messages = [...first, { role: "assistant", content: data.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: JSON.stringify({ temperature: 21, sky: "sunny" }) }] }];
  out.count = (await client.messages.countTokens({ model, system: sys, tools, messages })).input_tokens;
  out.second = await streamed({ model, max_tokens: 256, system: sys, tools, messages });
} else if (mode === "tool_stream") {
  const editTools = [{
    name: "edit_file", description: "Apply edits to a file",
    input_schema: { type: "object", properties: { path: { type: "string" }, edits: { type: "array", items: { type: "object" } }, dry_run: { type: "boolean" } }, required: ["path", "edits"] },
  }];
  const stream = client.messages.stream({ model, max_tokens: 256, tools: editTools, messages: [{ role: "user", content: "Fix the greeting in main.go." }] });
  const events = [];
  const partials = [];
  let snapshot = null;
  stream.on("streamEvent", (e) => events.push(e.type === "content_block_delta" ? `${e.type}:${e.delta.type}` : e.type));
  stream.on("inputJson", (partial, snap) => { partials.push(partial); snapshot = snap; });
  const { response } = await stream.withResponse();
  const final = await stream.finalMessage();
  out.stream = { ...summary(final, response), events, partials, snapshot };
} else if (mode === "errors") {
  const typed = async (params) => {
    try {
      await client.messages.create(params);
      return { status: 200 };
    } catch (e) {
      return { status: e.status ?? null, class: e.constructor.name, type: e.error?.error?.type ?? null, message: e.error?.error?.message ?? String(e) };
    }
  };
  out.no_max_tokens = await typed({ model, messages: [{ role: "user", content: "hi" }] });
  out.orphan_result = await typed({ model, max_tokens: 8, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_nope", content: "x" }] }] });
  out.unknown_model = await typed({ model: "no-such-model", max_tokens: 8, messages: [{ role: "user", content: "hi" }] });
}
console.log(JSON.stringify(out));
