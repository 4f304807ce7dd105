"""HTTP for the client: one connection per call (standard library only), the retry rules,
and Server-Sent Events parsing for the streaming door."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from convo_memory_client.errors import (
    ConnectionFailed,
    ConversationsError,
    error_class,
    error_from_response,
)

logger = logging.getLogger("convo_memory_client")

# Where a 5xx's request id may travel besides the body (API Gateway, Lambda URLs).
_REQUEST_ID_HEADERS = ("x-request-id", "apigw-requestid", "x-amzn-requestid")


@dataclass(frozen=True)
class RetryRule:
    """When a call may be sent again.

    ``statuses``: the answers that are retried. ``after_send``: whether a connection
    failure is retried once the request may have reached the service (a lost answer);
    a failure to connect is always retried, since nothing was sent.
    ``in_progress``: whether ``409 idempotency_in_progress`` is retried (keyed turns).
    """

    statuses: frozenset[int]
    after_send: bool
    in_progress: bool = False


# GET, and PATCH (it replaces the metadata as a whole, so a repeat is harmless).
READ = RetryRule(frozenset({429, 503}), after_send=True)
# Creations: a lost answer may hide a created resource, so only refusals are retried.
CREATE = RetryRule(frozenset({429}), after_send=False)
DELETE = RetryRule(frozenset({429, 503}), after_send=False)
# Turns always carry an Idempotency-Key: a repeat returns the first answer and records
# nothing new, so lost answers and 500/502 are retried too.
TURN = RetryRule(frozenset({429, 500, 502, 503}), after_send=True, in_progress=True)


class _SendFailed(Exception):
    def __init__(self, cause: BaseException, *, sent: bool) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause
        self.sent = sent


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Transport:
    """Sends calls to one base URL with the bearer token and applies the retry rules."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float,
        max_retries: int,
        backoff_base: float,
        backoff_max: float,
        max_retry_after: float,
        sleep: Callable[[float], None],
        user_agent: str,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self.base_url = base_url
        # One TLS context per client: building one loads the system's CA store.
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._max_retry_after = max_retry_after
        self._sleep = sleep
        self._user_agent = user_agent

    def __repr__(self) -> str:  # never the token
        return f"Transport(base_url={self.base_url!r})"

    # one attempt ----------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        if self._tls is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=self._tls
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _target(self, path: str, query: Mapping[str, Any] | None) -> str:
        target = self._prefix + path
        pairs = {k: str(v) for k, v in (query or {}).items() if v is not None}
        # urlencode quotes everything outside the unreserved set: an opaque nextToken
        # with '+', '/', '=' or '&' reaches the service intact.
        return f"{target}?{urlencode(pairs)}" if pairs else target

    def _send(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        accept: str,
        content_type: str = "application/json",
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        all_headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": accept,
            "User-Agent": self._user_agent,
            **headers,
        }
        if body is not None:
            all_headers["Content-Type"] = content_type
        connection = self._connection()
        try:
            connection.connect()
        except OSError as exc:
            connection.close()
            raise _SendFailed(exc, sent=False) from exc
        try:
            connection.request(method, target, body=body, headers=all_headers)
            return connection, connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise _SendFailed(exc, sent=True) from exc

    def _error(self, response: http.client.HTTPResponse, payload: bytes) -> ConversationsError:
        body: Any = payload.decode("utf-8", errors="replace")
        # Not JSON (e.g. a proxy's page): the status still picks the class.
        with contextlib.suppress(ValueError):
            body = json.loads(body)
        request_id = next(
            (response.getheader(name) for name in _REQUEST_ID_HEADERS if response.getheader(name)),
            None,
        )
        return error_from_response(
            response.status,
            body,
            request_id=request_id,
            retry_after=parse_retry_after(response.getheader("Retry-After")),
        )

    # retries --------------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self._backoff_max, self._backoff_base * (2**attempt))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def _retry_delay(self, rule: RetryRule, attempt: int, error: BaseException) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or ``None``: do not retry."""
        if attempt >= self._max_retries:
            return None
        if isinstance(error, _SendFailed):
            return self._backoff(attempt) if (rule.after_send or not error.sent) else None
        if not isinstance(error, ConversationsError):
            return None
        in_progress = error.status == 409 and error.code == "idempotency_in_progress"
        if not (error.status in rule.statuses or (rule.in_progress and in_progress)):
            return None
        if error.retry_after is not None:
            # The service's word, unless it asks for longer than the caller will wait:
            # then the caller gets the error (with retry_after) and decides.
            return error.retry_after if error.retry_after <= self._max_retry_after else None
        return self._backoff(attempt)

    def _wait(self, method: str, path: str, attempt: int, delay: float, why: str) -> None:
        logger.debug(
            "retrying %s %s in %.2fs (attempt %d, %s)", method, path, delay, attempt + 2, why
        )
        self._sleep(delay)

    def _read_elsewhere(self, url: str) -> bytes:
        """The bytes at a short-lived URL the service redirected to (no token sent)."""
        import urllib.request

        if not url.lower().startswith(("https://", "http://")):
            raise ConversationsError(502, "invalid_response", "a redirect without a location")
        with urllib.request.urlopen(url, timeout=self._timeout) as answer:
            return bytes(answer.read())

    @staticmethod
    def _encode(body: Any) -> bytes | None:
        if body is None:
            return None
        # allow_nan=False: the service refuses NaN/Infinity, so refuse them here first.
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8"
        )

    def call(
        self,
        method: str,
        path: str,
        rule: RetryRule,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        form: tuple[bytes, str] | None = None,
        binary: bool = False,
    ) -> Any:
        """One logical call: the parsed JSON answer (``None`` for an empty one), or the
        typed error once retrying is not allowed or the retries are spent. ``form``: a
        body already encoded, and its content type (a file upload); ``binary``: the
        answer's bytes (a redirect is followed, without the token)."""
        target = self._target(path, query)
        data, content_type = form if form is not None else (self._encode(body), "application/json")
        attempt = 0
        while True:
            try:
                accept = "*/*" if binary else "application/json"
                connection, response = self._send(
                    method, target, data, headers or {}, accept, content_type
                )
                try:
                    payload = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    raise _SendFailed(exc, sent=True) from exc
                finally:
                    connection.close()
            except _SendFailed as failure:
                delay = self._retry_delay(rule, attempt, failure)
                if delay is None:
                    raise ConnectionFailed(0, "connection_failed", str(failure)) from failure.cause
                self._wait(method, path, attempt, delay, f"connection: {failure}")
                attempt += 1
                continue
            if binary and response.status in (301, 302, 303, 307, 308):
                return self._read_elsewhere(response.getheader("Location") or "")
            if binary and 200 <= response.status < 300:
                return payload
            if 200 <= response.status < 300:
                try:
                    return json.loads(payload) if payload.strip() else None
                except ValueError:
                    raise ConversationsError(
                        response.status, "invalid_response", "the answer is not JSON"
                    ) from None
            error = self._error(response, payload)
            delay = self._retry_delay(rule, attempt, error)
            if delay is None:
                raise error
            self._wait(method, path, attempt, delay, f"{error.status} {error.code}")
            attempt += 1

    def open_stream(
        self, path: str, body: Any, headers: Mapping[str, str]
    ) -> tuple[http.client.HTTPConnection, tuple[str, str], Iterator[tuple[str, str]]]:
        """Send a streaming turn and read up to its first event, retrying (with the turn
        rule) until then. Returns the open connection, the first event and the rest."""
        data = self._encode(body)
        target = self._target(path, None)
        attempt = 0
        while True:
            error: BaseException
            try:
                connection, response = self._send(
                    "POST", target, data, headers, "text/event-stream"
                )
            except _SendFailed as failure:
                error = failure
            else:
                if response.status == 200:
                    events = sse_events(response)
                    cause: BaseException = EOFError("the stream ended before its first event")
                    try:
                        first = next(events, None)
                    except (OSError, http.client.HTTPException, UnicodeDecodeError) as exc:
                        first, cause = None, exc
                    if first is not None and first[0] != "error":
                        return connection, first, events
                    connection.close()
                    # An error before any event: nothing was streamed, retry like a refusal.
                    error = stream_error(first[1]) if first else _SendFailed(cause, sent=True)
                else:
                    try:
                        error = self._error(response, response.read())
                    except (OSError, http.client.HTTPException) as exc:
                        error = _SendFailed(exc, sent=True)
                    finally:
                        connection.close()
            delay = self._retry_delay(TURN, attempt, error)
            if delay is None:
                if isinstance(error, _SendFailed):
                    raise ConnectionFailed(0, "connection_failed", str(error)) from error.cause
                raise error
            self._wait("POST", path, attempt, delay, str(error))
            attempt += 1


def stream_error(data: str) -> ConversationsError:
    """The typed error of an ``event: error`` (its data is the error object)."""
    with contextlib.suppress(ValueError):
        fields = json.loads(data)
        if isinstance(fields, Mapping):
            nested = fields.get("error")
            code = (nested if isinstance(nested, Mapping) else fields).get("code")
            status = fields.get("status")
            if not isinstance(status, int):
                # The stream already answered 200: the code's own status, else a failure
                # of the service.
                status = error_class(0, str(code or "")).status or 500
            return error_from_response(status, fields)
    return error_from_response(500, None)


def sse_events(response: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
    """``(event, data)`` pairs of a ``text/event-stream`` body, as the SSE format defines
    them: ``data`` lines joined by newlines, comments skipped, dispatched on a blank line."""
    event = ""
    data: list[str] = []
    while True:
        raw = response.readline()
        if not raw:
            return  # an event cut off by the end of the stream is not dispatched
        line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
