// Vercel's AI SDK on the Responses door with an image: generateText sends a user message
// with an image part (the SDK sends it as input_image, a data: URL), then a second call
// continues the conversation with providerOptions.openai.previousResponseId. Prints one
// JSON object: each call's text and response id.
//
// usage: CONVO_BASE_URL=... CONVO_TOKEN=... node responses_image.mjs <model> <end user> <png base64>
import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";

const [modelId, endUser, pngBase64] = process.argv.slice(2);
const openai = createOpenAI({
  baseURL: `${process.env.CONVO_BASE_URL}/v1`,
  apiKey: process.env.CONVO_TOKEN,
});
const model = openai(modelId);

const first = await generateText({
  model,
  messages: [
    {
      role: "user",
      content: [
        { type: "text", text: "What is in this picture?" },
        { type: "image", image: Buffer.from(pngBase64, "base64"), mediaType: "image/png" },
      ],
    },
  ],
  providerOptions: { openai: { safetyIdentifier: endUser } },
});
const second = await generateText({
  model,
  prompt: "And what colour is it?",
  providerOptions: {
    openai: { previousResponseId: first.providerMetadata.openai.responseId, safetyIdentifier: endUser },
  },
});
console.log(
  JSON.stringify({
    first: { text: first.text, responseId: first.providerMetadata.openai.responseId },
    second: { text: second.text, responseId: second.providerMetadata.openai.responseId },
  }),
);
