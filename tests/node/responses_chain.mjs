// Vercel's AI SDK on the Responses door, as an app uses it: generateText opens a
// conversation, then streamText continues it with providerOptions.openai.previousResponseId.
// Then two calls the service refuses. Prints one JSON object: what each call returned (the
// stream's deltas one by one, and any error part it carried, which streamText would
// otherwise only log), and the error each refusal raised.
//
// usage: CONVO_BASE_URL=... CONVO_TOKEN=... node responses_chain.mjs <model> <end user> <first> <second>
import { createOpenAI } from "@ai-sdk/openai";
import { APICallError, generateText, streamText } from "ai";

const [modelId, endUser, first, second] = process.argv.slice(2);
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
        previousResponseId: streamedId,
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
  }),
);
