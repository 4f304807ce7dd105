"""Workspaces and tokens: stored only hashed, idempotent seeding, cached resolution."""

from __future__ import annotations

import pytest

from convo_memory.services.admin import (
    DEMO_CAPABILITIES,
    create_workspace,
    revoke_token,
    seed_capabilities,
    token_id_of,
)
from convo_memory.services.auth import TokenResolver, hash_token, tokens_match
from tests.fakes.stores import FakeDatabase, FakeTokenStore

TOKEN = "cm_test-token-0123456789abcdefghij"


def test_given_a_token_when_creating_a_workspace_then_only_its_hash_is_stored() -> None:
    db = FakeDatabase()

    credentials = create_workspace(db.stores.tokens, "Acme", token=TOKEN)

    assert credentials.token == TOKEN
    assert credentials.name == "Acme"
    assert TOKEN not in db.dump()
    assert list(db.tokens) == [hash_token(TOKEN)]
    assert db.tokens[hash_token(TOKEN)]["workspaceId"] == credentials.workspace_id
    assert db.workspaces[credentials.workspace_id]["name"] == "Acme"


def test_given_no_token_when_creating_a_workspace_then_a_fresh_one_is_returned_once_and_hashed():
    db = FakeDatabase()

    first = create_workspace(db.stores.tokens, "One")
    second = create_workspace(db.stores.tokens, "Two")

    assert first.token != second.token
    assert len(first.token) >= 32
    assert first.workspace_id != second.workspace_id
    for credentials in (first, second):
        assert credentials.token not in db.dump()
        assert db.stores.tokens.workspace_for_token(hash_token(credentials.token)) == (
            credentials.workspace_id
        )


def test_given_a_workspace_id_when_creating_a_workspace_then_it_gets_that_id() -> None:
    db = FakeDatabase()

    credentials = create_workspace(db.stores.tokens, "dev", token=TOKEN, workspace_id="ws-dev")

    assert credentials.workspace_id == "ws-dev"
    assert db.stores.tokens.workspace_for_token(hash_token(TOKEN)) == "ws-dev"
    assert db.workspaces["ws-dev"]["name"] == "dev"


def test_given_an_existing_token_when_creating_again_then_the_same_workspace_is_returned():
    db = FakeDatabase()
    first = create_workspace(db.stores.tokens, "Acme", token=TOKEN)
    db.calls.clear()

    again = create_workspace(db.stores.tokens, "Acme", token=TOKEN)

    assert again.workspace_id == first.workspace_id
    assert again.token == TOKEN
    assert len(db.workspaces) == 1
    assert len(db.tokens) == 1
    assert db.writes() == 0


def test_given_a_concurrent_creator_wins_when_creating_then_its_workspace_is_returned() -> None:
    class RacingStore(FakeTokenStore):
        def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None:
            super().put_workspace(workspace_id, name, created_at)
            # Another seeder stores the same token between our look-up and our put.
            self.db.tokens.setdefault(
                hash_token(TOKEN), {"workspaceId": "ws_winner", "name": name, "createdAt": ""}
            )

    db = FakeDatabase()

    credentials = create_workspace(RacingStore(db), "Acme", token=TOKEN)

    assert credentials.workspace_id == "ws_winner"
    assert db.tokens[hash_token(TOKEN)]["workspaceId"] == "ws_winner"


def test_given_a_short_token_when_creating_a_workspace_then_it_is_refused() -> None:
    db = FakeDatabase()

    with pytest.raises(ValueError):
        create_workspace(db.stores.tokens, "Acme", token="too-short")

    assert db.writes() == 0
    assert db.tokens == {} and db.workspaces == {}


def test_given_a_token_and_its_hash_when_comparing_then_only_the_right_token_matches() -> None:
    stored = hash_token(TOKEN)

    assert tokens_match(TOKEN, stored)
    assert not tokens_match(TOKEN + "x", stored)
    assert stored != TOKEN and len(stored) == 64


def test_given_a_known_token_when_resolving_twice_then_the_second_lookup_reads_nothing() -> None:
    db = FakeDatabase()
    workspace_id = create_workspace(db.stores.tokens, "Acme", token=TOKEN).workspace_id
    db.calls.clear()
    resolver = TokenResolver(db.stores.tokens, ttl_seconds=30)

    first = resolver.workspace_for(TOKEN)
    second = resolver.workspace_for(TOKEN)

    assert first == second == workspace_id
    assert db.calls["workspace_for_token"] == 1


