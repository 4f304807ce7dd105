"""The HTTP side of an OpenAI-compatible endpoint: one POST, read within bounds.

The endpoint comes from an operator's connection, but it is still treated as untrusted:
no redirects are followed, bodies are read up to a size cap, one deadline bounds the
whole exchange (name resolution, connect, TLS, the status line, each header, the body;
``adapters.deadline_http``), so a server that trickles bytes cannot hold a turn open,
no text the provider sent reaches an error (it is logged, with every part of the key
hidden), and a failure to connect says only that the provider could not be reached (not
why: refused, filtered, timed out).
The operator's ``HTTPS_PROXY`` / ``HTTP_PROXY`` (and ``NO_PROXY``) are honoured, within
the same one deadline (``deadline_http.proxy_for``).
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import re
import ssl
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn

from convo_memory.adapters.deadline_http import (
    Deadline,
    Exchange,
    Proxy,
    ResponseBodyTooLarge,
    proxy_for,
    send,
)
from convo_memory.domain.errors import ProviderError

logger = logging.getLogger(__name__)

_ERROR_DETAIL_CHARS = 200
# What of an error body is read: enough for any message worth showing.
_ERROR_BODY_BYTES = 4096
# A credential fragment this long or longer is never logged (shorter ones are common text).
MIN_SECRET_FRAGMENT = 6
# A word of a log line: what is hidden whole when part of it is a credential.
_WORD = re.compile(r"[^\s\"'`(),;:=<>\[\]{}]+")
# A completion body above this is refused (no model answer needs more).
MAX_COMPLETION_BYTES = 4 * 1024 * 1024
# A stream carries each delta in a JSON event, several times the text it delivers.
MAX_STREAM_BYTES = 16 * 1024 * 1024
MAX_SSE_LINE_BYTES = 1024 * 1024
UNREACHABLE = "Model provider error: could not reach the provider."
USER_AGENT = "convo-memory/1"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's trust store, loaded once (on the first https call, not at import)."""
    return ssl.create_default_context()


