"""Any OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM, llama.cpp).

Standard library only (http.client): no SDK to import at cold start and no new dependency.
Streaming reads the server-sent events line by line, so deltas reach the caller as the
server produces them.

Tools (``step``): the request offers ``tools`` (functions with their JSON Schema); a reply
carries ``tool_calls`` (streamed as pieces, accumulated by index), answered in the next
call by ``role: "tool"`` messages. The final call of a loop that ran out of steps sends
``tool_choice: "none"`` and asks in words for the answer. (v4) The app's ``tool_choice``
and ``parallel_tool_calls`` are sent as given, its structured output
(``response_format``) too, and a stateless client's own tool exchanges in its history
(an assistant's ``tool_calls``, ``tool`` messages) reach the model as they are.

The endpoint and the key come from an operator's connection, never from a workspace;
``openai_http`` sends the requests and reads the answers within bounds.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from convo_memory.adapters.deadline_http import Deadline, Exchange
from convo_memory.adapters.providers.attachment_blocks import openai_form, openai_parts
from convo_memory.adapters.providers.openai_http import (
    MAX_COMPLETION_BYTES,
    MAX_STREAM_BYTES,
    ChatCompletionsEndpoint,
)
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import Completion, FinishReason, ModelStep, TokenUsage
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.tools import (
    AUTO,
    ToolChoice,
    ToolDefinition,
    ToolRequest,
    ToolRound,
    tool_request,
)
from convo_memory.ports import TextSink

FINAL_ANSWER_REQUEST = (
    "You have used every tool call this turn allows. Answer my message now from the tool "
    "results above, without calling any tool."
)


class OpenAICompatibleProvider:
    """POSTs ``{base_url}/chat/completions``; ``base_url`` is like ``http://host:11434/v1``.

    ``timeout`` (seconds) bounds a whole completion, a stream's head (everything up to
    the end of its headers) and every wait for more of a stream; a turn's own deadline
    bounds all of a streamed answer.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | Callable[[], str | None] | None = None,
        timeout: float = 25.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        *,
        max_completion_bytes: int = MAX_COMPLETION_BYTES,
        max_stream_bytes: int = MAX_STREAM_BYTES,
        stream_usage: bool = False,
        cache_key_for: Callable[[str], str | None] | None = None,
        images_by_url: bool = False,
    ) -> None:
        """``api_key`` is the key, or a function that returns it on each call (so that a
        rotated secret is picked up); ``timeout`` (seconds) bounds a whole non-streaming
        completion, a stream's head and each wait for more of a stream; ``stream_usage``
        asks a stream for its token counts (``stream_options.include_usage``), which
        some OpenAI-compatible servers refuse; ``cache_key_for`` gives a prompt's
        ``prompt_cache_key`` from its lineage (none without it)."""
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            # A ProviderError (502 with a clear message), not a crash of the turn.
            raise ProviderError("Model provider error: the connection's baseUrl is not http(s).")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.stream_usage = stream_usage
        self.cache_key_for = cache_key_for
        # (v5) PDFs as files, text documents as text; images as data, or by URL.
        self.attachment_form = openai_form(images_by_url)
        self._endpoint = ChatCompletionsEndpoint(
            self.url,
            api_key if callable(api_key) else (lambda: api_key or None),
            timeout,
            max_completion_bytes,
            max_stream_bytes,
        )

    # Structured output (``response_format``) reaches this provider (v4).
    takes_response_format = True

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatibleProvider(url={self.url!r}, model={self.model!r})"

    def payload(self, prompt: Prompt, *, stream: bool) -> dict[str, Any]:
        """The JSON body: the system text first, then the prompt's messages."""
        messages: list[dict[str, Any]] = []
        if prompt.system:
            messages.append({"role": "system", "content": prompt.system})
        messages.extend(_message_json(m) for m in prompt.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": stream}
        if prompt.options.response_format is not None:
            body["response_format"] = dict(prompt.options.response_format)
        if stream and self.stream_usage:
            # The token counts arrive in one more chunk, after the last choice.
            body["stream_options"] = {"include_usage": True}
        # The client's options (OpenAI-compatible door) within the connection's settings.
        body.update(prompt.options.call_settings(self.max_tokens, self.temperature))
        key = self.cache_key_for(prompt.lineage) if self.cache_key_for and prompt.lineage else None
        if key:
            # One per conversation: its requests reach the machines that cache its prefix.
            body["prompt_cache_key"] = key
        return body

    def tool_payload(
        self,
        prompt: Prompt,
        rounds: Sequence[ToolRound],
        tools: Sequence[ToolDefinition],
        *,
        final: bool = False,
        stream: bool = False,
        choice: ToolChoice = AUTO,
    ) -> dict[str, Any]:
        """The JSON body of a tool loop's call: the prompt, this turn's rounds (the
        assistant's ``tool_calls`` and a ``tool`` message per result), the tools and how
        they may be called."""
        body = self.payload(prompt, stream=stream)
        messages: list[dict[str, Any]] = body["messages"]
        for round_ in rounds:
            messages.append(
                {
                    "role": "assistant",
                    "content": round_.text or None,
                    "tool_calls": [_call_json(request) for request in round_.requests],
                }
            )
            messages.extend(
                {"role": "tool", "tool_call_id": reply.call_id, "content": reply.output}
                for reply in round_.replies
            )
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": dict(tool.input_schema),
                    },
                }
                for tool in tools
            ]
            if final:
                body["tool_choice"] = "none"
            else:
                body.update(_choice_json(choice))
        if final and rounds:
            messages.append({"role": "user", "content": FINAL_ANSWER_REQUEST})
        return body

    def step(
        self,
        prompt: Prompt,
        rounds: Sequence[ToolRound],
        tools: Sequence[ToolDefinition],
        *,
        timeout: float,
        final: bool = False,
        on_text: TextSink | None = None,
        choice: ToolChoice = AUTO,
    ) -> ModelStep:
        """One chat-completions call of the tool loop (streamed with ``on_text``), over
        by ``timeout`` (the time left of the turn)."""
        left = max(0.001, timeout)
        streamed = on_text is not None
        body = self.tool_payload(prompt, rounds, tools, final=final, stream=streamed, choice=choice)
        if on_text is None:
            message, usage, finish = self._message(body, min(self.timeout, left))
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list):
                calls = []
            requests = tuple(_tool_request(i, call) for i, call in enumerate(calls))
            return ModelStep(text, requests, usage, finish)
        return self._streamed_step(body, left, on_text)

    def _streamed_step(self, body: dict[str, Any], left: float, on_text: TextSink) -> ModelStep:
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        state: dict[str, bool] = {}
        finished = False
        finish: FinishReason = "stop"
        usage: TokenUsage | None = None
        with self._open_stream(body, left) as response:
            for chunk in self._endpoint.events(response, state):
                usage = usage_of(chunk.get("usage")) or usage
                choices = chunk.get("choices") or []
                if not choices or not isinstance(choices[0], dict):
                    continue
                finished = finished or bool(choices[0].get("finish_reason"))
                finish = finish_of(choices[0]) if choices[0].get("finish_reason") else finish
                delta = choices[0].get("delta") or {}
                if not isinstance(delta, dict):
                    continue
                content = delta.get("content")
                if isinstance(content, str) and content:
                    text.append(content)
                    on_text(content)
                for piece in delta.get("tool_calls") or []:
                    if not isinstance(piece, dict):
                        continue
                    call = calls.setdefault(
                        int(piece.get("index", len(calls))),
                        {"id": "", "function": {"name": "", "arguments": ""}},
                    )
                    call["id"] = piece.get("id") or call["id"]
                    function = piece.get("function") or {}
                    call["function"]["name"] += function.get("name") or ""
                    call["function"]["arguments"] += function.get("arguments") or ""
        if not finished and not state.get("done"):
            raise ProviderError(
                "Model provider error: the OpenAI-compatible stream ended before it finished."
            )
        requests = tuple(_tool_request(i, call) for i, call in sorted(calls.items()))
        return ModelStep("".join(text), requests, usage, finish)

    def complete(self, prompt: Prompt) -> Completion:
        """Non-streaming call: the answer is ``choices[0].message.content``."""
        message, usage, finish = self._message(self.payload(prompt, stream=False), self.timeout)
        content = message.get("content")
        return Completion(
            text=content if isinstance(content, str) else "", usage=usage, finish=finish
        )

    def _message(
        self, body: dict[str, Any], timeout: float
    ) -> tuple[dict[str, Any], TokenUsage | None, FinishReason]:
        """``choices[0].message`` of a non-streaming call, within ``timeout`` seconds, the
        tokens it reports and how it ended."""
        with self._endpoint.open(body, Deadline(timeout)) as response:
            raw = self._endpoint.read_body(response)
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ProviderError(
                "Model provider error: the OpenAI-compatible endpoint returned an "
                "unexpected response body."
            ) from exc
        return message, usage_of(data.get("usage")), finish_of(choice)

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """``stream: true``: yield each ``choices[0].delta.content`` until ``[DONE]``."""
        with self._open_stream(self.payload(prompt, stream=True), None) as response:
            finished = False
            state: dict[str, bool] = {}
            for chunk in self._endpoint.events(response, state):
                text, done = _delta_text(chunk)
                finished = finished or done
                if text:
                    yield text
            if not finished and not state.get("done"):
                raise ProviderError(
                    "Model provider error: the OpenAI-compatible stream ended before it finished."
                )

    def _open_stream(self, body: dict[str, Any], left: float | None) -> Exchange:
        """A stream's head within ``timeout``; then its body within ``left`` (the turn's
        time, when known) and never quiet for longer than ``timeout``."""
        head_seconds = self.timeout if left is None else min(self.timeout, left)
        deadline = Deadline(head_seconds)
        response = self._endpoint.open(body, deadline)
        # The same deadline, moved on for the body (the socket reads by it).
        body_seconds = float("inf") if left is None else left
        deadline.postpone(body_seconds - head_seconds, idle=self.timeout)
        return response

    # --- internals -------------------------------------------------------------------


