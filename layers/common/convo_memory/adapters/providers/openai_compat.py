"""Any OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM, llama.cpp).

Standard library only (urllib): no SDK to import at cold start and no new dependency.
Streaming reads the server-sent events line by line, so deltas reach the caller as the
server produces them.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, NoReturn

from convo_memory.domain.errors import ProviderError
from convo_memory.domain.prompt import Prompt
from convo_memory.ports import Completion

logger = logging.getLogger(__name__)

_ERROR_DETAIL_CHARS = 200


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow redirects: a redirect would re-send the Authorization header to a
    host the capability did not name."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class OpenAICompatibleProvider:
    """POSTs ``{base_url}/chat/completions``; ``base_url`` is like ``http://host:11434/v1``.

    ``timeout`` (seconds) bounds connecting and each read, so a stream fails when the
    server goes quiet for longer than that.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            # A ProviderError (502 with a clear message), not a crash of the turn.
            raise ProviderError("Model provider error: provider.baseUrl must be an http(s) URL.")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key or None
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._opener = urllib.request.build_opener(_NoRedirect)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatibleProvider(url={self.url!r}, model={self.model!r})"

    def payload(self, prompt: Prompt, *, stream: bool) -> dict[str, Any]:
        """The JSON body: the system text first, then the prompt's messages."""
        messages: list[dict[str, str]] = []
        if prompt.system:
            messages.append({"role": "system", "content": prompt.system})
        messages.extend({"role": m.role, "content": m.content} for m in prompt.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": stream}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def complete(self, prompt: Prompt) -> Completion:
        """Non-streaming call: the answer is ``choices[0].message.content``."""
        with self._open(self.payload(prompt, stream=False)) as response:
            try:
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._fail_io(exc)
        try:
            data = json.loads(raw)
            content = data["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ProviderError(
                "Model provider error: the OpenAI-compatible endpoint returned an "
                "unexpected response body."
            ) from exc
        return Completion(text=content if isinstance(content, str) else "")

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """``stream: true``: yield each ``choices[0].delta.content`` until ``[DONE]``."""
        with self._open(self.payload(prompt, stream=True)) as response:
            finished = False
            data_lines: list[str] = []
            while True:
                try:
                    raw_line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    self._fail_io(exc)
                line = raw_line.decode("utf-8", errors="replace").rstrip("\r\n")
                if line:
                    # SSE fields: only "data" matters; comments (":...") and
                    # event/id/retry lines are ignored.
                    if line.startswith("data:"):
                        value = line[5:]
                        data_lines.append(value[1:] if value.startswith(" ") else value)
                    continue
                # A blank line (or the end of the body) dispatches the event.
                if data_lines:
                    data, data_lines = "\n".join(data_lines), []
                    if data.strip() == "[DONE]":
                        return
                    text, done = self._parse_event(data)
                    finished = finished or done
                    if text:
                        yield text
                if not raw_line:
                    break  # end of body
            if not finished:
                raise ProviderError(
                    "Model provider error: the OpenAI-compatible stream ended before it finished."
                )

    # --- internals -------------------------------------------------------------------

    def _parse_event(self, data: str) -> tuple[str, bool]:
        """(delta text, whether this chunk carried a finish_reason)."""
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise ProviderError(
                "Model provider error: the OpenAI-compatible stream sent malformed JSON."
            ) from exc
        if not isinstance(chunk, dict):
            raise ProviderError("Model provider error: unexpected OpenAI-compatible stream data.")
        if "error" in chunk:
            detail = self._redact(_error_detail(chunk))
            raise ProviderError(
                f"Model provider error: the OpenAI-compatible endpoint failed mid-stream: {detail}"
            )
        choices = chunk.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return "", False  # e.g. a usage-only chunk
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        return (content if isinstance(content, str) else ""), bool(choice.get("finish_reason"))

    def _open(self, body: dict[str, Any]) -> Any:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if body["stream"] else "application/json",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
        )
        try:
            return self._opener.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    detail = _error_detail(json.loads(exc.read(4096) or b"null"))
                except (ValueError, OSError, http.client.HTTPException):
                    detail = ""
            detail = self._redact(detail)
            logger.warning("OpenAI-compatible endpoint returned HTTP %s", exc.code)
            message = (
                f"Model provider error: the OpenAI-compatible endpoint returned HTTP {exc.code}"
            )
            raise ProviderError(f"{message}: {detail}" if detail else f"{message}.") from exc
        except urllib.error.URLError as exc:
            self._fail_io(exc)
        except (OSError, http.client.HTTPException) as exc:
            self._fail_io(exc)

    def _fail_io(self, exc: BaseException) -> NoReturn:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            logger.warning("OpenAI-compatible endpoint timed out")
            raise ProviderError(
                f"Model provider error: the OpenAI-compatible endpoint timed out after "
                f"{self.timeout:g}s."
            ) from exc
        logger.warning("OpenAI-compatible endpoint unreachable: %s", type(reason).__name__)
        raise ProviderError(
            "Model provider error: could not reach the OpenAI-compatible endpoint "
            f"({type(reason).__name__})."
        ) from exc

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text


def _error_detail(body: Any) -> str:
    """The upstream ``error.message`` (or ``error`` string / ``detail``), shortened."""
    detail: Any = ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            detail = error.get("message", "")
        elif isinstance(error, str):
            detail = error
        elif isinstance(body.get("detail"), str):
            detail = body["detail"]
    text = str(detail).strip()
    if len(text) > _ERROR_DETAIL_CHARS:
        text = text[: _ERROR_DETAIL_CHARS - 1] + "\u2026"
    return text
