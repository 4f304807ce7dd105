"""Bedrock Converse provider against botocore: Stubber for request shapes and errors,
and a real event-stream body (fed to botocore's own parser, never sent anywhere) for
ConverseStream."""

from __future__ import annotations

import itertools
import json
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from convo_memory.adapters.aws_clients import AwsClients
from convo_memory.adapters.providers.bedrock import BedrockConverseProvider, GuardrailRef
from convo_memory.adapters.providers.converse_messages import (
    EMPTY_CONTENT_PLACEHOLDER,
    LEADING_USER_PLACEHOLDER,
    normalize_messages,
)
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.prompt import ChatMessage, Prompt
from tests.support.bedrock_events import bedrock_client, event, exception_event, text_delta

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"


@pytest.fixture
def client() -> Any:
    return bedrock_client()


def prompt(*messages: tuple[str, str], system: str = "Be brief.") -> Prompt:
    chat = tuple(ChatMessage(role, content) for role, content in messages)
    return Prompt(system=system, messages=chat, user_input=chat[-1].content if chat else "")


def converse_response(*texts: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": t} for t in texts]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 12},
    }


# --- Converse: request shape ---------------------------------------------------------


def test_converse_sends_system_messages_and_inference_config(client: Any) -> None:
    # Given a provider with limits and a three-message prompt
    provider = BedrockConverseProvider(client, MODEL_ID, max_tokens=256, temperature=0.3)
    expected = {
        "modelId": MODEL_ID,
        "system": [{"text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"text": "hi"}]},
            {"role": "assistant", "content": [{"text": "hello"}]},
            {"role": "user", "content": [{"text": "what did I say?"}]},
        ],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.3},
    }
    with Stubber(client) as stubber:
        stubber.add_response("converse", converse_response("You said ", "hi."), expected)
        # When it completes
        completion = provider.complete(
            prompt(("user", "hi"), ("assistant", "hello"), ("user", "what did I say?"))
        )
        stubber.assert_no_pending_responses()
    # Then the text blocks are joined in order
    assert completion.text == "You said hi."
    assert completion.tool_calls == ()


def test_converse_omits_unset_options_and_passes_a_guardrail(client: Any) -> None:
    provider = BedrockConverseProvider(client, MODEL_ID, guardrail=GuardrailRef("gr-1", "3"))
    expected = {
        "modelId": MODEL_ID,
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "guardrailConfig": {"guardrailIdentifier": "gr-1", "guardrailVersion": "3"},
    }
    with Stubber(client) as stubber:
        stubber.add_response("converse", converse_response("ok"), expected)
        # A blank system prompt is not sent (Bedrock rejects blank text blocks).
        assert provider.complete(prompt(("user", "hi"), system="  ")).text == "ok"


def test_roles_are_normalized_before_the_call(client: Any) -> None:
    # Given a replay window that starts with assistant answers and repeats roles
    provider = BedrockConverseProvider(client, MODEL_ID)
    expected = {
        "modelId": MODEL_ID,
        "system": [{"text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"text": LEADING_USER_PLACEHOLDER}]},
            {"role": "assistant", "content": [{"text": "a1\n\na2"}]},
            {"role": "user", "content": [{"text": "u1\n\nu2"}]},
        ],
    }
    with Stubber(client) as stubber:
        stubber.add_response("converse", converse_response("ok"), expected)
        provider.complete(
            prompt(("assistant", "a1"), ("assistant", "a2"), ("user", "u1"), ("user", "u2"))
        )
        stubber.assert_no_pending_responses()


def test_blank_messages_get_a_placeholder() -> None:
    normalized = normalize_messages([ChatMessage("user", "  ")])
    assert normalized == [{"role": "user", "content": [{"text": EMPTY_CONTENT_PLACEHOLDER}]}]


@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant"]), st.text(min_size=1).filter(str.strip)),
        min_size=1,
        max_size=12,
    )
)
def test_normalized_messages_start_with_user_and_alternate(
    messages: list[tuple[str, str]],
) -> None:
    normalized = normalize_messages([ChatMessage(r, c) for r, c in messages])
    roles = [m["role"] for m in normalized]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles))
    # Nothing is lost: every message's text is there, in order.
    texts = "\n\n".join(m["content"][0]["text"] for m in normalized)
    position = 0
    for _, content in messages:
        position = texts.index(content, position) + len(content)


# --- error mapping -------------------------------------------------------------------

ERROR_CASES = [
    ("ThrottlingException", 429, "throttled"),
    ("ModelTimeoutException", 408, "timed out"),
    ("ServiceUnavailableException", 503, "unavailable"),
    ("InternalServerException", 500, "internal error"),
    ("ValidationException", 400, "invalid"),
    ("AccessDeniedException", 403, "access to the Bedrock model was denied"),
    ("ResourceNotFoundException", 404, "not found"),
    ("ModelNotReadyException", 429, "not ready"),
    ("ServiceQuotaExceededException", 400, "quota"),
    ("ModelErrorException", 424, "failed to process"),
]


@pytest.mark.parametrize(("code", "status", "phrase"), ERROR_CASES)
def test_client_errors_map_to_provider_errors_by_code(
    client: Any, code: str, status: int, phrase: str
) -> None:
    provider = BedrockConverseProvider(client, MODEL_ID)
    with Stubber(client) as stubber:
        # The message text is deliberately misleading and sensitive: only the code counts.
        stubber.add_client_error(
            "converse",
            service_error_code=code,
            service_message="Validation failed for arn:aws:iam::123456789012:role/secret",
            http_status_code=status,
        )
        with pytest.raises(ProviderError) as raised:
            provider.complete(prompt(("user", "hi")))
    message = str(raised.value)
    # The service's own words for the code, and the status: nothing Bedrock said.
    assert phrase in message and f"(HTTP {status})" in message
    assert code not in message and "123456789012" not in message
    assert raised.value.status == 502 and raised.value.code == "provider_error"
    assert raised.value.upstream_status == status


