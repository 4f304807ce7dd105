"""Signed opaque cursors: a position that only verifies for the listing it was issued for."""

from __future__ import annotations

import base64
import json

import pytest

from convo_memory.adapters.cursors import CursorCodec, CursorKeyUnavailable, key_source
from convo_memory.config import Settings
from convo_memory.domain.errors import ValidationFailed

KEY = b"unit-test-cursor-key-0123456789abcdef"
SCOPE = ("sessions", "ws_alpha", "customer-4471")
POSITION = {"createdAt": "2026-01-01T00:00:00.000Z", "id": "ses_0123"}


def codec(key: bytes = KEY) -> CursorCodec:
    return CursorCodec(lambda: key)


def test_a_cursor_opens_to_its_position_for_the_same_scope() -> None:
    token = codec().issue(POSITION, SCOPE)

    assert codec().open(token, SCOPE) == POSITION
    assert codec().open(None, SCOPE) is None
    assert codec().open("", SCOPE) is None


def test_the_cursor_carries_the_position_only() -> None:
    token = codec().issue(POSITION, SCOPE)

    version, payload, _ = token.split(".")
    assert version == "v1"
    assert json.loads(base64.urlsafe_b64decode(payload + "==")) == POSITION
    for bound in SCOPE:
        assert bound not in token


@pytest.mark.parametrize(
    "other_scope",
    [
        ("sessions", "ws_beta", "customer-4471"),
        ("sessions", "ws_alpha", "customer-0000"),
        ("messages", "ws_alpha", "customer-4471"),
        ("sessions", "ws_alpha.customer", "4471"),
        ("sessions", "ws_alpha"),
    ],
)
def test_a_cursor_replayed_against_another_scope_is_422(other_scope: tuple[str, ...]) -> None:
    token = codec().issue(POSITION, SCOPE)

    with pytest.raises(ValidationFailed) as refused:
        codec().open(token, other_scope)

    assert refused.value.status == 422


def test_a_cursor_signed_with_another_key_is_422() -> None:
    token = codec(b"another-deployment-key-000000000000").issue(POSITION, SCOPE)

    with pytest.raises(ValidationFailed):
        codec().open(token, SCOPE)


def _altered(token: str) -> list[str]:
    version, payload, signature = token.split(".")
    other = base64.urlsafe_b64encode(json.dumps({**POSITION, "id": "ses_9"}).encode())
    return [
        f"{version}.{other.decode().rstrip('=')}.{signature}",
        f"{version}.{payload}.{signature[:-1]}{'A' if signature[-1] != 'A' else 'B'}",
        f"{version}.{payload}.",
        f"{version}.{payload}.{signature}.extra",
        f"v0.{payload}.{signature}",
        f"{version}.{payload}.{signature}==",
        f"{version}.{payload}.{signature[:10]}é{signature[10:]}",
        f"{version}..{signature}",
        "a" * 5000,
        "garbage",
        "...",
    ]


def test_altered_truncated_and_forged_cursors_are_422() -> None:
    token = codec().issue(POSITION, SCOPE)

    for bad in _altered(token):
        with pytest.raises(ValidationFailed):
            codec().open(bad, SCOPE)


def test_a_signed_payload_that_is_not_an_object_is_422() -> None:
    signer = codec()
    token = signer.issue(POSITION, SCOPE)
    version, _, _ = token.split(".")
    payload = base64.urlsafe_b64encode(b"[1, 2]").decode().rstrip("=")
    # Sign a list with the codec's own MAC: only the shape check can refuse it.
    forged = f"{version}.{payload}.{base64.urlsafe_b64encode(signer._mac(payload, SCOPE)).decode().rstrip('=')}"

    with pytest.raises(ValidationFailed):
        signer.open(forged, SCOPE)


def test_the_key_is_read_once_per_codec() -> None:
    reads: list[int] = []

    def source() -> bytes:
        reads.append(1)
        return KEY

    signer = CursorCodec(source)
    for _ in range(3):
        signer.open(signer.issue(POSITION, SCOPE), SCOPE)

    assert reads == [1]


def _settings(**env: str) -> Settings:
    return Settings.from_env({"TABLE_NAME": "t", "RUNS_TABLE_NAME": "r", **env})


def test_the_signing_key_setting_wins_and_no_secret_is_read() -> None:
    def no_client() -> object:
        raise AssertionError("Secrets Manager must not be called")

    read = key_source(
        _settings(CURSOR_SIGNING_KEY="k" * 32, CURSOR_KEY_SECRET_ARN="arn:x"), no_client
    )

    assert read() == b"k" * 32


def test_without_a_key_setting_cursors_cannot_be_issued() -> None:
    read = key_source(_settings(), lambda: None)

    with pytest.raises(CursorKeyUnavailable):
        CursorCodec(read).issue(POSITION, SCOPE)
