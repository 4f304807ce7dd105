"""Prompt-cache routing keys: one per lineage, keyed by the deployment's secret under a
label of their own, and a turn that goes without one while the secret cannot be read."""

from __future__ import annotations

import hashlib
import hmac

from convo_memory.adapters.cache_keys import RETRY_AFTER_SECONDS, PromptCacheKeys
from convo_memory.adapters.cursors import CursorCodec, CursorKeyUnavailable
from convo_memory.domain.prompt import lineage_of
from tests.fakes.adapters import FakeClock

SECRET = b"a deployment's cursor signing key, 32+ bytes"


def test_a_lineage_has_one_key_and_another_lineage_another() -> None:
    keys = PromptCacheKeys(lambda: SECRET)

    first = keys.key("sess_a")

    assert first == keys.key("sess_a") == PromptCacheKeys(lambda: SECRET).key("sess_a")
    assert first != keys.key("sess_b")
    assert first != PromptCacheKeys(lambda: b"another deployment's key....").key("sess_a")
    assert first is not None and len(first) == 32 and "sess" not in first


def test_the_key_is_not_a_plain_hmac_of_the_lineage_nor_a_cursor_signature() -> None:
    key = PromptCacheKeys(lambda: SECRET).key("sess_a")
    plain = hmac.new(SECRET, b"sess_a", hashlib.sha256).hexdigest()
    cursor = CursorCodec(lambda: SECRET).issue({"after": 2}, ["sess_a"])

    assert key is not None and key not in plain and key not in cursor


def test_a_session_is_its_own_lineage_today() -> None:
    from tests.fakes.app import WS, fake_app

    app = fake_app()
    app.capability("cap")
    session = app.container.sessions.get(WS, app.session("cap"))

    assert lineage_of(session) == session.id


def test_without_a_readable_secret_requests_go_without_a_key_and_it_is_read_again_later() -> None:
    reads: list[int] = []
    clock = FakeClock(0.0)

    def secret() -> bytes:
        reads.append(1)
        if len(reads) == 1:
            raise CursorKeyUnavailable("the secret is throttled")
        return SECRET

    keys = PromptCacheKeys(secret, monotonic=clock)

    assert keys.key("sess_a") is None
    assert keys.key("sess_a") is None and len(reads) == 1  # not read on every turn
    clock.advance(RETRY_AFTER_SECONDS)
    assert keys.key("sess_a") == PromptCacheKeys(lambda: SECRET).key("sess_a")
    keys.key("sess_b")
    assert len(reads) == 2  # read once, then kept
