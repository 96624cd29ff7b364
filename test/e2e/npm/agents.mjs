// Runs an agent of the OpenAI Agents SDK (@openai/agents, pinned) with one function tool to
// completion against the gateway's /v1/responses, twice: a first run, and a second that
// continues it by previousResponseId. Prints what it observed as one JSON object.
//   node agents.mjs BASE_URL MODEL
import OpenAI from "openai";
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 }));
setOpenAIAPI("responses");
setTracingDisabled(true);
const calls = [];
const getWeather = tool({
  name: "get_weather", description: "Current weather of a city", parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => { calls.push(city); return JSON.stringify({ city, temperature: 21, sky: "sunny" }); },
});
const agent = new Agent({ name: "Weather agent", instructions: "Answer weather questions with the get_weather tool.", tools: [getWeather], model });
const first = await run(agent, "What is the weather in Paris right now?");
const second = await run(agent, "And is it warm enough for a picnic?", { previousResponseId: first.lastResponseId });
const items = (r) => r.newItems.map((i) => i.type);
process.stdout.write(JSON.stringify({
  calls, first: { final: first.finalOutput, last_response_id: first.lastResponseId, items: items(first), responses: first.rawResponses.length },
  second: { final: second.finalOutput, last_response_id: second.lastResponseId, items: items(second), responses: second.rawResponses.length },
}) + "\n");
