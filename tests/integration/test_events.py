"""Every sample event in events/ goes through its function's real handler (as
`sam local invoke <Function> -e events/<file>` would), with the demo ids that `make run`
seeds replaced by real ones (tests/e2e/test_sample_events_e2e.py invokes them as they are)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session, predict, transcript

EVENTS = Path(__file__).resolve().parents[2] / "events"
TABLE = re.compile(r"^\| `(?P<file>[a-z_]+\.json)` \| (?P<function>\w+) \|", re.M)


def event_table() -> dict[str, str]:
    return {m["file"]: m["function"] for m in TABLE.finditer((EVENTS / "README.md").read_text())}


def test_every_event_file_is_in_the_table() -> None:
    assert set(event_table()) == {p.name for p in EVENTS.glob("*.json")}


@pytest.mark.parametrize(("file", "function"), sorted(event_table().items()))
def test_each_event_runs_through_its_handler(
    api: InProcessApi, tenant: Tenant, file: str, function: str
) -> None:
    session_id = open_session(api, tenant, capability="cap-agent")
    run_id = predict(api, tenant, session_id, "Where is order 12345?", cap="cap-agent").body[
        "runId"
    ]
    # The second demo session (events/delete_session.json deletes it).
    second_session_id = open_session(api, tenant, capability="cap-agent")
    # The demo erasure (of an end user without sessions).
    erasure = api.call(
        "POST", "/v1/erasures", token=tenant.token, json_body={"externalRef": "customer-0000"}
    )
    assert erasure.status == 202, erasure.body
    raw = (EVENTS / file).read_text()
    for placeholder, real in {
        "ses-0000000000000000000000": session_id,
        "ses-1111111111111111111111": second_session_id,
        "run-0000000000000000000000": run_id,
        "era-0000000000000000000000": erasure.body["id"],
        '"ws-dev"': json.dumps(tenant.workspace_id),
        '\\"ws-dev\\"': json.dumps(json.dumps(tenant.workspace_id))[1:-1],
        "Bearer dev-token": f"Bearer {tenant.token}",
    }.items():
        raw = raw.replace(placeholder, real)
    event: dict[str, Any] = json.loads(raw)

    result = api.invoke(function, event)

    if function == "AuthorizerFunction":
        assert result == {"isAuthorized": True, "context": {"workspaceId": tenant.workspace_id}}
    elif "Records" in event:
        assert result == {"batchItemFailures": []}
        if function == "RepairFunction":
            # Both repaired turns landed once, after the agent turn, in order.
            assert [m["seq"] for m in transcript(api, tenant, session_id)] == [1, 2, 3, 4, 5, 6]
    elif function == "RetentionFunction":
        # The sample's time is before this test's sessions: nothing is idle yet.
        assert (result["archived"], result["purged"], result["more"]) == (0, 0, False), result
    else:
        assert 200 <= result["statusCode"] < 300, (file, result.get("body"))
