"""``Conversations``: the client object, in the product's own shape."""

from __future__ import annotations

import builtins
import http.client
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

from convo_memory_client._transport import (
    CREATE,
    DELETE,
    READ,
    TURN,
    RetryRule,
    Transport,
    stream_error,
)
from convo_memory_client._version import __version__
from convo_memory_client.errors import ConnectionFailed
from convo_memory_client.files import Files
from convo_memory_client.models import (
    Capability,
    Context,
    Delta,
    Done,
    Erasure,
    Message,
    Page,
    Prediction,
    Provider,
    Replay,
    Run,
    SentPrompt,
    Session,
    StreamEvent,
    ToolEvent,
)

__all__ = ["Conversations", "EventStream"]


def _id(value: str) -> str:
    """A path segment: ids are opaque, so everything but unreserved characters is quoted."""
    return quote(value, safe="")


def _attached(file_ids: Sequence[str]) -> dict[str, Any]:
    """(v5) A turn body's ``attachments``: files by id (none: the field is left out)."""
    return {"attachments": [{"fileId": f} for f in file_ids]} if file_ids else {}


def _key(idempotency_key: str | None) -> dict[str, str]:
    # One key per logical call, reused by every retry of it: a retried turn is recorded once.
    return {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}


class Conversations:
    """A client for one deployment of the Conversations API.

    ``base_url`` is the API's root (``http://127.0.0.1:3000`` for ``make run``, the
    stack's ``ApiUrl`` on AWS); ``stream_url`` is where streaming turns go when that is
    elsewhere (the stack's ``StreamUrl``), else ``base_url``. ``token`` is the
    workspace's API token: it is sent as ``Authorization: Bearer`` and never logged or
    shown in a ``repr``.

    ``timeout`` bounds each connect and each read, in seconds. ``max_retries`` bounds
    the retries of one call; waits grow from ``backoff_base`` to at most ``backoff_max``
    seconds (with jitter), or follow the service's ``Retry-After`` when it sends one. An
    answer asking to wait longer than ``max_retry_after`` seconds is raised at once (its
    ``retry_after`` says how long). ``sleep`` is how the client waits (tests pass their
    own).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 60.0,
        max_retries: int = 4,
        stream_url: str | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not token:
            raise ValueError("token is required")
        options: dict[str, Any] = {
            "timeout": timeout,
            "max_retries": max_retries,
            "backoff_base": backoff_base,
            "backoff_max": backoff_max,
            "max_retry_after": max_retry_after,
            "sleep": sleep,
            "user_agent": f"convo-memory-client/{__version__}",
        }
        self.base_url = base_url
        self._sleep = sleep
        self._transport = Transport(base_url, token, **options)
        self._stream_transport = (
            Transport(stream_url, token, **options) if stream_url else self._transport
        )
        self.sessions = Sessions(self)
        self.capabilities = Capabilities(self)
        self.runs = Runs(self)
        self.providers = Providers(self)
        self.erasures = Erasures(self)
        self.files = Files(self._transport)

    def __repr__(self) -> str:
        return f"Conversations(base_url={self.base_url!r})"

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Call any route (``path`` starts with ``/v1/``): the parsed JSON answer, or the
        typed error. GETs are retried like reads; other methods only when refused (429).
        For routes this version of the client does not wrap."""
        rule = READ if method.upper() == "GET" else CREATE
        path = path if path.startswith("/") else f"/{path}"
        return self._transport.call(
            method.upper(), path, rule, query=query, body=json, headers=headers
        )

    def predict(
        self,
        capability_id: str,
        input: str,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        attachments: Sequence[str] = (),
    ) -> Prediction:
        """One turn on a capability. With ``session_id`` the turn replays the session's
        window and is recorded in it; without, it is stateless. The call carries an
        ``Idempotency-Key`` (``idempotency_key``, or one generated for this call) so that
        its retries are recorded once. ``attachments``: (v5) uploaded files' ids."""
        body: dict[str, Any] = {"input": input, **_attached(attachments)}
        if session_id is not None:
            body["sessionId"] = session_id
        data = self._transport.call(
            "POST",
            f"/v1/capabilities/{_id(capability_id)}/predict",
            TURN,
            body=body,
            headers=_key(idempotency_key),
        )
        return Prediction.from_json(data)

    def stream(
        self,
        capability_id: str,
        input: str,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        attachments: Sequence[str] = (),
    ) -> EventStream:
        """The same turn as ``predict``, streamed: iterate the result for ``Delta``
        (answer text), ``ToolEvent`` (an agent's tool call) and finally ``Done`` (the
        Prediction). An ``event: error`` is raised as its typed error.

        The request is sent now: a turn refused before its stream starts raises here, and
        the call is retried (same ``Idempotency-Key``) until its first event arrives;
        never after, so no event is ever seen twice."""
        body: dict[str, Any] = {"input": input, **_attached(attachments)}
        if session_id is not None:
            body["sessionId"] = session_id
        connection, first, rest = self._stream_transport.open_stream(
            f"/v1/capabilities/{_id(capability_id)}/predict/stream", body, _key(idempotency_key)
        )
        return EventStream(connection, first, rest)


