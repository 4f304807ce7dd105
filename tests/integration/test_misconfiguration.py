"""A setting CloudFormation accepts but the functions refuse (here a value set on the
function after deployment): each function's cold start logs it once, naming the
variable; its routes answer the contract's ``500 internal`` with a request id; and the
authorizer, which needs only TABLE_NAME and CACHE_TTL_SECONDS, keeps resolving tokens,
so no route turns into API Gateway's bare 500."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator

import boto3
import pytest

from convo_memory.adapters.dynamo.stores import dynamo_stores
from convo_memory.config import SettingsError
from convo_memory.doors.stream import StreamDoor
from convo_memory.execution_environment import get_container, set_container
from convo_memory.services.admin import create_workspace
from local_runtime.aws_resources import ensure_resources
from tests.support.fake_aws import REGION, fake_aws
from tests.support.inprocess_api import InProcessApi

BAD = {"DIGEST_MAX_CHARS": "50"}  # below the settings check's 100


@pytest.fixture
def misconfigured(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InProcessApi, str]]:
    """The template's resources and environment plus a bad value; no container yet, as
    in a fresh execution environment. Yields the API and a valid token."""
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ConvoMemoryTest")
    with fake_aws(REGION):
        resources = ensure_resources(boto3.session.Session(region_name=REGION))
        for name, value in {**resources.env(), **BAD}.items():
            monkeypatch.setenv(name, value)
        client = boto3.client("dynamodb", region_name=REGION)
        stores = dynamo_stores(client, os.environ["TABLE_NAME"], os.environ["RUNS_TABLE_NAME"])
        token = create_workspace(stores.tokens, "acme").token
        set_container(None)
        try:
            yield InProcessApi(None, resources), token  # type: ignore[arg-type]
        finally:
            set_container(None)


def _bad_setting_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.ERROR and "DIGEST_MAX_CHARS" in record.getMessage()
    ]


def test_every_route_answers_500_internal_and_the_cold_start_logs_the_variable_once(
    misconfigured: tuple[InProcessApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    api, token = misconfigured
    caplog.set_level(logging.ERROR)
    calls = [
        ("GET", "/v1/capabilities", None),
        ("POST", "/v1/capabilities/cap-generative/predict", {"input": "hi"}),
        ("GET", "/v1/capabilities", None),
    ]

    responses = [
        api.call(method, path, token=token, json_body=body) for method, path, body in calls
    ]

    for response in responses:
        assert response.status == 500, response.body
        assert response.body["error"]["code"] == "internal"
        assert response.body["error"]["requestId"]
    lines = _bad_setting_lines(caplog)
    assert len(lines) == 1, lines  # once per execution environment, not per request
    assert "DIGEST_MAX_CHARS" in lines[0] and "500 internal" in lines[0]
    with pytest.raises(SettingsError):
        get_container()  # the failure is kept, not retried (nor logged) on every call


def test_the_authorizer_still_resolves_tokens(
    misconfigured: tuple[InProcessApi, str],
) -> None:
    api, token = misconfigured
    event = {
        "version": "2.0",
        "type": "REQUEST",
        "headers": {"authorization": f"Bearer {token}"},
        "requestContext": {"http": {"method": "GET", "path": "/v1/capabilities"}},
    }

    known = api.invoke("AuthorizerFunction", event)
    unknown = api.invoke(
        "AuthorizerFunction", {**event, "headers": {"authorization": "Bearer not-a-token-x"}}
    )

    assert known["isAuthorized"] is True and known["context"]["workspaceId"].startswith("ws_")
    assert unknown == {"isAuthorized": True, "context": {"workspaceId": ""}}


def test_the_streaming_door_answers_500_internal(
    misconfigured: tuple[InProcessApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, token = misconfigured
    caplog.set_level(logging.ERROR)
    door = StreamDoor()
    body = json.dumps({"input": "hi"}).encode()
    path = "/v1/capabilities/cap-generative/predict/stream"
    headers = {"authorization": f"Bearer {token}"}

    responses = [door.handle("POST", path, headers, body) for _ in range(2)]

    for response in responses:
        assert response.status == 500
        assert json.loads(b"".join(response.chunks))["error"]["code"] == "internal"
    assert len(_bad_setting_lines(caplog)) == 1
