"""The Python client against a scripted service that answers as the contract says:
retries, typed errors, streaming events, pagination, and tolerance of unknown fields."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from convo_memory_client import (
    AuthenticationError,
    CapabilityNotConversational,
    CapabilityNotFound,
    ConflictError,
    ConnectionFailed,
    Conversations,
    ConversationsError,
    Delta,
    Done,
    ExternalRefImmutable,
    ForkPoint,
    IdempotencyInProgress,
    IdempotencyKeyReused,
    Internal,
    InvalidJson,
    NotFoundError,
    PayloadTooLarge,
    Prediction,
    PrincipalImmutable,
    Provider,
    ProviderError,
    RateLimited,
    Replay,
    ResponseNotFound,
    RouteNotFound,
    RunNotFound,
    ServerError,
    Session,
    SessionArchived,
    SessionCapabilityMismatch,
    SessionNotFound,
    ToolCallsMismatch,
    ToolEvent,
    Unauthorized,
    Unavailable,
    UnprocessableError,
    ValidationError,
)
from tests.client.fake_service import Drop, Events, FakeService, Reply

REPO = Path(__file__).resolve().parents[2]
TOKEN = "secret-token-7f3a9c1e5b"

SESSION = {
    "id": "ses_1",
    "capabilityId": "cap-generative",
    "externalRef": "customer-4471",
    "principal": {"tenant_id": "store-a", "user_id": "u_913"},
    "metadata": {"plan": "gold"},
    "status": "active",
    "createdAt": "2025-01-02T03:04:05.678Z",
    "lastActiveAt": "2025-01-02T03:04:06.000Z",
    "messageCount": 2,
}
PREDICTION = {
    "output": "You asked: Where is order 12345?",
    "withheld": False,
    "sessionId": "ses_1",
    "turn": {"userSeq": 1, "assistantSeq": 2},
    "recorded": True,
    "runId": None,
    "context": {
        "replayedMessages": 0,
        "replayedChars": 0,
        "omittedMessages": 0,
        "summaryIncluded": False,
    },
}
PREDICT = "/v1/capabilities/cap-generative/predict"
STREAM = "/v1/capabilities/cap-agent/predict/stream"


def error(status: int, code: str, message: str = "nope", **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


class Sleeps(list[float]):
    """Records the client's waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def client(service: FakeService, sleeps: Sleeps, **options: Any) -> Conversations:
    return Conversations(service.base_url, TOKEN, sleep=sleeps, timeout=5, **options)


# Auth, ids, cursors ----------------------------------------------------------------------


def test_the_token_goes_in_the_authorization_header_and_nowhere_else(
    service: FakeService, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    service.on(
        "GET",
        "/v1/sessions/ses_1",
        Reply(503, error(503, "unavailable"), {"Retry-After": "0"}),
        Reply(200, SESSION),
    )
    service.on("GET", "/v1/runs/run_1", Reply(500, error(500, "internal", requestId="req-9")))
    c = client(service, sleeps)
    with caplog.at_level(logging.DEBUG, logger="convo_memory_client"):
        c.sessions.get("ses_1")
        with pytest.raises(Internal) as raised:
            c.runs.get("run_1")

    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in service.received)
    assert caplog.records, "the retry is logged"
    shown = [repr(c), str(c.__dict__), caplog.text, str(raised.value), repr(raised.value)]
    assert all(TOKEN not in text for text in shown)


def test_path_ids_are_quoted_and_next_tokens_url_encoded(
    service: FakeService, sleeps: Sleeps
) -> None:
    odd_id = "ses/1 ?#%"
    tokens = ["a+b/c==", "x&y=z%20+"]
    path = "/v1/sessions/ses%2F1%20%3F%23%25/messages"
    message = {"role": "user", "content": "hi", "createdAt": "2025-01-02T03:04:05.678Z"}
    service.on(
        "GET",
        path,
        Reply(200, {"messages": [{**message, "seq": 1}], "nextToken": tokens[0]}),
        Reply(200, {"messages": [{**message, "seq": 2}], "nextToken": tokens[1]}),
        Reply(200, {"messages": [{**message, "seq": 3}], "nextToken": None}),
    )

    messages = list(client(service, sleeps).sessions.messages(odd_id, limit=1))

    assert [m.seq for m in messages] == [1, 2, 3]
    calls = service.calls("GET", path)
    assert [c.query.get("nextToken") for c in calls] == [None, [tokens[0]], [tokens[1]]]
    assert all(c.query["limit"] == ["1"] for c in calls)
    assert "+" not in calls[1].target.split("?", 1)[1]  # '+' would decode as a space


