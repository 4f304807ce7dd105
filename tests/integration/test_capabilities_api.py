"""A capability reads back what its turns use: without ``replay``, the defaults (on
create, get and list), never ``null``; with one, as given; a classic one has none. And a
Bedrock guardrail is refused at creation (422, naming what is missing) where the
deployment cannot reach Bedrock, as under ``make run``, and accepted where it can."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.tenants import Tenant

DEFAULTS = {"maxMessages": 20, "maxChars": 12000, "minMessages": 2, "alignment": 1}
GUARDRAIL = {"type": "bedrock-guardrail", "guardrailId": "gr-123", "guardrailVersion": "1"}


def create(api: InProcessApi, tenant: Tenant, **body: Any) -> Any:
    return api.call("POST", "/v1/capabilities", token=tenant.token, json_body={"name": "c", **body})


@pytest.mark.parametrize("kind", ["generative", "agent"])
def test_a_capability_without_replay_reads_back_the_defaults(
    api: InProcessApi, tenant: Tenant, kind: str
) -> None:
    created = create(api, tenant, kind=kind)
    assert created.status == 201, created.body
    got = api.call("GET", f"/v1/capabilities/{created.body['id']}", token=tenant.token)
    listed = api.call("GET", "/v1/capabilities", token=tenant.token).body["capabilities"]

    assert created.body["replay"] == got.body["replay"] == DEFAULTS
    assert [c["replay"] for c in listed if c["id"] == created.body["id"]] == [DEFAULTS]
    # Stored as given (none): a capability follows the deployment's defaults.
    client = api.container.infrastructure.clients["dynamodb"]
    items = client.scan(TableName=api.container.settings.table_name)["Items"]
    (stored,) = [i for i in items if i["sk"]["S"] == f"CAP#{created.body['id']}"]
    assert json.loads(stored["body"]["S"])["replay"] is None


def test_a_given_replay_reads_back_as_given_and_a_classic_capability_has_none(
    api: InProcessApi, tenant: Tenant
) -> None:
    replay = {"maxMessages": 8, "maxChars": 4000, "minMessages": 4, "alignment": 2}
    given = create(api, tenant, kind="generative", replay=replay)
    classic = create(api, tenant, kind="classic")

    assert given.status == 201 and given.body["replay"] == replay
    assert classic.status == 201 and classic.body["replay"] is None


@pytest.fixture
def local(backend: AwsBackend) -> Iterator[InProcessApi]:
    """A deployment without Bedrock, as the local runtime is."""
    with serving(backend, {"BEDROCK_AVAILABLE": "false"}) as stack:
        yield stack


def test_a_guardrail_without_bedrock_is_refused_at_creation_naming_what_is_missing(
    local: InProcessApi,
) -> None:
    tenant = Tenant(*new_workspace(local, "local"))
    before = local.call("GET", "/v1/capabilities", token=tenant.token).body["capabilities"]

    refused = create(local, tenant, kind="generative", contentFilter=GUARDRAIL)
    embedded = create(
        local, tenant, kind="generative", contentFilter={"type": "embedded", "blockedTerms": ["x"]}
    )

    assert refused.status == 422 and refused.body["error"]["code"] == "validation_error"
    assert refused.body["error"]["details"][0]["loc"] == ["contentFilter", "type"]
    assert "needs Amazon Bedrock" in refused.body["error"]["message"]
    assert embedded.status == 201
    after = local.call("GET", "/v1/capabilities", token=tenant.token).body["capabilities"]
    assert len(after) == len(before) + 1  # only the embedded one


def test_a_guardrail_is_accepted_where_bedrock_is_reachable(
    api: InProcessApi, tenant: Tenant
) -> None:
    created = create(api, tenant, kind="generative", contentFilter=GUARDRAIL)

    assert created.status == 201, created.body
    assert created.body["contentFilter"]["guardrailId"] == "gr-123"