def _call_json(request: ToolRequest) -> dict[str, Any]:
    return {
        "id": request.call_id,
        "type": "function",
        "function": {
            "name": request.name,
            "arguments": json.dumps(dict(request.input), ensure_ascii=False),
        },
    }


def _message_json(message: ChatMessage) -> dict[str, Any]:
    """A prompt message as chat completions take it (a client's tool exchange too)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.tool_calls:
        return {
            "role": message.role,
            "content": message.content or None,
            "tool_calls": [_call_json(request) for request in message.tool_calls],
        }
    if message.attachments:  # (v5) text, image and file parts
        return {"role": message.role, "content": openai_parts(message.content, message.attachments)}
    return {"role": message.role, "content": message.content}


def _choice_json(choice: ToolChoice) -> dict[str, Any]:
    """``tool_choice`` and ``parallel_tool_calls`` as the app asked (nothing for the
    defaults: servers that know neither are not sent them)."""
    fields: dict[str, Any] = {}
    if choice.mode == "function":
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.function}}
    elif choice.mode != "auto":
        fields["tool_choice"] = choice.mode
    if choice.parallel is not None:
        fields["parallel_tool_calls"] = choice.parallel
    return fields


def _delta_text(chunk: dict[str, Any]) -> tuple[str, bool]:
    """(delta text, whether this chunk carried a finish_reason)."""
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return "", False  # e.g. a usage-only chunk
    choice = choices[0]
    delta = choice.get("delta") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    return (content if isinstance(content, str) else ""), bool(choice.get("finish_reason"))


def _tool_request(index: int, call: Any) -> ToolRequest:
    """A ``tool_calls`` entry as a request; its ``arguments`` are a JSON string."""
    call = call if isinstance(call, dict) else {}
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    call_id = str(call.get("id") or f"call_{index}")
    name = str(function.get("name") or "")
    return tool_request(call_id, name, function.get("arguments"), "arguments")


def finish_of(choice: Any) -> FinishReason:
    """``length`` when a choice stopped at its token limit, else ``stop``."""
    return (
        "length" if isinstance(choice, dict) and choice.get("finish_reason") == "length" else "stop"
    )


def usage_of(usage: Any) -> TokenUsage | None:
    """A chat completion's ``usage`` (prompt and completion tokens, and the prompt tokens
    the provider read from its automatic prompt cache), when reported."""
    if not isinstance(usage, dict):
        return None
    try:
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return TokenUsage(
            int(usage["prompt_tokens"]), int(usage["completion_tokens"]), int(cached or 0)
        )
    except (KeyError, TypeError, ValueError):
        return None
