// Drives the gateway's /v1/responses with the Vercel AI SDK (ai with @ai-sdk/openai, pinned):
// generateText and streamText with one tool, each to completion (the tool call, then the
// answer, as a second step that refers to the first step's stored items). Prints one JSON.
//   node aisdk.mjs BASE_URL MODEL
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const calls = [];
const tools = {
  get_weather: tool({
    description: "Current weather of a city", inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => { calls.push(city); return { city, temperature: 21, sky: "sunny" }; },
  }),
};
const prompt = "What is the weather in Paris right now?";
const g = await generateText({ model: openai.responses(model), tools, stopWhen: stepCountIs(3), prompt, maxRetries: 0 });
const s = streamText({ model: openai.responses(model), tools, stopWhen: stepCountIs(3), prompt, maxRetries: 0 });
let streamed = "";
for await (const t of s.textStream) streamed += t;
const steps = await s.steps;
process.stdout.write(JSON.stringify({
  calls,
  generate: { text: g.text, steps: g.steps.length, finish: g.finishReason, tool_calls: g.steps.flatMap((st) => st.toolCalls.map((c) => c.toolName)), usage: g.totalUsage },
  stream: { text: streamed, steps: steps.length, finish: await s.finishReason, tool_calls: steps.flatMap((st) => st.toolCalls.map((c) => c.toolName)) },
}) + "\n");
