// Drives /v1/chat/completions with the official openai npm client (pinned in package.json) and
// prints one JSON object with what it observed; test/e2e/chat_test.go asserts on it.
//   node chat.mjs BASE_URL MODEL MODE
// MODE plain: one non-streaming and one streaming request (with usage).
// MODE tools: a request with tools, non-streaming and streaming (tool_calls, reasoning).
// MODE turns: SESSIONS conversations of TURNS turns, each turn resending the history with the
//             previous answers; records the worker (X-Kvgate-Worker) and cached tokens per turn.
import OpenAI from "openai";

const [baseURL, model, mode, sessions = "3", turns = "4"] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const system = {
  role: "system",
  content: "You are a meticulous assistant for a travel agency. Answer in short sentences, cite the city, " +
    "and never invent prices. Prefer trains over flights where the journey takes under five hours.",
};
const out = {};

// Collects a chat stream: content, reasoning, tool calls, finish reason, usage.
async function collect(stream) {
  const s = { chunks: 0, first_role: null, content: "", reasoning_content: "", reasoning: "", tool_calls: [], finish_reason: null, usage: null };
  for await (const chunk of stream) {
    s.chunks++;
    for (const c of chunk.choices ?? []) {
      const d = c.delta ?? {};
      if (s.chunks === 1) s.first_role = d.role ?? null;
      s.content += d.content ?? "";
      s.reasoning_content += d.reasoning_content ?? "";
      s.reasoning += d.reasoning ?? "";
      for (const tc of d.tool_calls ?? []) {
        const t = (s.tool_calls[tc.index] ??= { id: "", type: "", name: "", arguments: "" });
        t.id += tc.id ?? "";
        t.type += tc.type ?? "";
        t.name += tc.function?.name ?? "";
        t.arguments += tc.function?.arguments ?? "";
      }
      if (c.finish_reason) s.finish_reason = c.finish_reason;
    }
    if (chunk.usage) s.usage = chunk.usage;
  }
  return s;
}

function message(m) {
  return {
    role: m.role,
    content: m.content,
    reasoning_content: m.reasoning_content ?? null,
    reasoning: m.reasoning ?? null,
    tool_calls: (m.tool_calls ?? []).map((t) => ({ id: t.id, type: t.type, name: t.function.name, arguments: t.function.arguments })),
  };
}

if (mode === "plain") {
  const messages = [system, { role: "user", content: "Which city is the capital of France? Reply in one sentence, café style ☕." }];
  const { data, response } = await client.chat.completions.create({ model, messages, max_completion_tokens: 64, temperature: 0 }).withResponse();
  out.nonstream = {
    id: data.id, object: data.object, model: data.model, message: message(data.choices[0].message),
    finish_reason: data.choices[0].finish_reason, usage: data.usage, worker: response.headers.get("x-kvgate-worker"),
  };
  const stream = await client.chat.completions.create({ model, messages, max_completion_tokens: 64, stream: true, stream_options: { include_usage: true } });
  out.stream = await collect(stream);
} else if (mode === "tools") {
  const tools = [{
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather of a city",
      parameters: { type: "object", required: ["city"], properties: { unit: { type: "string", enum: ["celsius", "fahrenheit"] }, city: { type: "string" } } },
    },
  }];
  const messages = [system, { role: "user", content: "What is the weather in Paris right now?" }];
  const full = await client.chat.completions.create({ model, messages, tools, max_completion_tokens: 256 });
  out.nonstream = { message: message(full.choices[0].message), finish_reason: full.choices[0].finish_reason };
  out.stream = await collect(await client.chat.completions.create({ model, messages, tools, max_completion_tokens: 256, stream: true }));
} else if (mode === "turns") {
  const questions = [
    "I want to travel from Paris to Lyon next week. What are my options?",
    "How long does the fastest train take, roughly?",
    "And if I continue to Marseille the same day?",
    "Summarise the whole trip in two sentences.",
    "Which station in Marseille would I arrive at?",
    "Thanks. Anything to know about luggage?",
  ];
  out.sessions = [];
  for (let s = 0; s < Number(sessions); s++) {
    const history = [system, { role: "user", content: `Session ${s}: my name is traveller number ${s * 7919}.` }, { role: "assistant", content: "Noted." }];
    const rec = [];
    for (let t = 0; t < Number(turns); t++) {
      history.push({ role: "user", content: questions[t % questions.length] });
      const { data, response } = await client.chat.completions.create({ model, messages: history, max_completion_tokens: 24 }).withResponse();
      const answer = data.choices[0].message.content ?? "";
      history.push({ role: "assistant", content: answer });
      rec.push({
        worker: response.headers.get("x-kvgate-worker"), reason: response.headers.get("x-kvgate-route-reason"),
        matched_blocks: Number(response.headers.get("x-kvgate-matched-blocks") ?? -1),
        prompt_tokens: data.usage?.prompt_tokens ?? 0, cached_tokens: data.usage?.prompt_tokens_details?.cached_tokens ?? 0,
        answer,
      });
    }
    out.sessions.push(rec);
  }
} else {
  throw new Error(`unknown mode ${mode}`);
}

process.stdout.write(JSON.stringify(out) + "\n");
