"""Two workspaces cannot see each other's capabilities, sessions or runs through any route."""

from __future__ import annotations

from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session, predict


def test_workspaces_are_isolated_on_every_route(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    created = api.call(
        "POST",
        "/v1/capabilities",
        token=tenant.token,
        json_body={"name": "mine", "kind": "generative"},
    )
    cap = created.body["id"]
    session_id = open_session(api, tenant, capability=cap, principal={"tenant_id": "store-a"})
    predict(api, tenant, session_id, "private words", cap=cap)
    agent_session = open_session(api, tenant, capability="cap-agent")
    run_id = predict(api, tenant, agent_session, "Where is order 777?", cap="cap-agent").body[
        "runId"
    ]

    intruder = other_tenant.token
    attempts = [
        ("GET", f"/v1/capabilities/{cap}", None, "capability_not_found"),
        ("POST", f"/v1/capabilities/{cap}/predict", {"input": "hi"}, "capability_not_found"),
        (
            "POST",
            "/v1/sessions",
            {"capabilityId": cap, "externalRef": "customer-4471"},
            "capability_not_found",
        ),
        ("GET", f"/v1/sessions/{session_id}", None, "session_not_found"),
        ("PATCH", f"/v1/sessions/{session_id}", {"metadata": {"owned": True}}, "session_not_found"),
        ("GET", f"/v1/sessions/{session_id}/messages", None, "session_not_found"),
        ("GET", f"/v1/sessions/{session_id}/context", None, "session_not_found"),
        ("POST", f"/v1/sessions/{session_id}/messages", {"input": "hi"}, "session_not_found"),
        (
            "POST",
            "/v1/capabilities/cap-generative/predict",
            {"input": "hi", "sessionId": session_id},
            "session_not_found",
        ),
        ("DELETE", f"/v1/sessions/{session_id}", None, "session_not_found"),
        ("GET", f"/v1/runs/{run_id}", None, "run_not_found"),
    ]
    for method, path, body, code in attempts:
        response = api.call(method, path, token=intruder, json_body=body)
        assert response.status == 404, (method, path, response.body)
        assert response.body["error"]["code"] == code, (method, path)

    listing = api.call(
        "GET", "/v1/sessions", token=intruder, query={"externalRef": "customer-4471"}
    )
    assert listing.body["sessions"] == []
    own_caps = {
        c["id"] for c in api.call("GET", "/v1/capabilities", token=intruder).body["capabilities"]
    }
    assert cap not in own_caps

    # The owner still sees everything, untouched.
    owner_view = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    assert owner_view["metadata"] == {} and owner_view["messageCount"] == 2
    history = api.call("GET", f"/v1/sessions/{session_id}/messages", token=tenant.token).body[
        "messages"
    ]
    assert history[0]["content"] == "private words"


def test_a_foreign_listing_token_is_refused(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    for _ in range(3):
        open_session(api, tenant)
    page = api.call(
        "GET",
        "/v1/sessions",
        token=tenant.token,
        query={"externalRef": "customer-4471", "limit": 1},
    )
    stolen = page.body["nextToken"]
    assert stolen
    response = api.call(
        "GET",
        "/v1/sessions",
        token=other_tenant.token,
        query={"externalRef": "customer-4471", "nextToken": stolen},
    )
    assert response.status == 422
