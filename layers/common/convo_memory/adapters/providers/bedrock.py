"""Amazon Bedrock through the Converse / ConverseStream API, tool calling included.

The bedrock-runtime client is injected (or built lazily on first use, with the
connection's timeout: see ``convo_memory.adapters.aws_clients``), so importing this
module never imports boto3. botocore errors become ``ProviderError``
chosen by error code, never by message text.

Prompt caching: with ``prompt_caching`` (a connection whose model caches prompts, see
``Connection.caches_prompts``), a ``cachePoint`` block (with the connection's
``promptCacheTtl``, when set) follows the system text (every part of it is stable across
a session's turns, and across a summarizer's calls) and, when the next turn is expected to
begin with them (``Prompt.replay_reused``: the window keeps its start), the replayed
messages, so that the provider reads the previous turn's prefix from its cache. A write
costs more than plain input (1.25 times on Claude), so messages the next turn will not
replay (a window that moves every turn, the last turn before a step) are not marked. Usage's
``cacheReadInputTokens`` and ``cacheWriteInputTokens`` are reported with the tokens.

Tools (``step``): ``toolConfig`` offers each tool with its ``inputSchema``; a reply whose
``stopReason`` is ``tool_use`` carries ``toolUse`` blocks, answered in the next call by
``toolResult`` blocks. Bedrock requires ``toolConfig`` whenever the messages hold such
blocks, so the final call of a loop that ran out of steps keeps it and asks in words for
an answer without tools (the loop ignores any tool request in that reply). (v4) The
app's ``tool_choice`` becomes ``toolChoice`` (``auto``, ``any``, ``tool``; Converse has
no parallel-calls switch), and a stateless client's own tool exchanges in its history
become ``toolUse`` / ``toolResult`` blocks when tools are offered (else text).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from convo_memory.adapters.providers.converse_messages import (
    EMPTY_CONTENT_PLACEHOLDER,
    cache_point,
    cached_messages,
    copy_point,
    normalize_messages,
)
from convo_memory.adapters.providers.openai_http import shorten
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import Completion, FinishReason, ModelStep, TokenUsage
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.tools import AUTO, ToolChoice, ToolDefinition, ToolRound, tool_request
from convo_memory.ports import TextSink

logger = logging.getLogger(__name__)

# Converse's inferenceConfig names for a call's settings (GenerationOptions.call_settings).
INFERENCE_CONFIG_NAMES = {
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop": "stopSequences",
}
# Said with the last tool results when the loop has no tool steps left.
FINAL_ANSWER_REQUEST = (
    "You have used every tool call this turn allows. Answer the user now from the tool "
    "results above, without calling any tool."
)

_ERROR_MESSAGES: dict[str, str] = {
    "ThrottlingException": "Bedrock throttled the request; retry later",
    "ServiceQuotaExceededException": "Bedrock service quota exceeded; retry later",
    "ModelTimeoutException": "the Bedrock model timed out",
    "ModelNotReadyException": "the Bedrock model is not ready; retry later",
    "ServiceUnavailableException": "Bedrock is unavailable; retry later",
    "InternalServerException": "Bedrock had an internal error; retry later",
    "ModelErrorException": "the Bedrock model failed to process the request",
    "ModelStreamErrorException": "the Bedrock model failed while streaming",
    "ValidationException": "Bedrock rejected the request as invalid",
    "AccessDeniedException": "access to the Bedrock model was denied (check IAM and model access)",
    "ResourceNotFoundException": "the Bedrock model or guardrail was not found",
}


@dataclass(frozen=True)
class GuardrailRef:
    """A Bedrock guardrail applied by Converse itself (``guardrailConfig``)."""

    identifier: str
    version: str


def _normalize_code(code: str) -> str:
    # Errors inside an event stream carry the union member name ("throttlingException");
    # HTTP errors carry the shape name ("ThrottlingException").
    return code[:1].upper() + code[1:]


def map_client_error(exc: Exception, *, service: str = "Bedrock") -> ProviderError:
    """Turn a botocore error into a ProviderError, chosen by error code."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        raw_code = str(response.get("Error", {}).get("Code", "") or "")
        code = _normalize_code(raw_code)
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        said = shorten(str(response.get("Error", {}).get("Message", "") or ""))
        logger.warning(
            "%s call failed: %s", service, said, extra={"errorCode": code, "httpStatus": status}
        )
        # The service's own words for the code, and the HTTP status: never the text
        # (or an unknown code) that came back.
        message = _ERROR_MESSAGES.get(code, f"{service} call failed")
        if isinstance(status, int):
            return ProviderError(
                f"Model provider error: {message} (HTTP {status}).", upstream_status=status
            )
        return ProviderError(f"Model provider error: {message}.")
    # botocore's own errors (connection refused, read timeout, ...) have no code. One
    # text for all of them: an error must not tell how the network failed.
    logger.warning("%s call failed: %s", service, type(exc).__name__)
    return ProviderError("Model provider error: could not reach the provider.")


