"""Every door writes one metrics record per invocation, when it ends: a turn through the
HttpApi, a turn through the streaming door (before its last event), and a turn that
failed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.agent_api import message, open_session, stream_url_door
from tests.support.inprocess_api import InProcessApi
from tests.support.sse import parse_sse
from tests.support.tenants import Tenant

CAPABILITY = "cap-generative"


def metric_records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def names(record: dict[str, Any]) -> set[str]:
    return {m["Name"] for d in record["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}


def test_a_turn_through_the_api_writes_one_record_with_all_it_counted(
    api: InProcessApi, tenant: Tenant, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(api, tenant.token, CAPABILITY)
    capsys.readouterr()

    response = message(api, tenant.token, session_id, "hello")

    assert response.status == 200, response.body
    [record] = metric_records(capsys.readouterr().out)
    assert {"Turns", "ModelCalls", "ModelLatency"} <= names(record)
    assert (record["door"], record["outcome"], record["Turns"]) == ("messages", "recorded", [1])
    assert record["connection"] == "embedded"


def test_a_streamed_turn_writes_its_record_before_the_stream_ends(
    api: InProcessApi, tenant: Tenant, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(api, tenant.token, CAPABILITY)
    capsys.readouterr()

    status, raw = stream_url_door(
        api, tenant.token, CAPABILITY, {"input": "hello", "sessionId": session_id}
    )

    assert status == 200 and parse_sse(raw)[-1][0] == "done"
    # Read at once: the record was written before the last event was sent.
    [record] = metric_records(capsys.readouterr().out)
    assert (record["door"], record["outcome"], record["Turns"]) == ("stream", "recorded", [1])


def test_a_failed_turn_still_writes_its_record(
    api: InProcessApi,
    tenant: Tenant,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session_id = open_session(api, tenant.token, CAPABILITY)
    capsys.readouterr()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the answerer broke")

    monkeypatch.setattr(api.container.turns._answerer, "answer", broken)

    response = message(api, tenant.token, session_id, "hello")

    assert response.status == 500 and response.body["error"]["code"] == "internal"
    [record] = metric_records(capsys.readouterr().out)
    assert (record["door"], record["outcome"], record["Turns"]) == ("messages", "internal", [1])
