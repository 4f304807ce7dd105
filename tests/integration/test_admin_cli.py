"""The operator command that creates a workspace on a deployed stack."""

from __future__ import annotations

import pytest

from convo_memory import cli
from tests.support.inprocess_api import InProcessApi


def test_create_workspace_prints_a_token_once_that_then_authenticates(
    api: InProcessApi, capsys: pytest.CaptureFixture[str]
) -> None:
    table = api.container.settings.table_name

    assert cli.main(["create-workspace", "acme", "--table", table, "--seed"]) == 0

    printed = capsys.readouterr()
    token = printed.out.strip()
    assert len(token) >= 32 and "shown once" in printed.err
    listing = api.call("GET", "/v1/capabilities", token=token)
    assert listing.status == 200
    assert {c["id"] for c in listing.body["capabilities"]} == {
        "cap-generative",
        "cap-agent",
        "cap-classic",
    }
    stored = api.container.clients["dynamodb"].scan(TableName=table)["Items"]
    assert token not in str(stored)  # only its hash is stored
