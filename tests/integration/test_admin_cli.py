"""The operator command that creates a workspace on a deployed stack."""

from __future__ import annotations

import io

import pytest

from convo_memory import cli
from tests.support.inprocess_api import AwsBackend, InProcessApi, serving


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
    stored = api.container.infrastructure.clients["dynamodb"].scan(TableName=table)["Items"]
    assert token not in str(stored)  # only its hash is stored


def _created(capsys: pytest.CaptureFixture[str], table: str) -> tuple[str, str]:
    assert cli.main(["create-workspace", "acme", "--table", table]) == 0
    printed = capsys.readouterr()
    token_id = next(
        word
        for line in printed.err.splitlines()
        for word in line.split()
        if word.startswith("tok_")
    )
    return printed.out.strip(), token_id


@pytest.mark.parametrize("by", ["token id", "token on stdin"])
def test_revoke_token_makes_the_next_uncached_look_up_401(
    backend: AwsBackend,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    by: str,
) -> None:
    # No container cache, so that "the next look-up that misses the caches" is the next one.
    with serving(backend, {"CACHE_TTL_SECONDS": "0"}) as api:
        table = api.container.settings.table_name
        token, token_id = _created(capsys, table)
        assert api.call("GET", "/v1/capabilities", token=token).status == 200

        if by == "token id":
            code = cli.main(["revoke-token", token_id, "--table", table])
        else:
            monkeypatch.setattr("sys.stdin", io.StringIO(token + "\n"))
            code = cli.main(["revoke-token", "--table", table])

        assert code == 0
        assert token_id in capsys.readouterr().err
        refused = api.call("GET", "/v1/capabilities", token=token)
        assert refused.status == 401 and refused.body["error"]["code"] == "unauthorized"
        assert cli.main(["revoke-token", token_id, "--table", table]) == 1  # already gone


def test_token_look_ups_are_strongly_consistent(api: InProcessApi) -> None:
    seen: list[dict[str, object]] = []
    client = api.container.infrastructure.clients["dynamodb"]
    client.meta.events.register(
        "provide-client-params.dynamodb.GetItem", lambda params, **_: seen.append(dict(params))
    )

    api.container.adapters.stores.tokens.workspace_for_token("0" * 64)

    assert seen and seen[-1]["ConsistentRead"] is True
    assert seen[-1]["Key"] == {"pk": {"S": "TOKEN#" + "0" * 64}, "sk": {"S": "TOKEN"}}
