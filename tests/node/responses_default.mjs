// Vercel's AI SDK on the Responses door as an app uses it by default: no
// previousResponseId, the app's own messages sent back on every call.
// 1. generateText in a multi-step tool loop (the app's get_weather, run by the SDK);
// 2. generateText again with the app's messages (the first call's, with what the SDK
//    answered: it sends the service's own items back as item_reference) and a new one;
// 3. generateText with Output.object (structured output).
// Prints one JSON object: each call's response id, steps and text, and the object.
//
// usage: CONVO_BASE_URL=... CONVO_TOKEN=... node responses_default.mjs <model> <ask> <again> <forecast>
// (<ask> names get_weather, so that the model calls it)
import { createOpenAI } from "@ai-sdk/openai";
import { Output, generateText, jsonSchema, stepCountIs, tool } from "ai";
import { z } from "zod";

const [modelId, ask, again, forecast] = process.argv.slice(2);
const openai = createOpenAI({
  baseURL: `${process.env.CONVO_BASE_URL}/v1`,
  apiKey: process.env.CONVO_TOKEN,
});
const model = openai(modelId); // AI SDK 5 and later: the Responses API

const getWeather = tool({
  description: "The weather in a city.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { query: { type: "string" } },
    required: ["query"],
  }),
  execute: async () => "Foggy in Oslo",
});
const tools = { get_weather: getWeather };

const messages = [{ role: "user", content: ask }];
const first = await generateText({ model, messages, tools, stopWhen: stepCountIs(3) });
messages.push(...first.response.messages, { role: "user", content: again });
const second = await generateText({ model, messages, tools, stopWhen: stepCountIs(3) });

const structured = await generateText({
  model,
  prompt: forecast,
  output: Output.object({ schema: z.object({ city: z.string(), temperature: z.number() }) }),
});

const summary = (result) => ({
  text: result.text,
  responseId: result.providerMetadata.openai.responseId,
  steps: result.steps.map((step) => step.finishReason),
});
console.log(
  JSON.stringify({
    first: summary(first),
    second: summary(second),
    object: structured.output,
  }),
);
