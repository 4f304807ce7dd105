"""The doors: each reads its requests into a turn command and frames the result back
(predict and its streams, a session's messages, the OpenAI-compatible chat completions
and Responses), plus the web plumbing they share (SSE, HTTP framing, CORS) and the
Function URL's streaming server. Nothing outside the doors and the handlers imports a door."""
