"""Credential redaction in provider error texts: the whole key and any 8+ character
fragment of it go (tests/integration/test_provider_redaction.py shows it happens before
the text is shortened); and 5xx errors carry their requestId."""

from __future__ import annotations

from convo_memory.adapters.providers.openai_http import redact_secrets, shorten
from convo_memory.domain.errors import (
    InternalError,
    ProviderError,
    SessionNotFound,
    Unavailable,
)

KEY = "sk-live-4f9Qz7Lm2Xc8Vb1Nw6Rt3Yp0"


def test_the_whole_key_and_every_long_fragment_are_redacted() -> None:
    assert redact_secrets(f"bad key {KEY}!", [KEY]) == "bad key ***!"
    assert redact_secrets(f"prefix {KEY[:8]} and suffix {KEY[-9:]}", [KEY]) == (
        "prefix *** and suffix ***"
    )
    middle = KEY[5:20]
    assert redact_secrets(f"[{middle}]", [KEY]) == "[***]"


def test_short_fragments_and_other_text_stay() -> None:
    # Seven characters of the key are ordinary text (e.g. "sk-live"), not a secret.
    assert redact_secrets(f"{KEY[:7]} is the prefix", [KEY]) == f"{KEY[:7]} is the prefix"
    assert redact_secrets("nothing to hide", [KEY]) == "nothing to hide"
    assert redact_secrets("", [KEY]) == ""


def test_several_keys_and_a_short_key() -> None:
    other = "another-credential-value"
    text = f"a={KEY} b={other} c=xyz"
    assert redact_secrets(text, [KEY, other, "xyz"]) == "a=*** b=*** c=***"
    assert redact_secrets(text, []) == text
    assert redact_secrets(text, [""]) == text


def test_shorten_marks_the_cut() -> None:
    assert shorten("  short  ") == "short"
    cut = shorten("y" * 300)
    assert len(cut) == 200 and cut.endswith("\u2026")


def test_every_server_error_names_its_request_and_client_errors_do_not() -> None:
    provider = ProviderError("Model provider error: boom").in_request("req-1")
    assert provider.to_body() == {
        "error": {
            "code": "provider_error",
            "message": "Model provider error: boom",
            "requestId": "req-1",
        }
    }
    assert Unavailable().in_request("req-2").to_body()["error"]["requestId"] == "req-2"
    # An error that already names its request keeps it.
    assert InternalError("req-3").in_request("req-4").to_body()["error"]["requestId"] == "req-3"
    assert "requestId" not in SessionNotFound("no session").in_request("req-5").to_body()["error"]