def test_page_level_listing_returns_the_next_token(service: FakeService, sleeps: Sleeps) -> None:
    newer = {**SESSION, "id": "ses_2"}
    service.on("GET", "/v1/sessions", Reply(200, {"sessions": [newer], "nextToken": "t1"}))

    page = client(service, sleeps).sessions.list_page("customer 4471", limit=1)

    assert [s.id for s in page.items] == ["ses_2"] and page.next_token == "t1"
    assert service.received[0].query == {"externalRef": ["customer 4471"], "limit": ["1"]}


def test_listing_iterates_every_page(service: FakeService, sleeps: Sleeps) -> None:
    service.on(
        "GET",
        "/v1/sessions",
        Reply(200, {"sessions": [{**SESSION, "id": "ses_3"}], "nextToken": "n1"}),
        Reply(200, {"sessions": [{**SESSION, "id": "ses_2"}], "nextToken": "n2"}),
        Reply(200, {"sessions": [{**SESSION, "id": "ses_1"}], "nextToken": None}),
    )

    ids = [s.id for s in client(service, sleeps).sessions.list("customer-4471")]

    assert ids == ["ses_3", "ses_2", "ses_1"]


def test_a_base_url_with_a_path_and_a_separate_stream_url(
    service: FakeService, sleeps: Sleeps
) -> None:
    with FakeService() as stream_service:
        service.on("POST", "/prod/v1/capabilities/cap-generative/predict", Reply(200, PREDICTION))
        stream_service.on(
            "POST",
            "/v1/capabilities/cap-generative/predict/stream",
            Events([("delta", {"text": "hi"}), ("done", PREDICTION)]),
        )
        c = Conversations(
            service.base_url + "/prod/", TOKEN, stream_url=stream_service.base_url + "/"
        )

        assert c.predict("cap-generative", "hi").output == PREDICTION["output"]
        assert [type(e) for e in c.stream("cap-generative", "hi")] == [Delta, Done]
        assert len(stream_service.received) == 1
        assert stream_service.received[0].headers["authorization"] == f"Bearer {TOKEN}"


# Retries ----------------------------------------------------------------------------------


