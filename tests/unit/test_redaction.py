"""Credential redaction in what a provider said, before it is logged (no client sees
it: a 502 is in the service's own words): the whole key, any 6+ character fragment of it
in any letter case, and the word around it go, as does a masked word
(tests/integration/test_provider_redaction.py shows it on every door); and 5xx errors
carry their requestId."""

from __future__ import annotations

from convo_memory.adapters.providers.openai_http import redact_secrets, shorten
from convo_memory.domain.errors import (
    InternalError,
    ProviderError,
    SessionNotFound,
    Unavailable,
)

KEY = "sk-live-4f9Qz7Lm2Xc8Vb1Nw6Rt3Yp0s0Ta"


def test_the_whole_key_and_every_fragment_in_any_case_are_redacted() -> None:
    assert redact_secrets(f"bad key {KEY}!", [KEY]) == "bad key ***"
    assert redact_secrets(f"prefix {KEY[:6]} and suffix {KEY[-6:]}.", [KEY]) == (
        "prefix *** and suffix ***"
    )
    assert redact_secrets(f"[{KEY[5:20]}]", [KEY]) == "[***]"
    assert redact_secrets(f"upper {KEY.upper()} lower {KEY.lower()}", [KEY]) == (
        "upper *** lower ***"
    )


def test_a_key_quoted_masked_goes_whole() -> None:
    # How OpenAI quotes a key it refused, and a mask around the key's last characters.
    said = f"Incorrect API key provided: {KEY[:7]}****...{KEY[-4:]}. See your settings."
    assert redact_secrets(said, [KEY]) == "Incorrect API key provided: *** See your settings."
    assert redact_secrets(f'key "{KEY[-7:]}*****" refused', [KEY]) == 'key "***" refused'
    assert redact_secrets("a key like abcd****wxyz", []) == "a key like ***"


def test_short_fragments_and_other_text_stay() -> None:
    # Five characters of the key are ordinary text, not a secret.
    assert redact_secrets(f"{KEY[8:13]} is here", [KEY]) == f"{KEY[8:13]} is here"
    assert redact_secrets("nothing to hide", [KEY]) == "nothing to hide"
    assert redact_secrets("", [KEY]) == ""


def test_several_keys_and_a_short_key() -> None:
    other = "another-credential-value"
    text = f"a={KEY} b={other} c=xyz"
    assert redact_secrets(text, [KEY, other, "xyz"]) == "a=*** b=*** c=***"
    assert redact_secrets(text, []) == text
    assert redact_secrets(text, [""]) == text


def test_a_provider_error_names_its_connection_once() -> None:
    error = ProviderError("Model provider error: the provider answered HTTP 401.")
    error.on_connection("openai").on_connection("other")
    assert error.message == (
        "Model provider error: connection 'openai': the provider answered HTTP 401."
    )
    assert str(error) == error.message and error.connection == "openai"


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
