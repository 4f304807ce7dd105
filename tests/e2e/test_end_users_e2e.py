"""An end user's data against `python -m local_runtime`, over HTTP: the export command
round-trips sessions and transcripts longer than a page, and an erasure of many sessions
is done by the runtime's own queue poller (the job's chunks and its cost are measured in
the integration tests and `make bench`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from convo_memory_client import Conversations, SessionNotFound
from tests.support.runtime_process import RuntimeProcess
from tests.support.tenants import unique_ref

pytestmark = pytest.mark.e2e
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
# More than the four with turns and the fifth checked below; the job's chunking and cost are
# the integration tests' (tests/integration/test_erasures.py) and make bench's.
ERASED_SESSIONS = 12


def export(runtime: RuntimeProcess, ref: str, token: str | None = None) -> Any:
    """``python -m convo_memory_client export`` with the base URL and token from the
    environment, as a user would run it."""
    env = {
        **os.environ,
        "CONVO_BASE_URL": runtime.base_url,
        "CONVO_TOKEN": token or runtime.tokens["dev"],
    }
    return subprocess.run(
        [sys.executable, "-m", "convo_memory_client", "export", "--external-ref", ref],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_export_round_trips_every_session_and_every_page_of_messages(
    client: Conversations, local_runtime: RuntimeProcess
) -> None:
    ref = unique_ref()
    older = client.sessions.create("cap-agent", ref, principal=PRINCIPAL)
    client.predict("cap-agent", "Where is order 12345?", session_id=older.id)
    newer = client.sessions.create("cap-generative", ref, metadata={"channel": "web"})
    said = [f"message number {n} with ünïcode" for n in range(55)]  # 110 messages
    for text in said:
        client.sessions.send(newer.id, text)
    client.sessions.create("cap-generative", unique_ref())  # someone else

    done = export(local_runtime, ref)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    sessions = [line for line in lines if line["type"] == "session"]
    # Newest first, each exactly as the API shows it.
    assert [s["id"] for s in sessions] == [newer.id, older.id]
    for line in sessions:
        shown = client.request("GET", f"/v1/sessions/{line['id']}")
        assert {k: v for k, v in line.items() if k != "type"} == shown
    # Each session's messages follow it, oldest first, every page of them.
    by_session: dict[str, list[dict[str, Any]]] = {}
    current = None
    for line in lines:
        if line["type"] == "session":
            current = line["id"]
        else:
            assert line["sessionId"] == current
            by_session.setdefault(current, []).append(line)
    newer_messages = by_session[newer.id]
    assert len(newer_messages) == 110 > 100
    assert [m["seq"] for m in newer_messages] == list(range(1, 111))
    assert [m["content"] for m in newer_messages if m["role"] == "user"] == said
    transcript = [m.raw for m in client.sessions.messages(newer.id)]
    assert [
        {k: v for k, v in m.items() if k not in ("type", "sessionId")} for m in newer_messages
    ] == transcript
    assert len(by_session[older.id]) == 2


def test_the_export_fails_with_one_line_and_a_non_zero_exit(
    local_runtime: RuntimeProcess,
) -> None:
    refused = export(local_runtime, unique_ref(), token="not-a-token-of-this-deployment")

    assert refused.returncode != 0
    assert refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "unauthorized" in refused.stderr


def test_an_erasure_of_many_sessions_is_done_by_the_runtimes_own_worker(
    client: Conversations,
) -> None:
    ref = unique_ref()
    sessions = [
        client.sessions.create(
            "cap-agent" if n % 2 else "cap-generative", ref, principal=PRINCIPAL
        ).id
        for n in range(ERASED_SESSIONS)
    ]
    for session_id in sessions[:4]:
        client.sessions.send(session_id, "Where is order 12345?")
    kept = client.sessions.create("cap-generative", unique_ref())

    erasure = client.erasures.create(ref)
    # Effective at once.
    with pytest.raises(SessionNotFound):
        client.sessions.get(sessions[-1])
    assert list(client.sessions.list(ref)) == []
    done = client.erasures.wait(erasure.id, timeout=120, every=0.5)

    assert done.status == "done", done
    assert (done.sessions_erased, done.traces_kept, done.traces_erased) == (ERASED_SESSIONS, 2, 0)
    for session_id in sessions[:5]:
        with pytest.raises(SessionNotFound):
            client.sessions.messages_page(session_id)
    assert client.sessions.get(kept.id).id == kept.id