def redact_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` for a log line: every secret, and every run of ``MIN_SECRET_FRAGMENT``
    or more characters taken from one, in any letter case, replaced by ``***``; so is
    the whole word around it (a key the provider quotes partly, as ``sk-live****...s0Ta``
    does, leaves no piece), and any word with a mask in it (``f5Gs0Ta*****``)."""
    folded = text.casefold()
    hidden = [False] * len(text)
    for secret in (s.casefold() for s in secrets if s):
        if len(secret) < MIN_SECRET_FRAGMENT:
            # Too short to have fragments worth hiding: only the whole secret.
            start = folded.find(secret)
            while start >= 0:
                hidden[start : start + len(secret)] = [True] * len(secret)
                start = folded.find(secret, start + 1)
            continue
        # Any longer fragment is covered by the pieces of this length it is made of, so
        # hiding every piece the secret contains hides every such fragment.
        pieces = {
            secret[i : i + MIN_SECRET_FRAGMENT]
            for i in range(len(secret) - MIN_SECRET_FRAGMENT + 1)
        }
        for i in range(len(folded) - MIN_SECRET_FRAGMENT + 1):
            if folded[i : i + MIN_SECRET_FRAGMENT] in pieces:
                hidden[i : i + MIN_SECRET_FRAGMENT] = [True] * MIN_SECRET_FRAGMENT
    for word in _WORD.finditer(text):
        if "**" in word.group() or any(hidden[word.start() : word.end()]):
            hidden[word.start() : word.end()] = [True] * (word.end() - word.start())
    if not any(hidden):
        return text
    out: list[str] = []
    for i, char in enumerate(text):
        if not hidden[i]:
            out.append(char)
        elif i == 0 or not hidden[i - 1]:
            out.append("***")
    return "".join(out)


def shorten(text: str, limit: int = _ERROR_DETAIL_CHARS) -> str:
    """``text`` stripped and cut to ``limit`` characters (an ellipsis marks the cut)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class ChatCompletionsEndpoint:
    """POSTs JSON to ``url`` with the connection's key; reads the answer whole (bounded)
    or as server-sent events (bounded per line and in total), all by a ``Deadline``."""

    def __init__(
        self,
        url: str,
        api_key: Callable[[], str | None],
        timeout: float,
        max_completion_bytes: int = MAX_COMPLETION_BYTES,
        max_stream_bytes: int = MAX_STREAM_BYTES,
    ) -> None:
        self.url = url
        parts = urllib.parse.urlsplit(url)
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._https = parts.scheme == "https"
        self._proxy = _proxy(url)
        self._api_key = api_key
        # Every key this endpoint has sent: error texts never repeat any part of them.
        self._sent_keys: set[str] = set()
        self.timeout = timeout
        self.max_completion_bytes = max_completion_bytes
        self.max_stream_bytes = max_stream_bytes

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
            logger.warning(
                "OpenAI-compatible stream failed mid-stream: %s",
                self.detail(_error_detail(chunk)),
            )
            raise ProviderError("Model provider error: the provider failed mid-stream.")
        return chunk

    def open(self, body: dict[str, Any], deadline: Deadline | None = None) -> Exchange:
        """POST ``body`` and read the response's head by ``deadline`` (else within the
        endpoint's timeout); a non-2xx answer (a redirect too) raises ProviderError."""
        deadline = deadline or Deadline(self.timeout)
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if body["stream"] else "application/json",
            "User-Agent": USER_AGENT,
        }
        api_key = self._api_key()
        if api_key:
            self._sent_keys.add(api_key)
            headers["Authorization"] = f"Bearer {api_key}"
        try:
            exchange = send(
                "POST",
                self._host,
                self._port,
                self._path,
                json.dumps(body).encode("utf-8"),
                headers,
                deadline,
                tls=_tls_context() if self._https else None,
                proxy=self._proxy,
            )
        except (OSError, http.client.HTTPException) as exc:
            self._fail_io(exc)
        if 200 <= exchange.status < 300:
            return exchange
        with exchange:
            try:
                detail = _error_detail(json.loads(exchange.response.read(_ERROR_BODY_BYTES)))
            except (ValueError, OSError, http.client.HTTPException):
                detail = ""
        status = exchange.status
        # What the provider said goes to the log only, redacted: the client's 502 is in
        # the service's own words (the connection's name and this status at most).
        logger.warning(
            "OpenAI-compatible endpoint returned HTTP %s: %s", status, self.detail(detail)
        )
        raise ProviderError(
            f"Model provider error: the provider answered HTTP {status}.", upstream_status=status
        )

    def _fail_io(self, exc: BaseException) -> NoReturn:
        # The same text for refused, unresolvable, filtered and timed out: an error must
        # not map the network behind the endpoint. The log keeps the kind of failure.
        logger.warning(
            "OpenAI-compatible endpoint unreachable: %s after at most %gs",
            type(exc).__name__,
            self.timeout,
        )
        raise ProviderError(UNREACHABLE) from None

    def detail(self, text: str) -> str:
        """Upstream error text as a log line may show it: redacted first, then shortened
        (cutting first could leave the start of a key in view). Only the start of a long
        text is looked at; a key cut at its end still leaves 6+ characters to find."""
        return shorten(redact_secrets(text[:_ERROR_BODY_BYTES], self._sent_keys))

    def read_body(self, response: Exchange) -> bytes:
        """The whole body, refused above ``max_completion_bytes``; the exchange's
        deadline bounds it (a server trickling bytes cannot hold it open)."""
        try:
            return response.read_up_to(self.max_completion_bytes)
        except ResponseBodyTooLarge:
            raise ProviderError(
                "Model provider error: the OpenAI-compatible endpoint sent a response "
                f"larger than {self.max_completion_bytes} bytes."
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            self._fail_io(exc)

    def events(self, response: Exchange, state: dict[str, bool]) -> Iterator[dict[str, Any]]:
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


def _proxy(url: str) -> Proxy | None:
    """The operator's proxy for ``url``; a proxy setting that is no ``http://`` URL fails
    the call (logged, naming the variable) rather than going around it."""
    try:
        return proxy_for(url)
    except ValueError as exc:
        logger.error("invalid proxy setting: %s", exc)
        raise ProviderError(
            "Model provider error: the deployment's proxy setting is not an http:// URL."
        ) from None


def _error_detail(body: Any) -> str:
    """The upstream ``error.message`` (or ``error`` string / ``detail``), whole: it is
    redacted before it is shortened."""
    detail: Any = ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            detail = error.get("message", "")
        elif isinstance(error, str):
            detail = error
        elif isinstance(body.get("detail"), str):
            detail = body["detail"]
    return str(detail)
