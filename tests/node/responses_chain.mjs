// Vercel's AI SDK on the Responses door, as an app uses it: generateText opens a
// conversation, then streamText continues it with providerOptions.openai.previousResponseId,
// then a generateText tool loop continues it (the app's get_weather, run by the SDK; every
// step names the same previousResponseId). Then two calls the service refuses. Prints one JSON object: what each call returned (the
// stream's deltas one by one, and any error part it carried, which streamText would
// otherwise only log), and the error each refusal raised.
//
// usage: CONVO_BASE_URL=... CONVO_TOKEN=... node responses_chain.mjs <model> <end user> <first> <second> <third>
// (<third> names get_weather, so that the model calls it)
import { createOpenAI } from "@ai-sdk/openai";
import { APICallError, generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const [modelId, endUser, first, second, third] = process.argv.slice(2);
const openai = createOpenAI({
  baseURL: `${process.env.CONVO_BASE_URL}/v1`,
  apiKey: process.env.CONVO_TOKEN,
});
const model = openai(modelId); // AI SDK 5 and later: the Responses API

const generated = await generateText({
  model,
  prompt: first,
  providerOptions: { openai: { safetyIdentifier: endUser } },
});

const streamed = streamText({
  model,
  prompt: second,
  providerOptions: {
    openai: {
      previousResponseId: generated.providerMetadata.openai.responseId,
      safetyIdentifier: endUser,
    },
  },
});
const deltas = [];
const errors = [];
let finishReason = null;
for await (const part of streamed.fullStream) {
  if (part.type === "text-delta") deltas.push(part.text);
  if (part.type === "error") errors.push(String(part.error?.message ?? part.error));
  if (part.type === "finish") finishReason = part.finishReason;
}
const streamedId = errors.length ? null : (await streamed.providerMetadata)?.openai?.responseId;

const getWeather = tool({
  description: "The weather in a city.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  }),
  execute: async () => "Foggy in Oslo",
});
const toolLoop = await generateText({
  model,
  prompt: third,
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(3),
  providerOptions: { openai: { previousResponseId: streamedId, safetyIdentifier: endUser } },
});
const toolLoopId = toolLoop.providerMetadata.openai.responseId;

// What a refused call raises: the SDK's APICallError, with the service's error body.
async function refusal(call) {
  try {
    await generateText({ maxRetries: 0, ...call });
    return null;
  } catch (error) {
    if (!APICallError.isInstance(error)) throw error;
    return { statusCode: error.statusCode, message: error.message, data: error.data };
  }
}
const refusals = {
  unknownModel: await refusal({ model: openai("cap-no-such-capability"), prompt: first }),
  anotherEndUser: await refusal({
    model,
    prompt: second,
    providerOptions: {
      openai: {
        previousResponseId: toolLoopId,
        safetyIdentifier: `${endUser}-someone-else`,
      },
    },
  }),
};

console.log(
  JSON.stringify({
    refusals,
    generated: {
      text: generated.text,
      responseId: generated.providerMetadata.openai.responseId,
      finishReason: generated.finishReason,
      usage: generated.usage,
    },
    streamed: {
      deltas,
      errors,
      finishReason,
      responseId: streamedId,
    },
    toolLoop: {
      text: toolLoop.text,
      steps: toolLoop.steps.map((step) => step.finishReason),
      toolResults: toolLoop.steps.flatMap((step) => step.toolResults.map((r) => r.output)),
      responseId: toolLoopId,
    },
  }),
);