def _botocore_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


class BedrockConverseProvider:
    """A chat model on Amazon Bedrock (Converse and ConverseStream)."""

    def __init__(
        self,
        client: Any | None = None,
        model_id: str = "",
        max_tokens: int | None = None,
        temperature: float | None = None,
        guardrail: GuardrailRef | None = None,
        *,
        client_factory: Callable[[], Any] | None = None,
        timed_client_factory: Callable[[float], Any] | None = None,
        prompt_caching: bool = False,
        cache_ttl: str | None = None,
    ) -> None:
        """Give either a bedrock-runtime ``client`` or a ``client_factory`` that builds
        one on first use (cold starts then pay for boto3 only when Bedrock is called);
        ``timed_client_factory(seconds)`` gives a client whose read timeout is at most
        that, for a tool loop's calls bounded by the turn's deadline. With
        ``prompt_caching`` (the model supports it) requests carry cache points, with
        ``cache_ttl`` (``5m`` or ``1h``) when given."""
        if client is None and client_factory is None:
            raise ValueError("BedrockConverseProvider needs a client or a client_factory")
        if not model_id:
            raise ValueError("BedrockConverseProvider needs a model_id")
        self._client = client
        self._client_factory = client_factory
        self._timed_client_factory = timed_client_factory
        self.model_id = model_id
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.guardrail = guardrail
        self.prompt_caching = prompt_caching
        self.cache_point = cache_point(cache_ttl)

    @property
    def client(self) -> Any:
        if self._client is None:
            assert self._client_factory is not None
            self._client = self._client_factory()
        return self._client

    def request(
        self, prompt: Prompt, *, streaming: bool = False, tool_blocks: bool = False
    ) -> dict[str, Any]:
        """The keyword arguments of a converse / converse_stream call (``tool_blocks``:
        the call offers tools, so a client's tool exchange travels as tool blocks)."""
        caching = self.prompt_caching
        kwargs: dict[str, Any] = {
            "modelId": self.model_id,
            "messages": (
                cached_messages(prompt.messages, self.cache_point)
                if caching and prompt.replay_reused
                else normalize_messages(prompt.messages, tool_blocks)
            ),
        }
        if prompt.system.strip():
            point = [copy_point(self.cache_point)] if caching else []
            kwargs["system"] = [{"text": prompt.system}, *point]
        # The client's options (OpenAI-compatible door) within the connection's settings.
        settings = prompt.options.call_settings(self.max_tokens, self.temperature)
        inference = {INFERENCE_CONFIG_NAMES[name]: value for name, value in settings.items()}
        if inference:
            kwargs["inferenceConfig"] = inference
        if self.guardrail is not None:
            guardrail: dict[str, Any] = {
                "guardrailIdentifier": self.guardrail.identifier,
                "guardrailVersion": self.guardrail.version,
            }
            if streaming:
                guardrail["streamProcessingMode"] = "sync"
            kwargs["guardrailConfig"] = guardrail
        return kwargs

    def _client_within(self, timeout: float) -> Any:
        if self._client is None and self._timed_client_factory is not None:
            return self._timed_client_factory(timeout)
        return self.client

    def tool_request(
        self,
        prompt: Prompt,
        rounds: Sequence[ToolRound],
        tools: Sequence[ToolDefinition],
        *,
        final: bool = False,
        streaming: bool = False,
        choice: ToolChoice = AUTO,
    ) -> dict[str, Any]:
        """The keyword arguments of a tool loop's converse / converse_stream call."""
        offered = bool(tools) and bool(rounds or not final)
        kwargs = self.request(prompt, streaming=streaming, tool_blocks=offered)
        messages: list[dict[str, Any]] = kwargs["messages"]
        for round_ in rounds:
            content: list[dict[str, Any]] = []
            if round_.text.strip():
                content.append({"text": round_.text})
            content.extend(
                {"toolUse": {"toolUseId": r.call_id, "name": r.name, "input": dict(r.input)}}
                for r in round_.requests
            )
            messages.append({"role": "assistant", "content": content})
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "toolResult": {
                                "toolUseId": reply.call_id,
                                "content": [{"text": reply.output or EMPTY_CONTENT_PLACEHOLDER}],
                                "status": "error" if reply.is_error else "success",
                            }
                        }
                        for reply in round_.replies
                    ],
                }
            )
        if final and rounds:
            messages[-1]["content"].append({"text": FINAL_ANSWER_REQUEST})
        if offered:
            config: dict[str, Any] = {"tools": [tool_spec(tool) for tool in tools]}
            if not final and choice.mode in ("required", "function"):
                config["toolChoice"] = (
                    {"any": {}}
                    if choice.mode == "required"
                    else {"tool": {"name": choice.function}}
                )
            kwargs["toolConfig"] = config
        return kwargs

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
        """One Converse call of the tool loop (ConverseStream with ``on_text``)."""
        errors = _botocore_errors()
        kwargs = self.tool_request(
            prompt, rounds, tools, final=final, streaming=bool(on_text), choice=choice
        )
        try:
            client = self._client_within(timeout)
            if on_text is None:
                return _step_of(client.converse(**kwargs))
            return _streamed_step(client.converse_stream(**kwargs)["stream"], on_text)
        except errors as exc:
            raise map_client_error(exc) from exc

    def complete(self, prompt: Prompt) -> Completion:
        """One Converse call; the answer is the concatenated text blocks."""
        errors = _botocore_errors()
        try:
            response = self.client.converse(**self.request(prompt))
        except errors as exc:
            raise map_client_error(exc) from exc
        blocks = response.get("output", {}).get("message", {}).get("content", [])
        text = "".join(b["text"] for b in blocks if "text" in b)
        return Completion(
            text=text,
            usage=usage_of(response.get("usage")),
            finish=finish_of(response.get("stopReason")),
        )

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """ConverseStream: yield each ``contentBlockDelta.delta.text`` as it arrives."""
        errors = _botocore_errors()
        events: Any = None
        try:
            response = self.client.converse_stream(**self.request(prompt, streaming=True))
            events = response["stream"]
            for event in events:
                delta = event.get("contentBlockDelta")
                if delta is not None:
                    text = delta.get("delta", {}).get("text")
                    if text:
                        yield text
                    continue
                for key, value in event.items():
                    # An exception event delivered as data rather than raised.
                    if key.endswith("Exception"):
                        raise map_client_error(_EventError(key, value))
        except errors as exc:
            raise map_client_error(exc) from exc
        finally:
            # A consumer that stops early must not leave the HTTP connection open.
            close = getattr(events, "close", None)
            if callable(close):
                close()


