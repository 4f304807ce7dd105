"""A lookup of another workspace's id does no read after the one that finds it is not
the caller's (v5): on every route that takes a response, conversation or session id, a
request naming another workspace's makes exactly the DynamoDB requests of one naming an
id that does not exist, and gets the same 404. Nothing is learnt, not even from timing,
about what the other workspace holds. On the in-process stack, every request counted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.dynamo_meter import DynamoMeter
from tests.support.inprocess_api import InProcessApi, new_workspace
from tests.support.tenants import Tenant, open_session

ROUTES = [
    ("GET", "/v1/responses/{response}", None),
    ("GET", "/v1/responses/{response}/input_items", None),
    ("DELETE", "/v1/responses/{response}", None),
    ("GET", "/v1/conversations/{session}", None),
    ("GET", "/v1/conversations/{session}/items", None),
    ("POST", "/v1/conversations/{session}", {"metadata": {"a": "b"}}),
    ("GET", "/v1/sessions/{session}", None),
    ("GET", "/v1/sessions/{session}/messages", None),
    ("GET", "/v1/sessions/{session}/context", None),
    ("GET", "/v1/sessions/{session}/messages/2/prompt", None),
    ("PATCH", "/v1/sessions/{session}", {"metadata": {"a": "b"}}),
    ("POST", "/v1/sessions/{session}/forks", {"atSeq": 2}),
    ("POST", "/v1/sessions/{session}/messages", {"input": "hello?"}),
    ("DELETE", "/v1/sessions/{session}", None),
]


@pytest.fixture
def tenants(api: InProcessApi) -> tuple[Tenant, Tenant]:
    return Tenant(*new_workspace(api, "owner")), Tenant(*new_workspace(api, "prober"))


def requests_for(
    api: InProcessApi, meter: DynamoMeter, tenant: Tenant, method: str, path: str, body: Any
) -> tuple[int, str, dict[str, int]]:
    """(status, error code, DynamoDB requests by operation) of one request (after one
    to warm the container's caches, which are the same for both ids)."""
    api.call(method, path, token=tenant.token, json_body=body)
    meter.reset()
    answer = api.call(method, path, token=tenant.token, json_body=body)
    return answer.status, answer.body["error"]["code"], dict(meter.requests)


def test_another_workspaces_ids_cost_what_missing_ones_do(
    api: InProcessApi, tenants: tuple[Tenant, Tenant]
) -> None:
    owner, prober = tenants
    session = open_session(api, owner, capability="cap-generative")
    for text in ("one", "two"):
        turn = {"model": "cap-generative", "input": text, "conversation": session}
        response = api.call("POST", "/v1/responses", token=owner.token, json_body=turn)
        assert response.status == 200, response.body
    real = response.body["id"]
    # Ids that name the owner's session: its real response, and one pushed further on
    # (a reply id the turn at its place does not have), which is looked for beyond it.
    prefix, _, reply = real.rpartition("_")
    foreign = {"response": [real, f"{prefix}_{reply[::-1]}"], "session": [session]}
    missing = {
        "response": [real.replace(session, "ses_" + "0" * 20)],
        "session": ["ses_" + "0" * 20],
    }
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])

    for method, template, body in ROUTES:
        kind = "response" if "{response}" in template else "session"
        baseline = requests_for(
            api, meter, prober, method, template.format(**{kind: missing[kind][0]}), body
        )
        assert baseline[0] == 404, (template, baseline)
        for named in foreign[kind]:
            path = template.format(**{kind: named})
            assert requests_for(api, meter, prober, method, path, body) == baseline, path

    # The owner still has all of it.
    assert api.call("GET", f"/v1/responses/{real}", token=owner.token).status == 200
    assert api.call("GET", f"/v1/sessions/{session}", token=owner.token).status == 200