class EventStream:
    """The events of one streamed turn. Iterate it once; ``close()`` (or a ``with``
    block, or reaching ``Done``) releases the connection."""

    def __init__(
        self,
        connection: http.client.HTTPConnection,
        first: tuple[str, str],
        rest: Iterator[tuple[str, str]],
    ) -> None:
        self._connection = connection
        self._events = self._typed(first, rest)
        self.prediction: Prediction | None = None

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and release the connection."""
        self._connection.close()

    def _typed(self, first: tuple[str, str], rest: Iterator[tuple[str, str]]) -> Iterator[Any]:
        try:
            pending: tuple[str, str] | None = first
            while True:
                if pending is None:
                    try:
                        pending = next(rest)
                    except StopIteration:
                        raise ConnectionFailed(
                            0, "connection_failed", "the stream ended before its done event"
                        ) from None
                    except (OSError, http.client.HTTPException, UnicodeDecodeError) as exc:
                        raise ConnectionFailed(0, "connection_failed", str(exc)) from exc
                name, data = pending
                pending = None
                event = _stream_event(name, data)
                if event is None:
                    continue  # an event type this client does not know: skipped
                if isinstance(event, Done):
                    self.prediction = event.prediction
                    yield event
                    return
                yield event
        finally:
            self._connection.close()


def _stream_event(name: str, data: str) -> StreamEvent | None:
    try:
        payload = json.loads(data) if data else {}
    except ValueError:
        payload = {}
    fields: Mapping[str, Any] = payload if isinstance(payload, Mapping) else {}
    if name == "delta":
        text = fields.get("text")
        return Delta(text if isinstance(text, str) else "")
    if name == "tool":
        return ToolEvent(str(fields.get("name", "")), str(fields.get("status", "")), dict(fields))
    if name == "done":
        return Done(Prediction.from_json(fields))
    if name == "error":
        raise stream_error(data)
    return None


class _Resource:
    def __init__(self, client: Conversations) -> None:
        self._client = client

    def _call(self, method: str, path: str, rule: RetryRule, **kwargs: Any) -> Any:
        return self._client._transport.call(method, path, rule, **kwargs)


class Sessions(_Resource):
    """``client.sessions``: conversations, their transcripts and their context."""

    def create(
        self,
        capability_id: str,
        external_ref: str,
        principal: Mapping[str, str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """Open a session for your end user ``external_ref``. ``principal`` (string
        claims) is stamped once and reaches the capability's tools; it never changes."""
        body: dict[str, Any] = {"capabilityId": capability_id, "externalRef": external_ref}
        if principal is not None:
            body["principal"] = dict(principal)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        return Session.from_json(self._call("POST", "/v1/sessions", CREATE, body=body))

    def get(self, session_id: str) -> Session:
        """One session (archived sessions stay readable)."""
        return Session.from_json(self._call("GET", f"/v1/sessions/{_id(session_id)}", READ))

    def list_page(
        self, external_ref: str, limit: int | None = None, next_token: str | None = None
    ) -> Page[Session]:
        """One page of the end user's sessions, newest first."""
        data = self._call(
            "GET",
            "/v1/sessions",
            READ,
            query={"externalRef": external_ref, "limit": limit, "nextToken": next_token},
        )
        return Page(
            [Session.from_json(s) for s in data.get("sessions") or []], data.get("nextToken")
        )

    def list(self, external_ref: str, limit: int | None = None) -> Iterator[Session]:
        """Every session of the end user, newest first, fetching pages of ``limit`` as
        the iteration goes."""
        token: str | None = None
        while True:
            page = self.list_page(external_ref, limit, token)
            yield from page.items
            if not page.next_token:
                return
            token = page.next_token

    def update(self, session_id: str, metadata: Mapping[str, Any]) -> Session:
        """Replace the session's metadata as a whole."""
        data = self._call(
            "PATCH", f"/v1/sessions/{_id(session_id)}", READ, body={"metadata": dict(metadata)}
        )
        return Session.from_json(data)

    def delete(self, session_id: str) -> None:
        """Delete the conversation (transcript, summary, digests); agent run traces stay."""
        self._call("DELETE", f"/v1/sessions/{_id(session_id)}", DELETE)

    def messages_page(
        self, session_id: str, limit: int | None = None, next_token: str | None = None
    ) -> Page[Message]:
        """One page of the transcript, oldest first (``limit`` 1-100, default 50)."""
        data = self._call(
            "GET",
            f"/v1/sessions/{_id(session_id)}/messages",
            READ,
            query={"limit": limit, "nextToken": next_token},
        )
        return Page(
            [Message.from_json(m) for m in data.get("messages") or []], data.get("nextToken")
        )

    def messages(self, session_id: str, limit: int | None = None) -> Iterator[Message]:
        """The whole transcript, oldest first, fetching pages of ``limit`` as the
        iteration goes."""
        token: str | None = None
        while True:
            page = self.messages_page(session_id, limit, token)
            yield from page.items
            if not page.next_token:
                return
            token = page.next_token

    def fork(
        self,
        session_id: str,
        at_seq: int,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """A new session that branches off this one after its answer ``at_seq`` (0:
        before its first message): the same end user, principal and capability, its
        history the messages up to ``at_seq``. Edit the user message at ``n``: fork at
        ``n - 1`` and send the new text; regenerate the answer at ``n + 1``: fork at
        ``n - 1`` and send the same input again. ``metadata`` is the fork's (default:
        the parent's)."""
        body: dict[str, Any] = {"atSeq": at_seq}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        data = self._call("POST", f"/v1/sessions/{_id(session_id)}/forks", CREATE, body=body)
        return Session.from_json(data)

    def prompt_of(self, session_id: str, seq: int) -> SentPrompt:
        """What the model was sent for the turn of message ``seq`` (its answer's seq or
        its user message's), rebuilt from what the service keeps."""
        path = f"/v1/sessions/{_id(session_id)}/messages/{int(seq)}/prompt"
        return SentPrompt.from_json(self._call("GET", path, READ))

    def context(self, session_id: str) -> Context:
        """What the session's next turn would see."""
        return Context.from_json(self._call("GET", f"/v1/sessions/{_id(session_id)}/context", READ))

    def send(
        self,
        session_id: str,
        input: str,
        idempotency_key: str | None = None,
        attachments: Sequence[str] = (),
    ) -> Prediction:
        """A turn through the session's own door (on the session's capability); retried
        like ``predict``. ``attachments``: (v5) uploaded files' ids."""
        data = self._call(
            "POST",
            f"/v1/sessions/{_id(session_id)}/messages",
            TURN,
            body={"input": input, **_attached(attachments)},
            headers=_key(idempotency_key),
        )
        return Prediction.from_json(data)


class Capabilities(_Resource):
    """``client.capabilities``."""

    def create(
        self,
        name: str,
        kind: str,
        provider: Mapping[str, Any] | None = None,
        *,
        instructions: str | None = None,
        replay: Replay | Mapping[str, Any] | None = None,
        summary: Mapping[str, Any] | None = None,
        tools: builtins.list[Mapping[str, Any]] | None = None,
        max_tool_steps: int | None = None,
        content_filter: Mapping[str, Any] | None = None,
        recall: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Capability:
        """Create a capability. ``provider`` names an operator connection, e.g.
        ``{"connection": "embedded"}`` or ``{"connection": "bedrock", "modelId": ...}``.
        ``fields`` are sent as given (camelCase), for fields this client does not name.
        With webhook tools the result's ``tool_signing_secret`` is set: the service shows
        it this once. ``recall``, e.g. ``{"sessions": 3}``, makes each new session start
        with what the end user said in earlier sessions."""
        body: dict[str, Any] = {"name": name, "kind": kind, **fields}
        optional: dict[str, Any] = {
            "provider": dict(provider) if provider is not None else None,
            "instructions": instructions,
            "replay": replay.to_json() if isinstance(replay, Replay) else replay,
            "summary": summary,
            "tools": [dict(t) for t in tools] if tools is not None else None,
            "maxToolSteps": max_tool_steps,
            "contentFilter": content_filter,
            "recall": dict(recall) if recall is not None else None,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return Capability.from_json(self._call("POST", "/v1/capabilities", CREATE, body=body))

    def get(self, capability_id: str) -> Capability:
        """One capability of the workspace."""
        return Capability.from_json(
            self._call("GET", f"/v1/capabilities/{_id(capability_id)}", READ)
        )

    def list(self) -> builtins.list[Capability]:
        """Every capability of the workspace."""
        data = self._call("GET", "/v1/capabilities", READ)
        return [Capability.from_json(c) for c in data.get("capabilities") or []]


class Runs(_Resource):
    """``client.runs``: agent run traces."""

    def get(self, run_id: str) -> Run:
        """The trace of an agent run (``Prediction.run_id``)."""
        return Run.from_json(self._call("GET", f"/v1/runs/{_id(run_id)}", READ))


class Providers(_Resource):
    """``client.providers``: the deployment's provider connections."""

    def list(self) -> builtins.list[Provider]:
        """The connections a capability can name, with the models each allows."""
        data = self._call("GET", "/v1/providers", READ)
        return [Provider.from_json(p) for p in data.get("providers") or []]


class Erasures(_Resource):
    """``client.erasures``: erasing an end user (every session of their externalRef)."""

    def create(self, external_ref: str, traces: str = "keep") -> Erasure:
        """Erase ``external_ref``: from the answer on, each of their sessions is gone
        (404, unlisted, no turns); the receipt becomes ``done`` when nothing of them is
        left. ``traces="erase"`` erases their agent run traces too."""
        body = {"externalRef": external_ref, "traces": traces}
        return Erasure.from_json(self._call("POST", "/v1/erasures", CREATE, body=body))

    def get(self, erasure_id: str) -> Erasure:
        """The erasure's receipt."""
        return Erasure.from_json(self._call("GET", f"/v1/erasures/{_id(erasure_id)}", READ))

    def wait(self, erasure_id: str, timeout: float = 120.0, every: float = 1.0) -> Erasure:
        """The receipt once the erasure is ``done`` or ``failed`` (or, after ``timeout``
        seconds, as it then is)."""
        deadline = time.monotonic() + timeout
        while True:
            erasure = self.get(erasure_id)
            if erasure.finished or time.monotonic() >= deadline:
                return erasure
            self._client._sleep(every)