def test_given_an_unknown_token_when_resolving_then_none_and_the_miss_is_cached_too() -> None:
    db = FakeDatabase()
    create_workspace(db.stores.tokens, "Acme", token=TOKEN)
    db.calls.clear()
    resolver = TokenResolver(db.stores.tokens, ttl_seconds=30)

    assert resolver.workspace_for("cm_not-a-real-token-at-all-000") is None
    assert resolver.workspace_for("cm_not-a-real-token-at-all-000") is None
    assert resolver.workspace_for("") is None

    assert db.calls["workspace_for_token"] == 1


def test_given_a_zero_ttl_when_resolving_twice_then_each_lookup_reads_the_store() -> None:
    db = FakeDatabase()
    workspace_id = create_workspace(db.stores.tokens, "Acme", token=TOKEN).workspace_id
    db.calls.clear()
    resolver = TokenResolver(db.stores.tokens, ttl_seconds=0)

    assert resolver.workspace_for(TOKEN) == workspace_id
    assert resolver.workspace_for(TOKEN) == workspace_id

    assert db.calls["workspace_for_token"] == 2


def test_given_a_workspace_when_seeding_twice_then_one_capability_of_each_kind_exists() -> None:
    db = FakeDatabase()

    first = seed_capabilities(db.stores.capabilities, "ws_demo")
    second = seed_capabilities(db.stores.capabilities, "ws_demo")

    assert first == second == list(DEMO_CAPABILITIES)
    caps = {cap.id: cap.kind for cap in db.stores.capabilities.list_capabilities("ws_demo")}
    assert caps == {"cap-generative": "generative", "cap-agent": "agent", "cap-classic": "classic"}
    assert db.calls["put_capability"] == 3


def test_given_a_new_workspace_then_its_token_has_a_public_id_that_reveals_nothing() -> None:
    db = FakeDatabase()

    credentials = create_workspace(db.stores.tokens, "Acme", token=TOKEN)

    assert credentials.token_id == token_id_of(hash_token(TOKEN))
    assert credentials.token_id.startswith("tok_") and len(credentials.token_id) == 20
    assert TOKEN not in credentials.token_id
    assert db.token_ids == {credentials.token_id: hash_token(TOKEN)}


def test_given_a_token_when_revoking_it_by_itself_then_it_no_longer_resolves() -> None:
    db = FakeDatabase()
    workspace_id = create_workspace(db.stores.tokens, "Acme", token=TOKEN).workspace_id
    resolver = TokenResolver(db.stores.tokens, ttl_seconds=0)
    assert resolver.workspace_for(TOKEN) == workspace_id

    revoked = revoke_token(db.stores.tokens, token=TOKEN)

    assert revoked is not None and revoked.workspace_id == workspace_id
    assert resolver.workspace_for(TOKEN) is None
    assert db.tokens == {} and db.token_ids == {}
    assert revoke_token(db.stores.tokens, token=TOKEN) is None  # twice: nothing left to revoke


def test_given_a_token_id_when_revoking_by_it_then_only_that_token_stops_working() -> None:
    db = FakeDatabase()
    kept = create_workspace(db.stores.tokens, "Acme", token=TOKEN)
    gone = create_workspace(db.stores.tokens, "Globex", token=TOKEN + "-other")

    revoked = revoke_token(db.stores.tokens, token_id=gone.token_id)

    assert revoked is not None and revoked.token_id == gone.token_id
    assert db.stores.tokens.workspace_for_token(hash_token(gone.token)) is None
    assert db.stores.tokens.workspace_for_token(hash_token(kept.token)) == kept.workspace_id
    assert revoke_token(db.stores.tokens, token_id=gone.token_id) is None


def test_given_a_cached_token_when_revoked_then_it_works_until_the_cache_expires() -> None:
    db = FakeDatabase()
    workspace_id = create_workspace(db.stores.tokens, "Acme", token=TOKEN).workspace_id
    resolver = TokenResolver(db.stores.tokens, ttl_seconds=30)
    now = [1000.0]
    resolver._clock = lambda: now[0]
    assert resolver.workspace_for(TOKEN) == workspace_id

    revoke_token(db.stores.tokens, token=TOKEN)

    assert resolver.workspace_for(TOKEN) == workspace_id  # the container cache
    now[0] += 30
    assert resolver.workspace_for(TOKEN) is None  # the next look-up that misses it


@pytest.mark.parametrize(
    "arguments",
    [{}, {"token": TOKEN, "token_id": "tok_0123456789abcdef"}, {"token_id": "tok_xyz"}],
)
def test_revoking_needs_exactly_one_well_formed_way_to_name_the_token(
    arguments: dict[str, str],
) -> None:
    with pytest.raises(ValueError):
        revoke_token(FakeDatabase().stores.tokens, **arguments)