def tool_spec(tool: ToolDefinition) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": dict(tool.input_schema)}}
    if tool.description.strip():
        spec["description"] = tool.description
    return {"toolSpec": spec}


def finish_of(stop_reason: Any) -> FinishReason:
    """``length`` when Converse stopped at the token limit (``max_tokens``), else ``stop``."""
    return "length" if stop_reason == "max_tokens" else "stop"


def usage_of(usage: Any) -> TokenUsage | None:
    """Converse's ``usage`` (or a stream's ``metadata.usage``) as token counts. Bedrock's
    ``inputTokens`` leaves out what was read from or written to the prompt cache: the
    prompt's tokens are the three together."""
    if not isinstance(usage, Mapping):
        return None
    try:
        read = int(usage.get("cacheReadInputTokens") or 0)
        written = int(usage.get("cacheWriteInputTokens") or 0)
        prompt = int(usage["inputTokens"]) + read + written
        return TokenUsage(prompt, int(usage["outputTokens"]), read, written)
    except (KeyError, TypeError, ValueError):
        return None


def _step_of(response: Mapping[str, Any]) -> ModelStep:
    blocks = response.get("output", {}).get("message", {}).get("content", [])
    text = "".join(b["text"] for b in blocks if "text" in b)
    usage = usage_of(response.get("usage"))
    if response.get("stopReason") != "tool_use":
        return ModelStep(text, usage=usage, finish=finish_of(response.get("stopReason")))
    requests = tuple(
        tool_request(
            str(b["toolUse"].get("toolUseId", "")),
            str(b["toolUse"].get("name", "")),
            b["toolUse"].get("input"),
        )
        for b in blocks
        if "toolUse" in b
    )
    return ModelStep(text, requests, usage)