def test_unknown_error_codes_still_become_provider_errors(client: Any) -> None:
    provider = BedrockConverseProvider(client, MODEL_ID)
    with Stubber(client) as stubber:
        stubber.add_client_error("converse", service_error_code="BrandNewException")
        with pytest.raises(ProviderError, match="Bedrock call failed") as raised:
            provider.complete(prompt(("user", "hi")))
    assert "BrandNewException" not in str(raised.value)


def test_connection_failures_become_provider_errors(client: Any) -> None:
    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    client.meta.events.register("before-send.bedrock-runtime.Converse", refuse)
    provider = BedrockConverseProvider(client, MODEL_ID)
    with pytest.raises(ProviderError) as raised:
        provider.complete(prompt(("user", "hi")))
    # Not which failure it was: an error must not tell how the network failed.
    assert raised.value.message == "Model provider error: could not reach the provider."


def test_clients_take_the_connection_timeout_and_two_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")  # the function's own region
    clients = AwsClients().bedrock_runtime

    fast = clients("eu-west-1", 7)
    default_region = clients(None, 20)

    assert clients("eu-west-1", 7) is fast  # one client per (region, timeout)
    assert clients("eu-west-1", 8) is not fast
    assert fast.meta.region_name == "eu-west-1"
    assert fast.meta.config.read_timeout == 7
    assert fast.meta.config.connect_timeout == 5
    assert fast.meta.config.retries["total_max_attempts"] == 2  # one retry
    assert default_region.meta.config.read_timeout == 20
    assert default_region.meta.region_name == "us-east-2"


def test_stream_errors_before_the_first_event_are_mapped(client: Any) -> None:
    provider = BedrockConverseProvider(client, MODEL_ID)
    with Stubber(client) as stubber:
        stubber.add_client_error("converse_stream", service_error_code="AccessDeniedException")
        with pytest.raises(ProviderError, match="access to the Bedrock model was denied"):
            list(provider.stream(prompt(("user", "hi"))))


def test_the_client_is_built_on_first_use_only() -> None:
    built: list[Any] = []

    def factory() -> Any:
        built.append(bedrock_client())
        return built[-1]

    provider = BedrockConverseProvider(model_id=MODEL_ID, client_factory=factory)
    assert built == []
    # The factory runs on the first call and its client is reused afterwards.
    first = provider.client
    assert provider.client is first and len(built) == 1
    with Stubber(first) as stubber:
        stubber.add_response("converse", converse_response("ok"))
        assert provider.complete(prompt(("user", "hi"))).text == "ok"
    assert len(built) == 1


# --- ConverseStream with a real event-stream body ------------------------------------


class _RawStream:
    """What botocore reads an event stream from: chunks, in order."""

    def __init__(self, chunks: list[bytes], pulled: list[int]) -> None:
        self._chunks = chunks
        self.pulled = pulled
        self.closed = False

    def stream(self, **_: Any) -> Iterator[bytes]:
        for index, chunk in enumerate(self._chunks):
            self.pulled.append(index)
            yield chunk

    def close(self) -> None:
        self.closed = True


def serve_stream(client: Any, chunks: list[bytes]) -> tuple[list[dict[str, Any]], _RawStream]:
    """Answer ConverseStream calls with ``chunks`` (no network); record request bodies."""
    requests: list[dict[str, Any]] = []
    raw = _RawStream(chunks, [])

    def respond(request: Any, **_: Any) -> AWSResponse:
        requests.append(json.loads(request.body))
        headers = HTTPHeaders()
        headers["content-type"] = "application/vnd.amazon.eventstream"
        return AWSResponse(request.url, 200, headers, raw)

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", respond)
    return requests, raw


def test_stream_yields_each_delta_as_it_is_parsed(client: Any) -> None:
    # Given a stream of Bedrock events, one per network chunk
    chunks = [
        event("messageStart", {"role": "assistant"}),
        text_delta("Hel"),
        text_delta("lo"),
        text_delta(" there"),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": "end_turn"}),
    ]
    requests, raw = serve_stream(client, chunks)
    provider = BedrockConverseProvider(client, MODEL_ID, max_tokens=64)
    stream = provider.stream(prompt(("user", "hi")))
    # When the first delta is taken, only the chunks up to it have been read
    assert next(stream) == "Hel"
    assert raw.pulled == [0, 1]
    # Then the rest follows in order, and the request had the Converse shape
    assert list(stream) == ["lo", " there"]
    assert requests == [
        {
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 64},
        }
    ]


def test_an_exception_event_mid_stream_becomes_a_provider_error(client: Any) -> None:
    serve_stream(client, [text_delta("partial"), exception_event("throttlingException", "slow")])
    stream = BedrockConverseProvider(client, MODEL_ID).stream(prompt(("user", "hi")))
    assert next(stream) == "partial"
    with pytest.raises(ProviderError, match="Bedrock throttled the request") as raised:
        next(stream)
    assert "slow" not in str(raised.value)  # what the event said goes to the log only


def test_stopping_early_closes_the_stream(client: Any) -> None:
    _, raw = serve_stream(client, [text_delta("a"), text_delta("b"), text_delta("c")])
    stream = BedrockConverseProvider(client, MODEL_ID).stream(prompt(("user", "hi")))
    assert isinstance(stream, Generator)
    assert next(stream) == "a"
    stream.close()
    assert raw.closed
