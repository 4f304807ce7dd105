"""Content filters: embedded terms and patterns, and the Bedrock guardrail (Stubber)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from convo_memory.adapters.filters import (
    BedrockGuardrailFilter,
    EmbeddedContentFilter,
    build_content_filter,
)
from convo_memory.domain.models import ContentFilterConfig
from tests.support.bedrock_events import bedrock_client

# --- embedded ------------------------------------------------------------------------


def test_terms_match_case_insensitively_as_substrings() -> None:
    content_filter = EmbeddedContentFilter(blocked_terms=["Secret"])
    assert not content_filter.check("the TOP SECRET plan").allowed
    assert not content_filter.check("no secrets here").allowed  # substring, by design
    assert content_filter.check("nothing to hide").allowed


def test_terms_use_unicode_casefolding() -> None:
    assert not EmbeddedContentFilter(blocked_terms=["straße"]).check("HAUPTSTRASSE 1").allowed


def test_blank_terms_block_nothing() -> None:
    assert EmbeddedContentFilter(blocked_terms=["", "   "]).check("anything").allowed


def test_patterns_are_regular_expressions_used_as_given() -> None:
    ssn = EmbeddedContentFilter(blocked_patterns=[r"\b\d{3}-\d{2}-\d{4}\b"])
    assert not ssn.check("my number is 123-45-6789").allowed
    assert ssn.check("call 555-0100").allowed
    # No implicit IGNORECASE: a pattern opts in with (?i).
    assert EmbeddedContentFilter(blocked_patterns=["forbidden"]).check("FORBIDDEN").allowed
    assert not EmbeddedContentFilter(blocked_patterns=["(?i)forbidden"]).check("FORBIDDEN").allowed


def test_the_verdict_says_what_matched() -> None:
    content_filter = EmbeddedContentFilter(["alpha"], [r"beta\d"])
    assert "alpha" in content_filter.check("ALPHA").reason
    assert r"beta\d" in content_filter.check("beta7").reason
    assert content_filter.check("gamma").reason == ""


def test_build_content_filter() -> None:
    assert build_content_filter(None) is None
    built = build_content_filter(
        ContentFilterConfig(type="embedded", blocked_terms=["x-ray"], blocked_patterns=["^no"])
    )
    assert built is not None
    assert not built.check("an X-RAY image").allowed
    assert not built.check("no way").allowed
    assert built.check("yes way").allowed


# --- Bedrock guardrail ---------------------------------------------------------------


@pytest.fixture
def client() -> Any:
    return bedrock_client()  # never reached: stubbed or short-circuited


USAGE = {
    "topicPolicyUnits": 1,
    "contentPolicyUnits": 1,
    "wordPolicyUnits": 1,
    "sensitiveInformationPolicyUnits": 1,
    "sensitiveInformationPolicyFreeUnits": 0,
    "contextualGroundingPolicyUnits": 0,
}


def guardrail_response(action: str) -> dict[str, Any]:
    outputs = [{"text": "Sorry, I can't share that."}] if action != "NONE" else []
    return {"usage": USAGE, "action": action, "outputs": outputs, "assessments": []}


def expected_call(text: str) -> dict[str, Any]:
    return {
        "guardrailIdentifier": "gr-123",
        "guardrailVersion": "2",
        "source": "OUTPUT",
        "content": [{"text": {"text": text}}],
    }


def test_guardrail_allows_when_it_does_not_intervene(client: Any) -> None:
    content_filter = BedrockGuardrailFilter(client, "gr-123", "2")
    with Stubber(client) as stubber:
        stubber.add_response("apply_guardrail", guardrail_response("NONE"), expected_call("ok"))
        assert content_filter.check("ok").allowed
        stubber.assert_no_pending_responses()


def test_guardrail_withholds_when_it_intervenes(client: Any) -> None:
    content_filter = BedrockGuardrailFilter(client, "gr-123", "2")
    with Stubber(client) as stubber:
        stubber.add_response(
            "apply_guardrail", guardrail_response("GUARDRAIL_INTERVENED"), expected_call("bad")
        )
        verdict = content_filter.check("bad")
    assert not verdict.allowed
    assert "intervened" in verdict.reason


@pytest.mark.parametrize("code", ["ThrottlingException", "AccessDeniedException"])
def test_guardrail_failures_withhold_the_answer(client: Any, code: str) -> None:
    content_filter = BedrockGuardrailFilter(client, "gr-123", "2")
    with Stubber(client) as stubber:
        stubber.add_client_error("apply_guardrail", service_error_code=code)
        verdict = content_filter.check("probably fine")
    assert not verdict.allowed
    assert code in verdict.reason


def test_an_unreachable_guardrail_withholds_the_answer(client: Any) -> None:
    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    client.meta.events.register("before-send.bedrock-runtime.ApplyGuardrail", refuse)
    verdict = BedrockGuardrailFilter(client, "gr-123", "2").check("probably fine")
    assert not verdict.allowed
    assert "EndpointConnectionError" in verdict.reason


def test_blank_answers_are_not_sent_to_the_guardrail(client: Any) -> None:
    # With nothing stubbed, a call would fail and the answer would be withheld.
    with Stubber(client):
        assert BedrockGuardrailFilter(client, "gr-123", "2").check("  ").allowed


def test_build_content_filter_makes_a_lazy_guardrail_filter(client: Any) -> None:
    calls: list[tuple[Any, ...]] = []

    def factory(*args: Any) -> Any:
        calls.append(args)
        return client

    config = ContentFilterConfig(
        type="bedrock-guardrail", guardrail_id="gr-123", guardrail_version="2"
    )
    content_filter = build_content_filter(config, bedrock_clients=factory, timeout_seconds=7)
    assert isinstance(content_filter, BedrockGuardrailFilter)
    assert calls == []
    with Stubber(client) as stubber:
        stubber.add_response(
            "apply_guardrail", guardrail_response("GUARDRAIL_INTERVENED"), expected_call("x")
        )
        assert not content_filter.check("x").allowed
    assert calls == [(None, 7)]  # the function's region, the deployment's timeout


# --- linear time and bounds (issue 7) ---------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "tail", "allowed"),
    [
        ("(a+)+$", "!", True),
        ("(a+)+$", "", False),
        ("(a|aa)*c", "!", True),
        ("(a*)*b", "!", True),
        ("(x+x+)+y", "!", True),
        ("^(a?){25}a{25}$", "!", True),
        ("(.*a){40}!", "!", False),
    ],
)
def test_catastrophic_backtracking_patterns_run_on_re2_over_a_long_answer(
    pattern: str, tail: str, allowed: bool
) -> None:
    # Python's re needs 2^n steps for most of these on n "a"s: 30,000 of them would never
    # end. RE2 does not backtrack; the test would time out (pytest-timeout) if it did.
    content_filter = EmbeddedContentFilter(blocked_patterns=[pattern])

    verdict = content_filter.check("a" * 30_000 + tail)

    assert verdict.allowed is allowed


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"(?=secret)", r"(?<!x)y", r"(?P<n>a)(?P=n)", "(unclosed", r"a{1001}"],
)
def test_a_pattern_re2_refuses_is_a_validation_error(pattern: str) -> None:
    with pytest.raises(ValueError, match="not valid RE2"):
        ContentFilterConfig(type="embedded", blocked_patterns=[pattern])


def test_patterns_whose_programs_are_too_large_together_are_refused() -> None:
    ContentFilterConfig(type="embedded", blocked_patterns=["(.*a){40}"])  # within the budget

    with pytest.raises(ValueError, match="RE2 instructions"):
        ContentFilterConfig(type="embedded", blocked_patterns=["(.*a){200}"])
    with pytest.raises(ValueError, match="RE2 instructions"):
        ContentFilterConfig(type="embedded", blocked_patterns=["(.*a){40}"] * 3)


@pytest.mark.parametrize(
    "config",
    [
        {"blocked_terms": ["t"] * 201},
        {"blocked_terms": ["t" * 101]},
        {"blocked_patterns": ["p"] * 21},
        {"blocked_patterns": ["p" * 257]},
        {"blocked_patterns": [""]},
    ],
)
def test_tenant_supplied_sizes_are_bounded(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ContentFilterConfig(type="embedded", **config)


def test_terms_at_their_bounds_are_searched_as_plain_text() -> None:
    terms = [f"term-{i:03d}." + "x" * 91 for i in range(200)]  # 100 characters each
    content_filter = EmbeddedContentFilter(blocked_terms=terms)

    assert content_filter.check("a" * 30_000).allowed
    assert not content_filter.check("a" * 100 + terms[-1].upper()).allowed
    # A term is a literal: regular-expression syntax in it means nothing.
    assert EmbeddedContentFilter(blocked_terms=["a.c"]).check("abc").allowed
    assert not EmbeddedContentFilter(blocked_terms=["(a+)+$"]).check("x (A+)+$ y").allowed


def test_a_stored_pattern_re2_cannot_compile_withholds_every_answer() -> None:
    # Capabilities stored before patterns were RE2 may hold Python-only syntax: fail closed.
    content_filter = EmbeddedContentFilter(blocked_patterns=[r"(a)\1"])

    verdict = content_filter.check("harmless")

    assert not verdict.allowed and "not valid RE2" in verdict.reason


def test_an_answer_with_a_lone_surrogate_is_still_checked() -> None:
    content_filter = EmbeddedContentFilter(["secret"], [r"\d{4}"])

    assert not content_filter.check("the \ud800 secret").allowed
    assert not content_filter.check("pin \udfff 1234").allowed
    assert content_filter.check("fine \ud800").allowed