def _streamed_step(events: Any, on_text: TextSink) -> ModelStep:
    """Read a ConverseStream: text deltas go to ``on_text`` as they arrive; tool-use
    blocks are accumulated (their input arrives as pieces of a JSON string)."""
    text: list[str] = []
    tools: dict[int, dict[str, Any]] = {}
    stop_reason = ""
    usage: TokenUsage | None = None
    try:
        for event in events:
            if "contentBlockStart" in event:
                start = event["contentBlockStart"]
                tool_use = start.get("start", {}).get("toolUse")
                if tool_use is not None:
                    tools[int(start.get("contentBlockIndex", len(tools)))] = {
                        "id": tool_use.get("toolUseId", ""),
                        "name": tool_use.get("name", ""),
                        "input": [],
                    }
            elif "contentBlockDelta" in event:
                block = event["contentBlockDelta"]
                delta = block.get("delta", {})
                if delta.get("text"):
                    text.append(delta["text"])
                    on_text(delta["text"])
                elif "toolUse" in delta:
                    index = int(block.get("contentBlockIndex", -1))
                    if index in tools:
                        tools[index]["input"].append(delta["toolUse"].get("input", ""))
            elif "messageStop" in event:
                stop_reason = str(event["messageStop"].get("stopReason", ""))
            elif "metadata" in event:
                usage = usage_of(event["metadata"].get("usage"))
            else:
                for key, value in event.items():
                    if key.endswith("Exception"):
                        raise map_client_error(_EventError(key, value))
    finally:
        close = getattr(events, "close", None)
        if callable(close):
            close()
    if stop_reason != "tool_use":
        return ModelStep("".join(text), usage=usage, finish=finish_of(stop_reason))
    requests = tuple(
        tool_request(str(tool["id"]), str(tool["name"]), "".join(tool["input"]))
        for _, tool in sorted(tools.items())
    )
    return ModelStep("".join(text), requests, usage)


class _EventError(Exception):
    """An exception event found in a ConverseStream, shaped like a ClientError."""

    def __init__(self, code: str, body: Any) -> None:
        super().__init__(code)
        message = body.get("message", "") if isinstance(body, Mapping) else ""
        self.response = {"Error": {"Code": code, "Message": message}}
