"""The HTTP side of an OpenAI-compatible endpoint: one POST, read within bounds.

The endpoint comes from an operator's connection, but it is still treated as untrusted:
no redirects are followed, bodies are read up to a size cap, every read is bounded by
the connection's timeout (a whole completion by it too), the key never appears in an
error text, and a failure to connect says only that the provider could not be reached
(not why: refused, filtered, timed out).
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from convo_memory.domain.errors import ProviderError

logger = logging.getLogger(__name__)

_ERROR_DETAIL_CHARS = 200
# A completion body above this is refused (no model answer needs more).
MAX_COMPLETION_BYTES = 4 * 1024 * 1024
# A stream carries each delta in a JSON event, several times the text it delivers.
MAX_STREAM_BYTES = 16 * 1024 * 1024
MAX_SSE_LINE_BYTES = 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
UNREACHABLE = "Model provider error: could not reach the provider."


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


class ChatCompletionsEndpoint:
    """POSTs JSON to ``url`` with the connection's key; reads the answer whole (bounded)
    or as server-sent events (bounded per line and in total)."""

    def __init__(
        self,
        url: str,
        api_key: Callable[[], str | None],
        timeout: float,
        max_completion_bytes: int = MAX_COMPLETION_BYTES,
        max_stream_bytes: int = MAX_STREAM_BYTES,
    ) -> None:
        self.url = url
        self._api_key = api_key
        # Every key this endpoint has sent: error texts never repeat any of them.
        self._sent_keys: set[str] = set()
        self.timeout = timeout
        self.max_completion_bytes = max_completion_bytes
        self.max_stream_bytes = max_stream_bytes
        self._opener = urllib.request.build_opener(_NoRedirect)

    def _parse_event(self, data: str) -> dict[str, Any]:
        """One stream chunk; an error chunk raises."""
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise ProviderError(
                "Model provider error: the OpenAI-compatible stream sent malformed JSON."
            ) from exc
        if not isinstance(chunk, dict):
            raise ProviderError("Model provider error: unexpected OpenAI-compatible stream data.")
        if "error" in chunk:
            detail = self.redact(_error_detail(chunk))
            raise ProviderError(
                f"Model provider error: the OpenAI-compatible endpoint failed mid-stream: {detail}"
            )
        return chunk

    def open(self, body: dict[str, Any], timeout: float | None = None) -> Any:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if body["stream"] else "application/json",
        }
        api_key = self._api_key()
        if api_key:
            self._sent_keys.add(api_key)
            headers["Authorization"] = f"Bearer {api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
        )
        try:
            return self._opener.open(request, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    detail = _error_detail(json.loads(exc.read(4096) or b"null"))
                except (ValueError, OSError, http.client.HTTPException):
                    detail = ""
            detail = self.redact(detail)
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
        # The same text for refused, unresolvable, filtered and timed out: an error must
        # not map the network behind the endpoint. The log keeps the kind of failure.
        reason = getattr(exc, "reason", exc)
        logger.warning(
            "OpenAI-compatible endpoint unreachable: %s after at most %gs",
            type(reason).__name__,
            self.timeout,
        )
        raise ProviderError(UNREACHABLE) from None

    def redact(self, text: str) -> str:
        for key in self._sent_keys:
            text = text.replace(key, "***")
        return text

    def read_body(self, response: Any, deadline: float) -> bytes:
        """The whole body, refused above ``max_completion_bytes`` or past ``deadline``
        (a server trickling bytes would otherwise reset the per-read timeout forever)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = response.read1(_READ_CHUNK_BYTES)
            except (OSError, http.client.HTTPException) as exc:
                self._fail_io(exc)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_completion_bytes:
                raise ProviderError(
                    "Model provider error: the OpenAI-compatible endpoint sent a response "
                    f"larger than {self.max_completion_bytes} bytes."
                )
            chunks.append(chunk)
            if time.monotonic() > deadline:
                self._fail_io(TimeoutError("the completion took longer than the timeout"))

    def events(self, response: Any, state: dict[str, bool]) -> Iterator[dict[str, Any]]:
        """The JSON chunks of a server-sent event stream, until ``[DONE]`` (which sets
        ``state["done"]``) or the end of the body; an error chunk raises."""
        data_lines: list[str] = []
        received = 0
        while True:
            try:
                raw_line = response.readline(MAX_SSE_LINE_BYTES + 1)
            except (OSError, http.client.HTTPException) as exc:
                self._fail_io(exc)
            received += len(raw_line)
            if len(raw_line) > MAX_SSE_LINE_BYTES or received > self.max_stream_bytes:
                raise ProviderError(
                    "Model provider error: the OpenAI-compatible stream exceeded its size limit."
                )
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
                    state["done"] = True
                    return
                yield self._parse_event(data)
            if not raw_line:
                break  # end of body


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
