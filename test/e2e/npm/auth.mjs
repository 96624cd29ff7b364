// Drives the gateway's client authentication and limits with the official openai npm client
// (pinned in package.json) and prints one JSON object; test/e2e/security_test.go asserts on it.
//   node auth.mjs auth  BASE_URL MODEL PROMPT KEY WRONG_KEY KIND
//   node auth.mjs limit BASE_URL MODEL PROMPT KEY N KIND
// KIND is the endpoint: "completions", or "chat" (chat.completions, with PROMPT as one user
// message), so the same checks run on each.
import OpenAI from "openai";

const [mode, baseURL, model, prompt, key, arg, kind = "completions"] = process.argv.slice(2);

function client(apiKey) {
  return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
}

// request sends one request of KIND and returns its text and finish reason.
async function request(c, { stream, maxTokens }) {
  const body = { model, max_tokens: maxTokens, temperature: 0 };
  const call = kind === "chat"
    ? (b) => c.chat.completions.create({ ...b, messages: [{ role: "user", content: prompt }] })
    : (b) => c.completions.create({ ...b, prompt });
  const textOf = (choice) => (kind === "chat" ? (stream ? choice.delta?.content : choice.message?.content) : choice.text) ?? "";
  if (!stream) {
    const r = await call(body);
    return { text: textOf(r.choices[0]), finish_reason: r.choices[0].finish_reason, chunks: 0 };
  }
  const s = await call({ ...body, stream: true });
  const out = { text: "", finish_reason: null, chunks: 0 };
  for await (const chunk of s) {
    out.chunks++;
    for (const ch of chunk.choices ?? []) {
      out.text += textOf(ch);
      if (ch.finish_reason) out.finish_reason = ch.finish_reason;
    }
  }
  return out;
}

// failure describes an API error as the client surfaces it.
function failure(e) {
  return {
    status: e.status ?? null,
    class: e.constructor?.name,
    code: e.code ?? null,
    type: e.type ?? null,
    retry_after: e.headers?.get?.("retry-after") ?? null,
    retry_after_ms: e.headers?.get?.("retry-after-ms") ?? null,
    message: e.message,
  };
}

const out = { kind };
if (mode === "auth") {
  try {
    await request(client(arg), { stream: false, maxTokens: 4 });
    out.wrong = { status: 200 };
  } catch (e) {
    out.wrong = failure(e);
  }
  const good = client(key);
  out.plain = await request(good, { stream: false, maxTokens: 8 });
  out.stream = await request(good, { stream: true, maxTokens: 8 });
} else if (mode === "limit") {
  const c = client(key);
  out.statuses = [];
  for (let i = 0; i < Number(arg); i++) {
    try {
      await request(c, { stream: false, maxTokens: 1 });
      out.statuses.push(200);
    } catch (e) {
      out.statuses.push(e.status ?? 0);
      if (!out.limited) out.limited = failure(e);
    }
  }
} else {
  throw new Error(`unknown mode ${mode}`);
}
process.stdout.write(JSON.stringify(out) + "\n");
