"""``python -m convo_memory_client export`` against a scripted service: every page of
sessions and of each transcript, in order, the API's own JSON on each line; settings from
the environment; any failure one line on standard error and a non-zero exit."""

from __future__ import annotations

import io
import json
from typing import Any

from convo_memory_client.__main__ import main
from tests.client.fake_service import FakeService, Reply


def session(sid: str, created: str) -> dict[str, Any]:
    return {
        "id": sid,
        "capabilityId": "cap-generative",
        "externalRef": "customer-4471",
        "principal": {"user_id": "u_913"},
        "metadata": {},
        "status": "active",
        "createdAt": created,
        "lastActiveAt": created,
        "messageCount": 2,
        "aFieldThisClientDoesNotKnow": [1, 2],
    }


def message(seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "role": "user" if seq % 2 else "assistant",
        "content": f"message {seq}, ünïcode",
        "createdAt": "2026-01-01T00:00:00.000Z",
        "withheld": False,
        "truncated": False,
    }


def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, env=env, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_every_page_of_sessions_and_messages_in_order(service: FakeService) -> None:
    newer, older = (
        session("s2", "2026-01-02T00:00:00.000Z"),
        session("s1", "2026-01-01T00:00:00.000Z"),
    )
    service.on(
        "GET",
        "/v1/sessions",
        Reply(200, {"sessions": [newer], "nextToken": "page-2"}),
        Reply(200, {"sessions": [older], "nextToken": None}),
    )
    service.on(
        "GET",
        "/v1/sessions/s2/messages",
        Reply(200, {"messages": [message(1), message(2)], "nextToken": "m-2"}),
        Reply(200, {"messages": [message(3), message(4)], "nextToken": None}),
    )
    service.on("GET", "/v1/sessions/s1/messages", Reply(200, {"messages": [], "nextToken": None}))
    env = {"CONVO_BASE_URL": service.base_url, "CONVO_TOKEN": "tok-from-env"}

    code, out, err = run(["export", "--external-ref", "customer-4471"], env)

    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines == [
        {"type": "session", **newer},
        *({"type": "message", "sessionId": "s2", **message(seq)} for seq in (1, 2, 3, 4)),
        {"type": "session", **older},
    ]
    assert next(iter(lines[0])) == "type"
    listed = service.calls("GET", "/v1/sessions")
    assert [call.query.get("nextToken") for call in listed] == [None, ["page-2"]]
    assert all(call.query["externalRef"] == ["customer-4471"] for call in listed)
    assert all(call.query["limit"] == ["100"] for call in listed)
    assert all(call.headers["authorization"] == "Bearer tok-from-env" for call in listed)
    pages = service.calls("GET", "/v1/sessions/s2/messages")
    assert [call.query.get("nextToken") for call in pages] == [None, ["m-2"]]


def test_the_flags_win_over_the_environment(service: FakeService) -> None:
    service.on("GET", "/v1/sessions", Reply(200, {"sessions": [], "nextToken": None}))
    env = {"CONVO_BASE_URL": "http://127.0.0.1:9", "CONVO_TOKEN": "stale"}

    code, out, err = run(
        ["export", "--base-url", service.base_url, "--token", "fresh", "--external-ref", "x"],
        env,
    )

    assert (code, out, err) == (0, "", "")
    assert service.calls("GET", "/v1/sessions")[0].headers["authorization"] == "Bearer fresh"


def test_a_refusal_is_one_line_on_stderr_and_a_non_zero_exit(service: FakeService) -> None:
    service.on(
        "GET",
        "/v1/sessions",
        Reply(401, {"error": {"code": "unauthorized", "message": "missing or\nunknown token"}}),
    )
    env = {"CONVO_BASE_URL": service.base_url, "CONVO_TOKEN": "wrong"}

    code, out, err = run(["export", "--external-ref", "customer-4471"], env)

    assert code != 0 and out == ""
    assert err.count("\n") == 1 and err.endswith("\n")
    assert "401 unauthorized" in err


def test_a_failure_midway_stops_with_one_line(service: FakeService) -> None:
    service.on(
        "GET",
        "/v1/sessions",
        Reply(200, {"sessions": [session("s1", "2026-01-01T00:00:00.000Z")], "nextToken": None}),
    )
    service.on(
        "GET",
        "/v1/sessions/s1/messages",
        Reply(404, {"error": {"code": "session_not_found", "message": "session not found"}}),
    )
    env = {"CONVO_BASE_URL": service.base_url, "CONVO_TOKEN": "tok"}

    code, out, err = run(["export", "--external-ref", "customer-4471"], env)

    assert code != 0
    assert err.count("\n") == 1 and "session_not_found" in err
    assert json.loads(out.splitlines()[0])["id"] == "s1"  # what was written stays written


def test_missing_settings_and_usage_errors_are_one_line() -> None:
    for argv, env, says in (
        (["export", "--external-ref", "x"], {"CONVO_TOKEN": "t"}, "--base-url"),
        (["export", "--external-ref", "x"], {"CONVO_BASE_URL": "http://127.0.0.1:9"}, "--token"),
        (["export"], {}, "--external-ref"),
        ([], {}, "command"),
        (["import"], {}, "invalid choice"),
    ):
        code, out, err = run(argv, env)

        assert code == 2 and out == "", argv
        assert err.count("\n") == 1 and says in err, (argv, err)


def test_help_is_on_stdout_with_a_zero_exit() -> None:
    code, out, err = run(["export", "--help"], {})

    assert (code, err) == (0, "")
    assert "--external-ref" in out and "CONVO_TOKEN" in out