def test_429_with_retry_after_then_success_retries_the_turn_with_the_same_key(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on(
        "POST",
        PREDICT,
        Reply(429, error(429, "rate_limited"), {"Retry-After": "2"}),
        Reply(200, PREDICTION),
    )

    prediction = client(service, sleeps).predict(
        "cap-generative", "Where is order 12345?", session_id="ses_1"
    )

    assert prediction.output == PREDICTION["output"] and prediction.turn is not None
    assert sleeps == [2.0]
    keys = [r.headers["idempotency-key"] for r in service.calls("POST", PREDICT)]
    assert len(keys) == 2 and keys[0] == keys[1]
    uuid.UUID(keys[0])  # generated by the client
    assert service.received[0].body == {"input": "Where is order 12345?", "sessionId": "ses_1"}


def test_each_logical_turn_gets_its_own_key_and_a_given_key_is_sent_as_is(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on("POST", PREDICT, Reply(200, PREDICTION))
    service.on("POST", "/v1/sessions/ses_1/messages", Reply(200, PREDICTION))
    c = client(service, sleeps)

    c.predict("cap-generative", "one")
    c.predict("cap-generative", "two")
    c.sessions.send("ses_1", "three", idempotency_key="order-12345-cancel")

    keys = [r.headers["idempotency-key"] for r in service.received]
    assert keys[0] != keys[1] and keys[2] == "order-12345-cancel"
    assert service.received[2].body == {"input": "three"}


def test_503_then_success_on_a_read(service: FakeService, sleeps: Sleeps) -> None:
    service.on(
        "GET",
        "/v1/sessions/ses_1/context",
        Reply(503, error(503, "unavailable"), {"Retry-After": "1"}),
        Reply(
            200,
            {
                "summary": {"text": "earlier: order 12345", "throughSeq": 4},
                "messages": [
                    {"seq": 5, "role": "user", "content": "hi", "createdAt": "2025-01-02T03:04:05Z"}
                ],
                "toolDigests": [{"seq": 6, "tools": ["lookup_order"], "text": "ETA friday"}],
                "omittedMessages": 4,
                "replayedChars": 2,
                "recall": {"text": "Earlier: a dog, Biscuit", "fromSessions": ["ses_0"]},
            },
        ),
    )

    context = client(service, sleeps).sessions.context("ses_1")

    assert sleeps == [1.0]
    assert context.summary is not None and context.summary.through_seq == 4
    assert [m.seq for m in context.messages] == [5]
    assert context.tool_digests[0].tools == ["lookup_order"]
    assert (context.omitted_messages, context.replayed_chars) == (4, 2)
    assert context.recall is not None and context.recall.from_sessions == ["ses_0"]
    assert context.recall.text == "Earlier: a dog, Biscuit"


@pytest.mark.parametrize("status", [500, 502])
def test_500_and_502_retry_a_keyed_turn_but_not_a_read(
    service: FakeService, sleeps: Sleeps, status: int
) -> None:
    code = "internal" if status == 500 else "provider_error"
    service.on(
        "POST",
        "/v1/sessions/ses_1/messages",
        Reply(status, error(status, code)),
        Reply(200, PREDICTION),
    )
    service.on("GET", "/v1/sessions/ses_1", Reply(status, error(status, code, requestId="req-1")))
    c = client(service, sleeps)

    assert c.sessions.send("ses_1", "hello").recorded is True
    with pytest.raises(ServerError) as raised:
        c.sessions.get("ses_1")

    turns = service.calls("POST", "/v1/sessions/ses_1/messages")
    assert len(turns) == 2 and len({r.headers["idempotency-key"] for r in turns}) == 1
    assert len(service.calls("GET", "/v1/sessions/ses_1")) == 1
    assert raised.value.status == status and raised.value.request_id == "req-1"
    assert len(sleeps) == 1


def test_idempotency_in_progress_is_retried_with_bounded_backoff(
    service: FakeService, sleeps: Sleeps
) -> None:
    busy = Reply(409, error(409, "idempotency_in_progress"))
    service.on("POST", PREDICT, busy, busy, busy, Reply(200, PREDICTION))

    c = client(service, sleeps, backoff_base=0.5, backoff_max=1.0)
    assert c.predict("cap-generative", "hi").output == PREDICTION["output"]

    assert len(sleeps) == 3 and all(0 < s <= 1.0 for s in sleeps)
    assert len({r.headers["idempotency-key"] for r in service.received}) == 1


def test_retries_are_bounded_and_end_with_the_typed_error(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on("GET", "/v1/capabilities", Reply(503, error(503, "unavailable")))

    with pytest.raises(Unavailable):
        client(service, sleeps, max_retries=2).capabilities.list()

    assert len(service.received) == 3 and len(sleeps) == 2


def test_a_retry_after_longer_than_the_client_waits_is_raised_at_once(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on("POST", PREDICT, Reply(429, error(429, "rate_limited"), {"Retry-After": "120"}))

    with pytest.raises(RateLimited) as raised:
        client(service, sleeps, max_retry_after=30).predict("cap-generative", "hi")

    assert raised.value.retry_after == 120.0 and raised.value.status == 429
    assert sleeps == [] and len(service.received) == 1


def test_a_lost_answer_is_retried_for_turns_and_reads_but_not_for_creations(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on("POST", PREDICT, Drop(), Reply(200, PREDICTION))
    service.on("GET", "/v1/sessions/ses_1", Drop(), Reply(200, SESSION))
    service.on("POST", "/v1/sessions", Drop(), Reply(201, SESSION))
    c = client(service, sleeps)

    assert c.predict("cap-generative", "hi").session_id == "ses_1"
    assert c.sessions.get("ses_1").id == "ses_1"
    with pytest.raises(ConnectionFailed) as raised:
        c.sessions.create("cap-generative", "customer-4471")

    assert raised.value.status == 0
    assert len(service.calls("POST", PREDICT)) == 2
    assert len(service.calls("GET", "/v1/sessions/ses_1")) == 2
    # The session may have been created: sending it again could create a second one.
    assert len(service.calls("POST", "/v1/sessions")) == 1


def test_a_refused_connection_is_retried_even_for_creations(sleeps: Sleeps) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    c = Conversations(f"http://127.0.0.1:{port}", TOKEN, sleep=sleeps, max_retries=2, timeout=2)

    with pytest.raises(ConnectionFailed):
        c.sessions.create("cap-generative", "customer-4471")

    assert len(sleeps) == 2


# Typed errors --------------------------------------------------------------------------

CONTRACT_ERRORS = [
    (400, "invalid_json", InvalidJson),
    (401, "unauthorized", Unauthorized),
    (404, "capability_not_found", CapabilityNotFound),
    (404, "session_not_found", SessionNotFound),
    (404, "run_not_found", RunNotFound),
    (404, "not_found", RouteNotFound),
    (404, "response_not_found", ResponseNotFound),
    (409, "principal_immutable", PrincipalImmutable),
    (409, "external_ref_immutable", ExternalRefImmutable),
    (409, "capability_not_conversational", CapabilityNotConversational),
    (409, "session_capability_mismatch", SessionCapabilityMismatch),
    (409, "session_archived", SessionArchived),
    (409, "idempotency_in_progress", IdempotencyInProgress),
    (409, "tool_calls_mismatch", ToolCallsMismatch),
    (422, "idempotency_key_reused", IdempotencyKeyReused),
    (413, "payload_too_large", PayloadTooLarge),
    (422, "validation_error", ValidationError),
    (429, "rate_limited", RateLimited),
    (500, "internal", Internal),
    (502, "provider_error", ProviderError),
    (503, "unavailable", Unavailable),
]


@pytest.mark.parametrize(("status", "code", "cls"), CONTRACT_ERRORS)
def test_every_contract_code_raises_its_own_class(
    service: FakeService, sleeps: Sleeps, status: int, code: str, cls: type[ConversationsError]
) -> None:
    service.on(
        "PATCH",
        "/v1/sessions/ses_1",
        Reply(status, error(status, code, "why", details=[{"loc": ["metadata"]}])),
    )

    with pytest.raises(cls) as raised:
        client(service, sleeps, max_retries=0).sessions.update("ses_1", {"plan": "gold"})

    got = raised.value
    assert type(got) is cls and isinstance(got, ConversationsError)
    assert (got.status, got.code, got.message) == (status, code, "why")
    assert got.details == [{"loc": ["metadata"]}]
    assert service.received[0].body == {"metadata": {"plan": "gold"}}


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, NotFoundError),
        (409, ConflictError),
        (422, UnprocessableError),
        (401, AuthenticationError),
        (504, ServerError),
        (418, ConversationsError),
    ],
)
def test_an_unknown_code_raises_the_class_of_its_status(
    service: FakeService, sleeps: Sleeps, status: int, cls: type[ConversationsError]
) -> None:
    service.on("GET", "/v1/runs/run_1", Reply(status, error(status, "brand_new_code")))

    with pytest.raises(ConversationsError) as raised:
        client(service, sleeps, max_retries=0).runs.get("run_1")

    assert type(raised.value) is cls
    assert (raised.value.status, raised.value.code) == (status, "brand_new_code")


def test_an_error_page_that_is_not_json_still_raises_by_status(
    service: FakeService, sleeps: Sleeps
) -> None:
    html = b"<html><body>Bad Gateway</body></html>"
    service.on("GET", "/v1/providers", Reply(502, raw=html, headers={"apigw-requestid": "gw-7"}))

    with pytest.raises(ServerError) as raised:
        client(service, sleeps).providers.list()

    assert (raised.value.status, raised.value.code, raised.value.request_id) == (
        502,
        "unknown",
        "gw-7",
    )


def test_a_success_that_is_not_json_raises(service: FakeService, sleeps: Sleeps) -> None:
    service.on("GET", "/v1/providers", Reply(200, raw=b"<html>login page</html>"))

    with pytest.raises(ConversationsError) as raised:
        client(service, sleeps).providers.list()

    assert (raised.value.status, raised.value.code) == (200, "invalid_response")


# Streaming ---------------------------------------------------------------------------------


def test_stream_yields_tool_events_then_deltas_then_done(
    service: FakeService, sleeps: Sleeps
) -> None:
    done = {**PREDICTION, "output": "Order 12345 ships friday.", "runId": "run_7"}
    service.on(
        "POST",
        STREAM,
        Events(
            [
                ("tool", {"name": "lookup_order", "status": "ok"}),
                ("tool", {"name": "track_parcel", "status": "error"}),
                ("delta", {"text": "Order 12345 "}),
                ("delta", {"text": "ships friday."}),
                ("done", done),
            ]
        ),
    )

    stream = client(service, sleeps).stream(
        "cap-agent", "Where is order 12345?", session_id="ses_1"
    )
    events = list(stream)

    assert [(e.name, e.status) for e in events if isinstance(e, ToolEvent)] == [
        ("lookup_order", "ok"),
        ("track_parcel", "error"),
    ]
    assert [type(e) for e in events] == [ToolEvent, ToolEvent, Delta, Delta, Done]
    assert "".join(e.text for e in events if isinstance(e, Delta)) == done["output"]
    final = events[-1]
    assert isinstance(final, Done) and final.prediction.run_id == "run_7"
    assert stream.prediction == final.prediction
    request = service.received[0]
    assert request.headers["accept"] == "text/event-stream"
    assert request.body == {"input": "Where is order 12345?", "sessionId": "ses_1"}
    uuid.UUID(request.headers["idempotency-key"])


def test_an_error_event_is_raised_as_its_typed_error(service: FakeService, sleeps: Sleeps) -> None:
    service.on(
        "POST",
        STREAM,
        Events(
            [("delta", {"text": "partial"}), ("error", {"code": "internal", "message": "boom"})]
        ),
    )

    events: list[Any] = []
    with pytest.raises(Internal) as raised:
        for event in client(service, sleeps).stream("cap-agent", "hi"):
            events.append(event)

    assert events == [Delta("partial")]
    assert (raised.value.status, raised.value.message) == (500, "boom")
    assert len(service.received) == 1  # never retried once events flowed


def test_unknown_event_types_are_skipped(service: FakeService, sleeps: Sleeps) -> None:
    service.on(
        "POST",
        STREAM,
        Events([("ping", {}), ("delta", {"text": "a", "extra": 1}), ("done", PREDICTION)]),
    )

    events = list(client(service, sleeps).stream("cap-agent", "hi"))

    assert events[0] == Delta("a") and isinstance(events[1], Done) and len(events) == 2


def test_a_stream_refused_before_it_starts_raises_at_the_call(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on("POST", STREAM, Reply(404, error(404, "session_not_found")))

    with pytest.raises(SessionNotFound):
        client(service, sleeps).stream("cap-agent", "hi", session_id="nope")


def test_a_stream_is_retried_until_its_first_event_with_the_same_key(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on(
        "POST",
        STREAM,
        Reply(503, error(503, "unavailable"), {"Retry-After": "1"}),
        Events([("delta", {"text": "never"})], cut_after=0),  # 200, then closed: no event
        Drop(),
        Events([("delta", {"text": "hello"}), ("done", PREDICTION)]),
    )

    events = list(client(service, sleeps).stream("cap-agent", "hi"))

    assert events[0] == Delta("hello") and isinstance(events[1], Done)
    assert len(service.received) == 4 and sleeps[0] == 1.0 and len(sleeps) == 3
    assert len({r.headers["idempotency-key"] for r in service.received}) == 1


def test_an_error_before_any_event_is_handled_like_a_refusal(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on(
        "POST",
        STREAM,
        Events([("error", {"code": "unavailable", "message": "try again"})]),
        Events([("delta", {"text": "ok"}), ("done", PREDICTION)]),
    )
    service.on(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        Events([("error", {"code": "session_archived", "message": "archived"})]),
    )
    c = client(service, sleeps)

    assert [type(e) for e in c.stream("cap-agent", "hi")] == [Delta, Done]
    with pytest.raises(SessionArchived) as raised:
        c.stream("cap-generative", "hi", session_id="ses_1")  # raised at the call

    assert raised.value.status == 409 and len(sleeps) == 1
    assert len(service.calls("POST", STREAM)) == 2


def test_a_stream_cut_after_its_first_event_is_not_retried(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.on(
        "POST", STREAM, Events([("delta", {"text": "a"}), ("delta", {"text": "b"})], cut_after=1)
    )

    stream = client(service, sleeps).stream("cap-agent", "hi")
    assert next(stream) == Delta("a")
    with pytest.raises(ConnectionFailed):
        next(stream)

    assert len(service.received) == 1 and sleeps == []


# Typed results -----------------------------------------------------------------------------


def test_providers_are_listed(service: FakeService, sleeps: Sleeps) -> None:
    service.on(
        "GET",
        "/v1/providers",
        Reply(
            200,
            {
                "providers": [
                    {"connection": "embedded", "type": "embedded", "models": ["*"]},
                    {
                        "connection": "bedrock",
                        "type": "bedrock",
                        "models": ["anthropic.*"],
                        "region": "x",
                    },
                ]
            },
        ),
    )

    providers = client(service, sleeps).providers.list()

    assert providers == [
        Provider("embedded", "embedded", ["*"]),
        Provider("bedrock", "bedrock", ["anthropic.*"]),
    ]
    assert providers[1].raw["region"] == "x"


def test_unknown_fields_are_tolerated_and_kept_in_raw(service: FakeService, sleeps: Sleeps) -> None:
    service.on("GET", "/v1/sessions/ses_1", Reply(200, {**SESSION, "colour": "teal"}))
    service.on(
        "GET",
        "/v1/sessions/ses_1/messages",
        Reply(
            200,
            {
                "messages": [
                    {
                        "seq": 2,
                        "role": "assistant",
                        "content": "x" * 10,
                        "createdAt": "2025-01-02T03:04:05.678Z",
                        "withheld": False,
                        "truncated": True,
                        "tokens": 1234,
                    }
                ],
                "nextToken": None,
                "total": 1,
            },
        ),
    )
    service.on("POST", PREDICT, Reply(200, {**PREDICTION, "latencyMs": 12, "truncated": True}))
    c = client(service, sleeps)

    session = c.sessions.get("ses_1")
    (message,) = list(c.sessions.messages("ses_1"))
    prediction = c.predict("cap-generative", "hi")

    assert session.raw["colour"] == "teal" and session.principal == SESSION["principal"]
    assert session.created_at == datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert session.message_count == 2 and not session.archived
    assert message.truncated is True and message.raw["tokens"] == 1234
    assert isinstance(prediction, Prediction) and prediction.raw["latencyMs"] == 12
    assert prediction.context is not None and prediction.context.summary_included is False


def test_a_tool_signing_secret_is_returned_once_and_never_shown_in_repr(
    service: FakeService, sleeps: Sleeps
) -> None:
    secret = "whsec_0123456789abcdef"
    capability = {
        "id": "cap_9",
        "name": "orders agent",
        "kind": "agent",
        "provider": {"connection": "embedded"},
        "tools": [{"name": "track_parcel", "url": "https://tools.example/track"}],
        "maxToolSteps": 3,
        "createdAt": "2025-01-02T03:04:05Z",
        "futureField": {"a": 1},
    }
    service.on("POST", "/v1/capabilities", Reply(201, {**capability, "toolSigningSecret": secret}))
    service.on("GET", "/v1/capabilities/cap_9", Reply(200, capability))
    c = client(service, sleeps)

    created = c.capabilities.create(
        "orders agent",
        "agent",
        {"connection": "embedded"},
        tools=[{"name": "track_parcel", "url": "https://tools.example/track"}],
        max_tool_steps=3,
    )
    fetched = c.capabilities.get("cap_9")

    assert created.tool_signing_secret == secret and fetched.tool_signing_secret is None
    assert secret not in repr(created) and secret not in str(created.raw)
    assert created.max_tool_steps == 3 and created.raw["futureField"] == {"a": 1}
    assert service.received[0].body == {
        "name": "orders agent",
        "kind": "agent",
        "provider": {"connection": "embedded"},
        "tools": [{"name": "track_parcel", "url": "https://tools.example/track"}],
        "maxToolSteps": 3,
    }


def test_a_capability_with_recall_is_sent_and_read_back(
    service: FakeService, sleeps: Sleeps
) -> None:
    capability = {
        "id": "cap_r",
        "name": "remembers",
        "kind": "generative",
        "provider": {"connection": "embedded"},
        "recall": {"sessions": 3, "maxChars": 2000},
        "createdAt": "2025-01-02T03:04:05Z",
    }
    service.on("POST", "/v1/capabilities", Reply(201, capability))

    created = client(service, sleeps).capabilities.create(
        "remembers", "generative", recall={"sessions": 3}
    )

    assert created.recall == {"sessions": 3, "maxChars": 2000}
    assert service.received[0].body == {
        "name": "remembers",
        "kind": "generative",
        "recall": {"sessions": 3},
    }


def test_a_replay_alignment_is_sent_and_read_back(service: FakeService, sleeps: Sleeps) -> None:
    replay = {"maxMessages": 10, "maxChars": 12000, "minMessages": 2, "alignment": 10}
    capability = {
        "id": "cap_7",
        "name": "support",
        "kind": "generative",
        "provider": {"connection": "embedded"},
        "replay": replay,
        "createdAt": "2025-01-02T03:04:05Z",
    }
    service.on("POST", "/v1/capabilities", Reply(201, capability))
    c = client(service, sleeps)

    created = c.capabilities.create(
        "support", "generative", {"connection": "embedded"}, replay=Replay(10, 12000, 2, 10)
    )

    assert service.received[0].body["replay"] == replay
    assert created.replay == Replay(10, 12000, 2, alignment=10)
    # The default is not sent (and reads back as 1 from a server that does not say).
    assert "alignment" not in Replay(20, 12000, 2).to_json()
    assert Replay.from_json({"maxMessages": 4}).alignment == 1


def test_the_client_package_needs_nothing_but_the_standard_library() -> None:
    # -I -S: no site-packages at all, only the client's own directory.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import convo_memory_client as c; "
        "print(c.Conversations.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(REPO / "client")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Conversations"


# Forks and what a turn was sent -------------------------------------------------------------


def test_a_fork_is_created_once_and_its_point_read_back(
    service: FakeService, sleeps: Sleeps
) -> None:
    forked = {**SESSION, "id": "ses_2", "forkOf": {"sessionId": "ses_1", "atSeq": 2}}
    service.on("POST", "/v1/sessions/ses_1/forks", Drop(), Reply(201, forked))

    with pytest.raises(ConnectionFailed):  # a lost answer may hide a created fork
        client(service, sleeps).sessions.fork("ses_1", 2)
    made = client(service, sleeps).sessions.fork("ses_1", 2, metadata={"edited": True})

    assert made.fork_of == ForkPoint(session_id="ses_1", at_seq=2)
    assert [r.body for r in service.received] == [
        {"atSeq": 2},
        {"atSeq": 2, "metadata": {"edited": True}},
    ]
    assert Session.from_json(SESSION).fork_of is None


def test_what_a_turn_was_sent_tells_kept_parts_from_expired_ones(
    service: FakeService, sleeps: Sleeps
) -> None:
    message = {"seq": 1, "role": "user", "content": "hi", "createdAt": "2025-01-02T03:04:05Z"}
    sent = {
        "seq": 4,
        "instructions": "Be brief.",
        "recall": None,
        "summary": {"throughSeq": 2, "expired": True},
        "toolDigests": [
            {"seq": 2, "expired": True},
            {"seq": 4, "tools": ["lookup_order"], "text": "ETA Friday"},
        ],
        "messages": [message],
        "input": "and now?",
        "appTools": ["get_weather"],
    }
    service.on("GET", "/v1/sessions/ses_1/messages/3/prompt", Reply(200, sent))

    got = client(service, sleeps).sessions.prompt_of("ses_1", 3)

    assert (got.seq, got.instructions, got.input, got.app_tools) == (
        4,
        "Be brief.",
        "and now?",
        ["get_weather"],
    )
    assert (got.summary, got.summary_expired, got.expired_digests) == (None, True, [2])
    assert [(d.seq, d.text) for d in got.tool_digests] == [(4, "ETA Friday")]
    assert [m.content for m in got.messages] == ["hi"]


def test_a_conversation_not_bound_yet_reads_as_a_session_of_no_capability_or_end_user(
    service: FakeService, sleeps: Sleeps
) -> None:
    # A conversation opened by POST /v1/conversations: its first response binds it.
    unbound = {**SESSION, "id": "conv_1", "capabilityId": None, "externalRef": None}
    service.on("GET", "/v1/sessions/conv_1", Reply(200, unbound))

    got = client(service, sleeps).sessions.get("conv_1")

    assert (got.id, got.capability_id, got.external_ref) == ("conv_1", None, None)
    bound = Session.from_json(SESSION)
    assert (bound.capability_id, bound.external_ref) == ("cap-generative", "customer-4471")
