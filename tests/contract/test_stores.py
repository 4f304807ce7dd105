"""One test suite for the storage ports, run against the in-memory fakes (unit tier) and
the DynamoDB stores on moto tables built from template.yaml: the fakes cannot drift from
what the real stores do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest

from convo_memory.adapters.dynamo import fork_reads
from convo_memory.adapters.dynamo.forks import DynamoForkStore
from convo_memory.adapters.dynamo.stores import dynamo_stores
from convo_memory.domain.erasures import Erasure, TracePolicy
from convo_memory.domain.errors import PauseEnded, SessionArchived, SessionNotFound
from convo_memory.domain.models import Capability, ForkPoint, Session, Summary
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.responses import ResponseRef
from convo_memory.domain.summary_plan import FoldWindow, SummaryVersion
from convo_memory.domain.tools import ToolRequest, ToolRound
from convo_memory.domain.turn_records import AppendResult, TurnRecord
from convo_memory.ports import Stores
from local_runtime.aws_resources import LocalResources, ensure_resources
from tests.fakes.stores import FakeDatabase
from tests.support.fake_aws import empty_tables, fake_aws, set_up_clients

WS, OTHER_WS = "ws_a", "ws_b"
T0 = "2026-01-01T00:00:00.000Z"


@pytest.fixture(scope="module")
def dynamodb_tables() -> Iterator[tuple[Any, LocalResources]]:
    """The template's tables in moto, made once for the module's DynamoDB half."""
    with fake_aws():
        resources = ensure_resources(set_up_clients())
        yield boto3.client("dynamodb", region_name="us-east-1"), resources


@pytest.fixture(params=["fake", "dynamodb"])
def stores(request: pytest.FixtureRequest) -> Iterator[Stores]:
    if request.param == "fake":
        yield FakeDatabase().stores
        return
    client, resources = request.getfixturevalue("dynamodb_tables")
    empty_tables(resources.tables.values())  # each test starts from empty tables
    yield dynamo_stores(
        client, resources.tables["ConversationsTable"], resources.tables["RunsTable"]
    )


def session(sid: str, ws: str = WS, ref: str = "user-1", created: str = T0) -> Session:
    return Session(
        id=sid,
        workspace_id=ws,
        capability_id="cap-1",
        external_ref=ref,
        principal={"tenant_id": "t"},
        metadata={"plan": "gold"},
        status="active",
        created_at=created,
        last_active_at=created,
        message_count=0,
    )


def turn(turn_id: str, user: str = "q", answer: str = "a", **extra: object) -> TurnRecord:
    return TurnRecord(
        turn_id=turn_id,
        user_content=user,
        answer=answer,
        withheld=False,
        created_at=str(extra.pop("created_at", "2026-01-01T00:00:01.000Z")),
        **extra,  # type: ignore[arg-type]
    )


def with_turns(stores: Stores, sid: str, n: int) -> None:
    stores.sessions.create_session(session(sid))
    with_more_turns(stores, sid, 0, n)


def with_more_turns(stores: Stores, sid: str, done: int, n: int) -> None:
    """``n`` more turns after the ``done`` the session has."""
    for i in range(done, done + n):
        stores.turns.append_turn(sid, 2 * i, turn(f"t{i}", f"question {i}", f"answer {i}"))


# -- tokens, capabilities, runs ---------------------------------------------------------


def test_a_token_hash_is_stored_once_and_resolves_to_its_workspace(stores: Stores) -> None:
    assert stores.tokens.put_token("h1", WS, "dev", T0) is True
    assert stores.tokens.put_token("h1", OTHER_WS, "dev", T0) is False
    assert stores.tokens.workspace_for_token("h1") == WS
    assert stores.tokens.workspace_for_token("h2") is None


def test_capabilities_are_per_workspace(stores: Stores) -> None:
    for cap_id, created in (("cap-b", "2026-01-02"), ("cap-a", "2026-01-01")):
        stores.capabilities.put_capability(
            WS,
            Capability(id=cap_id, name=cap_id, kind="generative", provider={}, created_at=created),
        )
    assert [c.id for c in stores.capabilities.list_capabilities(WS)] == ["cap-a", "cap-b"]
    assert stores.capabilities.get_capability(OTHER_WS, "cap-a") is None
    assert stores.capabilities.list_capabilities(OTHER_WS) == []


def test_run_traces_are_read_back_only_by_their_workspace(stores: Stores) -> None:
    run = {"runId": "run_1", "workspaceId": WS, "steps": [{"tool": "x", "output": "é"}]}
    stores.runs.put_run(run)
    assert stores.runs.get_run(WS, "run_1") == run
    assert stores.runs.get_run(OTHER_WS, "run_1") is None
    assert stores.runs.get_run(WS, "run_2") is None


# -- sessions -----------------------------------------------------------------------------


def test_a_session_reports_its_exact_count_while_the_head_mark_stays_coarse(
    stores: Stores,
) -> None:
    with_turns(stores, "s1", 3)
    got = stores.sessions.get_session("s1")
    assert got is not None
    assert (got.message_count, got.last_active_at) == (6, "2026-01-01T00:00:01.000Z")
    assert (got.principal, got.metadata, got.status) == (
        {"tenant_id": "t"},
        {"plan": "gold"},
        "active",
    )
    state = stores.turns.load_turn_state("s1", 0, with_digests=False)
    assert state is not None and state.activity_mark == T0  # nothing moved the head
    assert stores.sessions.get_session("nope") is None


def test_touch_moves_the_mark_of_an_active_session_only(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    stores.sessions.touch("s1", "2026-01-02T00:00:00.000Z")
    state = stores.turns.load_turn_state("s1", 2, with_digests=False)
    assert state is not None and state.activity_mark == "2026-01-02T00:00:00.000Z"
    with pytest.raises(SessionNotFound):
        stores.sessions.touch("missing", T0)
    assert stores.retention.archive_session("s1", "2026-01-02T00:00:00.000Z", "2026-02-01")
    with pytest.raises(SessionArchived):
        stores.sessions.touch("s1", "2026-02-02T00:00:00.000Z")


def test_listing_pages_through_an_end_users_sessions_newest_first(stores: Stores) -> None:
    for i in range(5):
        stores.sessions.create_session(session(f"s{i}", created=f"2026-01-0{i + 1}T00:00:00.000Z"))
    stores.sessions.create_session(session("other-ref", ref="user-2"))
    stores.sessions.create_session(session("other-ws", ws=OTHER_WS))
    seen: list[str] = []
    after: tuple[str, str] | None = None
    for _ in range(10):
        page, more = stores.sessions.list_sessions(WS, "user-1", 2, after)
        seen += [s.id for s in page]
        if not more:
            break
        after = (page[-1].created_at, page[-1].id)
    assert seen == ["s4", "s3", "s2", "s1", "s0"]


def test_metadata_is_replaced_only_for_the_owner_of_a_live_session(stores: Stores) -> None:
    stores.sessions.create_session(session("s1"))
    updated = stores.sessions.update_metadata("s1", WS, {"plan": "free", "n": [1, 2]})
    assert updated is not None and updated.metadata == {"plan": "free", "n": [1, 2]}
    assert stores.sessions.update_metadata("s1", OTHER_WS, {}) is None
    assert stores.sessions.update_metadata("missing", WS, {}) is None


def test_a_deletion_hides_the_session_at_once_and_can_be_resumed(stores: Stores) -> None:
    with_turns(stores, "s1", 3)
    assert stores.summaries.advance_summary("s1", 0, Summary(text="sum", through_seq=2))
    assert stores.sessions.begin_deletion("s1", OTHER_WS, T0) is False
    assert stores.sessions.begin_deletion("s1", WS, T0) is True
    assert stores.sessions.get_session("s1") is None
    assert stores.turns.load_turn_state("s1", 10, with_digests=True) is None
    assert stores.sessions.update_metadata("s1", WS, {}) is None
    assert stores.sessions.list_sessions(WS, "user-1", 10, None)[0] == []
    assert stores.sessions.begin_deletion("s1", WS, "2027-01-01") is True  # a retry resumes
    # Three turns, the summary and its version.
    assert stores.sessions.delete_contents("s1") == 3 + 1 + 1
    assert stores.turns.list_messages("s1", 0, 10) == ([], False)
    assert stores.summaries.get_summary("s1") is None
    # The emptied head waits in the DELETING index, under its first deletion time.
    assert list(stores.retention.sessions_by_activity("deleting", _shard(stores, "s1"), "9")) == [
        ("s1", T0)
    ]
    assert stores.retention.remove_head("s1") is True
    assert stores.sessions.begin_deletion("s1", WS, T0) is False


def unbound(sid: str, ws: str = WS) -> Session:
    """A conversation opened by ``POST /v1/conversations``: no capability nor end user yet."""
    return session(sid, ws).model_copy(
        update={"capability_id": None, "external_ref": None, "principal": None}
    )


def test_a_conversation_opens_with_its_imported_turns_and_no_capability(stores: Stores) -> None:
    history = [turn("h1", "I am Ada", "Hello Ada"), turn("h2", "", "a reply with no question")]
    stores.sessions.create_session(unbound("c1"), history)

    got = stores.sessions.get_session("c1")
    assert got is not None
    assert (got.capability_id, got.external_ref, got.message_count) == (None, None, 4)
    assert [(m.seq, m.role, m.content) for m in stores.turns.read_messages("c1", 1, 4)] == [
        (1, "user", "I am Ada"),
        (2, "assistant", "Hello Ada"),
        (3, "user", ""),
        (4, "assistant", "a reply with no question"),
    ]
    # The next turn's one read sees them; a turn lands after them.
    state = stores.turns.load_turn_state("c1", 10, with_digests=False)
    assert state is not None and [m.seq for m in state.recent] == [1, 2, 3, 4]
    assert stores.turns.append_turn("c1", 4, turn("t1")) == AppendResult(5, 6)


def test_a_conversation_is_bound_once_and_joins_its_end_users_listing(stores: Stores) -> None:
    stores.sessions.create_session(unbound("c1"))
    assert stores.sessions.list_sessions(WS, "user-1", 10, None)[0] == []

    assert stores.sessions.bind_session(session("c1")) is True
    # Bound for good: a racing response's binding (another capability) changes nothing.
    other = session("c1", ref="user-2").model_copy(update={"capability_id": "cap-2"})
    assert stores.sessions.bind_session(other) is False
    got = stores.sessions.get_session("c1")
    assert got is not None
    assert (got.capability_id, got.external_ref, got.principal) == (
        "cap-1",
        "user-1",
        {"tenant_id": "t"},
    )
    assert [s.id for s in stores.sessions.list_sessions(WS, "user-1", 10, None)[0]] == ["c1"]


def test_a_conversation_bound_without_an_end_user_is_in_no_listing(stores: Stores) -> None:
    stores.sessions.create_session(unbound("c1"))
    anonymous = session("c1").model_copy(update={"external_ref": None, "principal": None})
    assert stores.sessions.bind_session(anonymous) is True
    got = stores.sessions.get_session("c1")
    assert got is not None and (got.capability_id, got.external_ref) == ("cap-1", None)
    assert stores.sessions.list_sessions(WS, "user-1", 10, None)[0] == []


def test_only_a_live_conversation_of_its_workspace_is_bound(stores: Stores) -> None:
    stores.sessions.create_session(unbound("c1"))
    assert stores.sessions.bind_session(session("c1", ws=OTHER_WS)) is False
    stores.sessions.begin_deletion("c1", WS, T0)
    assert stores.sessions.bind_session(session("c1")) is False
    assert stores.sessions.bind_session(session("missing")) is False


# -- turns ----------------------------------------------------------------------------------


def test_a_turn_is_one_record_at_the_next_free_position(stores: Stores) -> None:
    stores.sessions.create_session(session("s1"))
    assert stores.turns.append_turn("s1", 0, turn("t1")) == AppendResult(1, 2)
    # A racing writer that read the old end moves on to the next free position.
    assert stores.turns.append_turn("s1", 0, turn("t2")) == AppendResult(3, 4)
    # Its own earlier write (a retry after a timeout) is recognised, not written twice.
    assert stores.turns.append_turn("s1", 0, turn("t1")) == AppendResult(1, 2, True)
    assert [m.seq for m in stores.turns.read_messages("s1", 1, 4)] == [1, 2, 3, 4]
    assert stores.turns.find_turn("s1", "t2", 1) == AppendResult(3, 4, True)
    assert stores.turns.find_turn("s1", "t2", 5) is None
    assert stores.turns.find_turn("s1", "t9", 1) is None


def test_the_turn_state_reads_only_the_newest_messages(stores: Stores) -> None:
    with_turns(stores, "s1", 6)
    assert stores.summaries.advance_summary("s1", 0, Summary(text="old", through_seq=4))
    for wanted in (1, 2, 3, 5):
        state = stores.turns.load_turn_state("s1", wanted, with_digests=False)
        assert state is not None
        assert [m.seq for m in state.recent] == list(range(13 - wanted, 13))
        assert state.session.message_count == 12
        assert state.summary == Summary(text="old", through_seq=4)
    state = stores.turns.load_turn_state("s1", 2, with_digests=False)
    assert state is not None
    assert [(m.role, m.content) for m in state.recent] == [
        ("user", "question 5"),
        ("assistant", "answer 5"),
    ]


def test_stored_flags_and_digests_come_back_with_their_turn(stores: Stores) -> None:
    stores.sessions.create_session(session("s1"))
    record = turn(
        "t1",
        answer="cut",
        truncated=True,
        digest_tools=("lookup_order",),
        digest_text="lookup_order -> ETA Friday",
        digest_expires_at=2_000_000_000.0,
        run_id="run_1",
    )
    seqs = stores.turns.append_turn("s1", 0, record)
    stores.turns.put_digest("s1", seqs.user_seq, record)
    stores.turns.append_turn("s1", 2, turn("t2", created_at="2026-01-01T00:00:02.000Z"))

    with_digests = stores.turns.load_turn_state("s1", 4, with_digests=True)
    assert with_digests is not None
    assert with_digests.recent[1].truncated is True and with_digests.recent[3].truncated is False
    assert with_digests.digests[2].tools == ["lookup_order"]
    assert with_digests.digests[2].text == "lookup_order -> ETA Friday"
    assert with_digests.digest_expiry[2] == 2_000_000_000
    # Without, the read makes no room for digests; those it finds are kept all the same
    # (a turn that called the app's tools may have one on any capability).
    without = stores.turns.load_turn_state("s1", 4, with_digests=False)
    assert without is not None and without.digests == with_digests.digests
    got = stores.sessions.get_session("s1")
    assert got is not None and got.last_active_at == "2026-01-01T00:00:02.000Z"


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_transcript_pages_cover_every_message_once_in_order(stores: Stores, limit: int) -> None:
    with_turns(stores, "s1", 4)
    seqs: list[int] = []
    after, more = 0, True
    while more:
        page, more = stores.turns.list_messages("s1", after, limit)
        assert 0 < len(page) <= limit
        seqs += [m.seq for m in page]
        after = page[-1].seq
    assert seqs == list(range(1, 9))
    assert [m.seq for m in stores.turns.read_messages("s1", 2, 5)] == [2, 3, 4, 5]


# -- summaries --------------------------------------------------------------------------------


def test_the_summary_only_moves_forward_by_compare_and_set(stores: Stores) -> None:
    stores.sessions.create_session(session("s1"))
    assert stores.summaries.get_summary("s1") is None
    assert stores.summaries.advance_summary("s1", 0, Summary(text="a", through_seq=4))
    assert not stores.summaries.advance_summary("s1", 0, Summary(text="b", through_seq=6))
    assert not stores.summaries.advance_summary("s1", 4, Summary(text="c", through_seq=4))
    assert stores.summaries.advance_summary("s1", 4, Summary(text="d", through_seq=8))
    assert stores.summaries.get_summary("s1") == Summary(text="d", through_seq=8)


def test_a_summary_made_in_a_window_keeps_the_version_that_window_shows(
    stores: Stores,
) -> None:
    with_turns(stores, "s1", 3)  # 6 messages
    first = Summary(text="one", through_seq=4)
    assert stores.summaries.advance_summary("s1", 0, first, window=FoldWindow(2, 6))
    state = stores.turns.load_turn_state("s1", 4, with_digests=False)
    assert state is not None and state.summary == first
    assert state.summary_versions == (SummaryVersion(first, 2),)

    second = Summary(text="two", through_seq=6)
    kept = SummaryVersion(first, 2)
    assert stores.summaries.advance_summary("s1", 4, second, kept, window=FoldWindow(4, 6))
    state = stores.turns.load_turn_state("s1", 4, with_digests=False)
    assert state is not None and state.summary == second
    assert state.summary_versions == (SummaryVersion(second, 4), kept)
    assert stores.summaries.get_summary("s1") == second
    # A fold without a window (alignment 1) keeps no other version and no window.
    with_more_turns(stores, "s1", 3, 2)
    third = Summary(text="three", through_seq=8)
    assert stores.summaries.advance_summary("s1", 6, third)
    state = stores.turns.load_turn_state("s1", 4, with_digests=False)
    assert state is not None and state.summary_versions == (SummaryVersion(third, 0),)
    # Deleting the conversation takes every version with it.
    stores.sessions.delete_contents("s1")
    assert stores.summaries.get_summary("s1") is None


def test_a_version_is_not_stored_once_a_turn_landed_after_its_window(stores: Stores) -> None:
    with_turns(stores, "s1", 3)  # 6 messages: the job read its window then
    with_more_turns(stores, "s1", 3, 1)  # ... and a turn landed (messages 7 and 8)
    late = Summary(text="late", through_seq=6)

    assert not stores.summaries.advance_summary("s1", 0, late, window=FoldWindow(2, 6))
    assert stores.summaries.get_summary("s1") is None
    # Made in the window now current, it is stored.
    assert stores.summaries.advance_summary("s1", 0, late, window=FoldWindow(4, 8))
    assert stores.summaries.get_summary("s1") == late


# -- the fence nonce ---------------------------------------------------------------------


def test_a_sessions_fence_nonce_is_kept_with_its_head_and_set_only_once(stores: Stores) -> None:
    stores.sessions.create_session(session("s1").model_copy(update={"fence_nonce": "aa" * 8}))
    stores.sessions.create_session(session("s2"))  # as a session from before nonces

    created = stores.sessions.get_session("s1")
    assert created is not None and created.fence_nonce == "aa" * 8
    assert "fenceNonce" not in created.to_json_dict() and "aa" * 8 not in str(
        created.to_json_dict()
    )
    legacy = stores.sessions.get_session("s2")
    assert legacy is not None and legacy.fence_nonce is None
    # The first keep stores it; a racing one gets the winner's; the head has it.
    assert stores.sessions.keep_fence_nonce("s2", "bb" * 8) == "bb" * 8
    assert stores.sessions.keep_fence_nonce("s2", "cc" * 8) == "bb" * 8
    assert stores.sessions.keep_fence_nonce("s1", "cc" * 8) == "aa" * 8
    state = stores.turns.load_turn_state("s2", 4, with_digests=False)
    assert state is not None and state.session.fence_nonce == "bb" * 8
    # A listing (the byExternalRef index does not project it) never shows it either.
    listed, _ = stores.sessions.list_sessions(WS, "user-1", 10, None)
    assert len(listed) == 2 and "fenceNonce" not in str([s.to_json_dict() for s in listed])


def test_no_fence_nonce_is_kept_for_a_session_that_is_not_active(stores: Stores) -> None:
    stores.sessions.create_session(session("s1"))
    stores.sessions.create_session(session("s2"))
    assert stores.sessions.begin_deletion("s1", WS, T0)
    assert stores.retention.archive_session("s2", T0, "2026-02-01")

    assert stores.sessions.keep_fence_nonce("s1", "bb" * 8) is None
    assert stores.sessions.keep_fence_nonce("s2", "bb" * 8) is None
    assert stores.sessions.keep_fence_nonce("missing", "bb" * 8) is None
    assert stores.sessions.get_session("missing") is None  # no head was created


# -- retention -----------------------------------------------------------------------------


def _shard(stores: Stores, sid: str) -> int:
    for shard in range(stores.retention.activity_shards):
        for status in ("active", "archived", "deleting"):
            if any(s == sid for s, _ in stores.retention.sessions_by_activity(status, shard, "9")):
                return shard
    raise AssertionError(f"{sid} is in no shard")


def test_archiving_and_purging_are_conditional_on_what_the_index_showed(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    shard = _shard(stores, "s1")
    assert list(stores.retention.sessions_by_activity("active", shard, "2026-02")) == [("s1", T0)]
    assert list(stores.retention.sessions_by_activity("active", shard, T0)) == []
    assert stores.retention.last_turn_at("s1") == (2, "2026-01-01T00:00:01.000Z")

    # The mark moved meanwhile: neither a refresh nor an archive from the old one.
    stores.sessions.touch("s1", "2026-01-05T00:00:00.000Z")
    assert not stores.retention.refresh_activity("s1", T0, "2026-01-06")
    assert not stores.retention.archive_session("s1", T0, "2026-02-01")
    assert stores.retention.refresh_activity("s1", "2026-01-05T00:00:00.000Z", "2026-01-06")
    assert stores.retention.archive_session("s1", "2026-01-06", "2026-02-01")
    assert not stores.retention.archive_session("s1", "2026-01-06", "2026-02-01")
    assert list(stores.retention.sessions_by_activity("archived", shard, "2026-03")) == [
        ("s1", "2026-02-01")
    ]
    archived = stores.sessions.get_session("s1")
    assert archived is not None and archived.status == "archived"

    assert not stores.retention.remove_head("s1")  # only a head marked deleted goes
    assert not stores.retention.begin_purge("s1", "2000-01-01", "2026-03-01")
    assert stores.retention.begin_purge("s1", "2026-02-01", "2026-03-01")
    assert stores.sessions.get_session("s1") is None
    assert stores.retention.delete_contents("s1") == 1
    assert stores.retention.remove_head("s1")
    assert stores.retention.last_turn_at("s1") is None
    assert list(stores.retention.sessions_by_activity("deleting", shard, "9")) == []


# -- recall ---------------------------------------------------------------------------------


def recall_session(
    sid: str, created: str, cap: str = "cap-1", principal: dict[str, str] | None = None
) -> Session:
    return session(sid, created=created).model_copy(
        update={"capability_id": cap, "principal": principal}
    )


def test_recall_candidates_are_the_newest_of_the_capability_and_principal(stores: Stores) -> None:
    alice, swapped = {"t": "1", "u": "alice"}, {"u": "alice", "t": "1"}
    for i, (cap, principal) in enumerate(
        [
            ("cap-1", alice),
            ("cap-1", swapped),  # the same principal, its claims in another order
            ("cap-2", alice),
            ("cap-1", {"t": "1", "u": "bob"}),
            ("cap-1", None),
            ("cap-1", alice),
        ]
    ):
        stores.sessions.create_session(
            recall_session(f"s{i}", f"2026-01-0{i + 1}T00:00:00.000Z", cap, principal)
        )
    stores.sessions.create_session(session("other-ref", ref="user-2"))
    stores.sessions.begin_deletion("s5", WS, T0)

    found = stores.recall.candidates(WS, "user-1", "cap-1", alice, limit=5, scan=100)
    assert found == ["s1", "s0"]
    assert stores.recall.candidates(WS, "user-1", "cap-1", alice, limit=1, scan=100) == ["s1"]
    assert stores.recall.candidates(WS, "user-1", "cap-1", None, limit=5, scan=100) == ["s4"]
    # Only the end user's newest ``scan`` sessions are looked at.
    assert stores.recall.candidates(WS, "user-1", "cap-1", alice, limit=5, scan=3) == []
    assert stores.recall.candidates(OTHER_WS, "user-1", "cap-1", alice, limit=5, scan=100) == []


def test_recall_sources_give_the_summary_and_newest_turns_of_undeleted_sessions(
    stores: Stores,
) -> None:
    with_turns(stores, "s1", 4)
    with_turns(stores, "s2", 1)
    assert stores.summaries.advance_summary("s2", 0, Summary(text="sum", through_seq=2))
    with_turns(stores, "gone", 1)
    stores.sessions.begin_deletion("gone", WS, T0)

    first, second, gone, missing = stores.recall.sources(["s1", "s2", "gone", "nope"], 2)

    assert first is not None and first.summary is None and first.created_at == T0
    assert [m.content for m in first.messages] == [
        "question 2",
        "answer 2",
        "question 3",
        "answer 3",
    ]
    assert second is not None and second.summary == "sum" and second.has_text
    assert gone is None and missing is None


def test_a_session_with_recall_is_stored_only_while_its_sources_are_undeleted(
    stores: Stores,
) -> None:
    from convo_memory.domain.errors import RecallSourceGone
    from convo_memory.domain.models import Recall

    for sid in ("a", "b"):
        stores.sessions.create_session(session(sid))
    recall = Recall(text="earlier: é and 中文", from_sessions=["a", "b"])
    stores.sessions.create_session(session("new").model_copy(update={"recall": recall}))
    stored = stores.sessions.get_session("new")
    assert stored is not None and stored.recall == recall
    state = stores.turns.load_turn_state("new", 4, with_digests=False)
    assert state is not None and state.session.recall == recall  # the turn's one read
    assert stores.sessions.list_sessions(WS, "user-1", 10, None)[0][0].id == "new"

    stores.sessions.begin_deletion("b", WS, T0)
    with pytest.raises(RecallSourceGone):
        stores.sessions.create_session(session("late").model_copy(update={"recall": recall}))
    assert stores.sessions.get_session("late") is None
    plain = stores.sessions.get_session("a")
    assert plain is not None and plain.recall is None


# -- erasures ------------------------------------------------------------------------------


def receipt(erasure_id: str = "era_1", traces: TracePolicy = "keep") -> Erasure:
    return Erasure(
        id=erasure_id,
        workspace_id=WS,
        external_ref="user-1",
        traces=traces,
        status="pending",
        created_at="2026-01-01T00:00:09.000Z",
    )


def test_an_erasure_claims_only_its_end_users_live_sessions(stores: Stores) -> None:
    erasures = stores.erasures
    erasures.put_erasure(receipt())
    for sid, ws, ref in (("s1", WS, "user-1"), ("s2", WS, "user-2"), ("s3", OTHER_WS, "user-1")):
        stores.sessions.create_session(session(sid, ws, ref))
    stores.sessions.create_session(session("s4"))
    assert stores.sessions.begin_deletion("s4", WS, T0)  # deleted before: not in the index

    listed = erasures.sessions_of(WS, "user-1", "2026-01-01T00:00:09.000Z")

    assert [(s.session_id, s.live) for s in listed] == [("s1", True)]
    assert erasures.claim_session("s1", WS, "user-1", "era_1", T0) is True
    assert erasures.claim_session("s1", WS, "user-1", "era_1", T0) is True  # again: ours
    assert erasures.claim_session("s1", WS, "user-1", "era_2", T0) is False  # another's
    assert erasures.claim_session("s2", WS, "user-1", "era_1", T0) is False  # other user
    assert erasures.claim_session("s3", WS, "user-1", "era_1", T0) is False  # other ws
    assert erasures.claim_session("s4", WS, "user-1", "era_1", T0) is False  # deleted
    assert stores.sessions.get_session("s1") is None
    assert stores.sessions.begin_deletion("s1", WS, T0) is False  # the erasure's to finish
    assert [(s.session_id, s.live) for s in erasures.sessions_of(WS, "user-1", T0 + "~")] == [
        ("s1", False)
    ]
    assert erasures.sessions_of(WS, "user-1", "2025-12-31T00:00:00.000Z") == []


def test_an_erased_session_is_counted_once_with_the_traces_it_keeps(stores: Stores) -> None:
    erasures = stores.erasures
    erasures.put_erasure(receipt())
    with_turns(stores, "s1", 2)
    erasures.claim_session("s1", WS, "user-1", "era_1", T0)

    assert erasures.keep_traces("s1", "era_1", 3) == 3
    assert erasures.keep_traces("s1", "era_1", 1) == 3  # the first count stays
    assert erasures.erase_contents("s1") == 2
    assert erasures.remove_session("s1", WS, "era_1", 3) is True
    assert erasures.remove_session("s1", WS, "era_1", 3) is False  # gone: not counted again

    counted = erasures.get_erasure(WS, "era_1")
    assert counted is not None
    assert (counted.sessions_erased, counted.traces_kept) == (1, 3)


def test_an_erased_run_is_counted_once_and_only_in_its_workspace(stores: Stores) -> None:
    erasures = stores.erasures
    erasures.put_erasure(receipt(traces="erase"))
    stores.runs.put_run({"runId": "run_1", "workspaceId": WS, "sessionId": "s1"})
    stores.runs.put_run({"runId": "run_2", "workspaceId": OTHER_WS, "sessionId": "s9"})

    assert erasures.erase_run(WS, "era_1", "run_1") is True
    assert erasures.erase_run(WS, "era_1", "run_1") is False
    assert erasures.erase_run(WS, "era_1", "run_2") is False  # another workspace's

    counted = erasures.get_erasure(WS, "era_1")
    assert counted is not None and counted.traces_erased == 1
    assert stores.runs.get_run(WS, "run_1") is None
    assert stores.runs.get_run(OTHER_WS, "run_2") is not None


def test_a_receipt_runs_once_and_finishes_once(stores: Stores) -> None:
    erasures = stores.erasures
    erasures.put_erasure(receipt())

    before = erasures.start_erasure(WS, "era_1")
    erasures.finish_erasure(WS, "era_1", "done", "2026-01-01T00:01:00.000Z")
    again = erasures.start_erasure(WS, "era_1")

    assert before is not None and before.status == "pending"
    assert again is not None and again.status == "done"  # a done erasure stays done
    done = erasures.get_erasure(WS, "era_1")
    assert done is not None and (done.status, done.finished_at) == (
        "done",
        "2026-01-01T00:01:00.000Z",
    )
    assert erasures.get_erasure(OTHER_WS, "era_1") is None
    assert erasures.start_erasure(WS, "era_unknown") is None


def test_a_sweep_never_touches_a_live_session(stores: Stores) -> None:
    with_turns(stores, "live", 2)
    with_turns(stores, "gone", 2)
    assert stores.sessions.begin_deletion("gone", WS, T0)

    assert stores.erasures.sweep_session("live", erase_traces=True) == (0, [])
    assert stores.erasures.sweep_session("gone", erase_traces=False) == (2, [])

    assert len(stores.turns.list_messages("live", 0, 10)[0]) == 4
    assert stores.turns.list_messages("gone", 0, 10)[0] == []


def test_only_a_running_erasure_finishes(stores: Stores) -> None:
    stores.erasures.put_erasure(receipt())

    assert stores.erasures.finish_erasure(WS, "era_1", "done", T0) is False  # pending
    stores.erasures.start_erasure(WS, "era_1")
    assert stores.erasures.finish_erasure(WS, "era_1", "failed", T0) is True
    assert stores.erasures.finish_erasure(WS, "era_1", "done", T0) is False  # already


def test_the_newest_activity_of_an_end_users_sessions_is_read_claimed_or_not(
    stores: Stores,
) -> None:
    for sid, at in (("s1", "2026-01-01T00:00:00.000Z"), ("s2", "2026-01-03T00:00:00.000Z")):
        stores.sessions.create_session(session(sid).model_copy(update={"last_active_at": at}))
    assert stores.sessions.begin_deletion("s2", WS, T0)  # a claimed head keeps its mark

    assert stores.erasures.newest_activity(["s1", "s2", "gone"]) == "2026-01-03T00:00:00.000Z"
    assert stores.erasures.newest_activity(["gone"]) is None


# -- forks ------------------------------------------------------------------------------------


def fork_of(parent: str, fork_id: str, at_seq: int) -> Session:
    forked = session(fork_id, created="2026-01-02T00:00:00.000Z")
    return forked.model_copy(
        update={"fork_of": ForkPoint(session_id=parent, at_seq=at_seq), "message_count": at_seq}
    )


def test_a_fork_holds_the_newest_inherited_turns_and_reads_the_rest_through_its_parent(
    stores: Stores,
) -> None:
    with_turns(stores, "p1", 5)
    assert stores.summaries.advance_summary("p1", 0, Summary(text="to 2", through_seq=2))
    assert stores.summaries.advance_summary("p1", 2, Summary(text="to 6", through_seq=6))

    pending = stores.forks.create_fork(fork_of("p1", "f1", 8), 2, keep_earlier_summary=False)

    assert pending is True
    state = stores.turns.load_turn_state("f1", 4, with_digests=False)
    assert state is not None and state.session.copying_from == "p1"
    assert [m.seq for m in state.recent] == [5, 6, 7, 8]
    assert state.summary == Summary(text="to 6", through_seq=6)
    assert state.session.fork_of == ForkPoint(session_id="p1", at_seq=8)
    listed, more = stores.turns.list_messages("f1", 0, 100)
    assert ([m.seq for m in listed], more) == (list(range(1, 9)), False)
    assert [m.content for m in stores.turns.read_messages("f1", 1, 3)] == [
        "question 0",
        "answer 0",
        "question 1",
    ]
    assert stores.forks.copy_inherited("p1", "f1") == "done"
    state = stores.turns.load_turn_state("f1", 4, with_digests=False)
    assert state is not None and state.session.copying_from is None
    assert [m.seq for m in stores.turns.list_messages("f1", 0, 100)[0]] == list(range(1, 9))


def test_a_parents_deletion_finishes_the_copy_its_fork_still_needs(stores: Stores) -> None:
    with_turns(stores, "p1", 5)
    stores.forks.create_fork(fork_of("p1", "f1", 6), 1, keep_earlier_summary=False)

    assert stores.sessions.begin_deletion("p1", WS, T0)
    stores.sessions.delete_contents("p1")

    assert stores.turns.list_messages("p1", 0, 100) == ([], False)
    listed = stores.turns.list_messages("f1", 0, 100)[0]
    assert [(m.seq, m.content) for m in listed][:2] == [(1, "question 0"), (2, "answer 0")]
    assert [m.seq for m in listed] == list(range(1, 7))
    state = stores.turns.load_turn_state("f1", 2, with_digests=False)
    assert state is not None and state.session.copying_from is None


def test_a_deleted_forks_copy_is_dropped_and_its_marker_with_it(stores: Stores) -> None:
    with_turns(stores, "p1", 5)
    stores.forks.create_fork(fork_of("p1", "f1", 10), 1, keep_earlier_summary=False)

    assert stores.sessions.begin_deletion("f1", WS, T0)
    stores.sessions.delete_contents("f1")

    assert stores.forks.copy_inherited("p1", "f1") == "gone"
    assert stores.turns.list_messages("f1", 0, 100) == ([], False)
    # The parent's deletion has no copy left to finish.
    assert stores.sessions.begin_deletion("p1", WS, T0)
    assert stores.sessions.delete_contents("p1") == 5


def test_a_fork_of_a_parent_deleted_meanwhile_is_not_stored(stores: Stores) -> None:
    with_turns(stores, "p1", 2)
    assert stores.sessions.begin_deletion("p1", WS, T0)

    with pytest.raises(SessionNotFound):
        stores.forks.create_fork(fork_of("p1", "f1", 2), 1, keep_earlier_summary=False)

    assert stores.sessions.get_session("f1") is None
    assert stores.turns.list_messages("f1", 0, 100) == ([], False)


def chain(stores: Stores) -> list[tuple[int, str]]:
    """p1 (5 turns, summaries to 2 and 6) <- f1 at 10 <- f2 at 8, both copies still due."""
    with_turns(stores, "p1", 5)
    assert stores.summaries.advance_summary("p1", 0, Summary(text="to 2", through_seq=2))
    assert stores.summaries.advance_summary("p1", 2, Summary(text="to 6", through_seq=6))
    assert stores.forks.create_fork(fork_of("p1", "f1", 10), 1, keep_earlier_summary=False)
    assert stores.forks.create_fork(fork_of("f1", "f2", 8), 1, keep_earlier_summary=True)
    return [(m.seq, m.content) for m in stores.turns.list_messages("p1", 0, 8)[0]]


def listed(stores: Stores, sid: str) -> list[tuple[int, str]]:
    return [(m.seq, m.content) for m in stores.turns.list_messages(sid, 0, 100)[0]]


def test_a_fork_of_a_fork_still_copying_reads_and_copies_through_the_chain(
    stores: Stores,
) -> None:
    expected = chain(stores)

    assert stores.forks.copies_due("f2", 4) == 2 and stores.forks.copies_due("p1", 4) == 0
    state = stores.turns.load_turn_state("f2", 2, with_digests=False)
    assert state is not None and state.session.copying_from == "f1"
    assert [m.seq for m in state.recent] == [7, 8]
    assert state.summary == Summary(text="to 6", through_seq=6)
    assert [v.summary.through_seq for v in state.summary_versions] == [6, 2]
    assert listed(stores, "f2") == expected
    assert [m.seq for m in stores.turns.read_messages("f2", 1, 8)] == list(range(1, 9))
    # Its copy comes after its parent's: both are done by it.
    assert stores.forks.copy_inherited("f1", "f2") == "done"
    assert stores.forks.copies_due("f2", 4) == 0
    assert listed(stores, "f2") == expected and listed(stores, "f1")[:8] == expected


@pytest.mark.parametrize("first", ["f1", "p1"])
def test_a_chain_of_copies_survives_the_deletion_of_each_session_above(
    stores: Stores, first: str
) -> None:
    expected = chain(stores)

    for sid in [first, "p1" if first == "f1" else "f1"]:
        assert stores.sessions.begin_deletion(sid, WS, T0)
        stores.sessions.delete_contents(sid)

    assert listed(stores, "f2") == expected
    assert stores.forks.copies_due("f2", 4) == 0
    assert listed(stores, "p1") == [] and listed(stores, "f1") == []


def test_a_fork_being_deleted_hands_its_forks_over_when_its_parent_goes_first(
    stores: Stores,
) -> None:
    expected = chain(stores)
    assert stores.sessions.begin_deletion("f1", WS, T0)  # marked, not emptied yet

    assert stores.sessions.begin_deletion("p1", WS, T0)
    stores.sessions.delete_contents("p1")  # f2 reads through f1 into p1: handed over

    assert listed(stores, "f2") == expected
    stores.sessions.delete_contents("f1")
    assert listed(stores, "f2") == expected
    assert stores.forks.copies_due("f2", 4) == 0


def test_a_turns_prompt_record_and_the_parts_it_names_are_read_back(stores: Stores) -> None:
    with_turns(stores, "s1", 2)
    assert stores.summaries.advance_summary("s1", 0, Summary(text="to 2", through_seq=2))
    record = PromptRecord(first_seq=3, last_seq=4, summary_through=2)
    stores.turns.append_turn("s1", 4, turn("t9", "third", prompt_record=record))

    stored = stores.turns.stored_prompt("s1", 5)

    assert stored is not None
    assert (stored.user_seq, stored.input, stored.record) == (5, "third", record)
    assert [m.content for m in stored.messages] == ["question 1", "answer 1"]
    assert stored.summary == Summary(text="to 2", through_seq=2)
    assert stores.turns.stored_prompt("s1", 1) is not None
    assert stores.turns.stored_prompt("s1", 1).record is None  # type: ignore[union-attr]
    assert stores.turns.stored_prompt("s1", 7) is None


def test_a_fork_starts_from_the_versions_behind_its_point_with_the_windows_they_were_made_in(
    stores: Stores,
) -> None:
    with_turns(stores, "p1", 10)
    versions = [(4, 10), (10, 14), (16, 20)]  # (throughSeq, made in a window omitting ...)
    previous = 0
    for through, made_at in versions:
        summary = Summary(text=f"to {through}", through_seq=through)
        window = FoldWindow(omitted=made_at, message_count=20)
        assert stores.summaries.advance_summary("p1", previous, summary, window=window)
        previous = through

    stores.forks.create_fork(fork_of("p1", "f1", 12), 2, keep_earlier_summary=True)

    state = stores.turns.load_turn_state("f1", 4, with_digests=False)
    assert state is not None
    assert state.summary_versions == (
        SummaryVersion(Summary(text="to 10", through_seq=10), 14),
        SummaryVersion(Summary(text="to 4", through_seq=4), 10),
    )


# -- turns paused for the app's own tools (v4) ----------------------------------------------


def paused_turn(
    pause_id: str = "pause_1", since: str = T0, expires: str = "2026-01-01T00:15"
) -> PendingTurn:
    step = ToolRound("", (ToolRequest("c1", "get_weather", {"query": "x"}),), ())
    return PendingTurn(
        pause_id, 0, T0, since, expires, "weather?", PromptRecord(), None, (), step, ("c1",)
    )


def test_a_paused_turn_holds_its_position_but_is_no_message(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    kept = stores.turns.keep_pending("s1", 2, paused_turn())
    assert kept is not None and kept.user_seq == 3
    # A turn that raced it moves on past its position.
    assert stores.turns.append_turn("s1", 2, turn("t9")) == AppendResult(5, 6)

    state = stores.turns.load_turn_state("s1", 20, with_digests=False, pending=True)
    assert state is not None and state.pending is not None
    assert (state.pending.user_seq, state.pending.tool_calls[0].call_id) == (3, "c1")
    assert [m.seq for m in state.recent] == [1, 2, 5, 6]
    page, _ = stores.turns.list_messages("s1", 0, 50)
    assert [m.seq for m in page] == [1, 2, 5, 6]
    assert [m.seq for m in stores.turns.read_messages("s1", 1, 6)] == [1, 2, 5, 6]
    assert stores.turns.stored_prompt("s1", 3) is None


def test_a_newest_paused_turn_is_not_counted(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    stores.turns.keep_pending("s1", 2, paused_turn())
    got = stores.sessions.get_session("s1")
    assert got is not None and got.message_count == 2
    state = stores.turns.load_turn_state("s1", 20, with_digests=False)
    assert state is not None and state.session.message_count == 2 and state.pending is not None


def test_the_turn_that_ends_a_pause_is_written_over_it_once(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    stores.turns.keep_pending("s1", 2, paused_turn())
    final = turn("t-final", "weather?", "sunny", resolves="pause_1")

    assert stores.turns.append_turn("s1", 2, final) == AppendResult(3, 4)
    assert stores.turns.append_turn("s1", 2, final) == AppendResult(3, 4, True)  # a retry
    with pytest.raises(PauseEnded):  # a racing continuation's own answer
        stores.turns.append_turn("s1", 2, turn("t-other", resolves="pause_1"))
    assert [(m.seq, m.content) for m in stores.turns.read_messages("s1", 3, 4)] == [
        (3, "weather?"),
        (4, "sunny"),
    ]
    state = stores.turns.load_turn_state("s1", 20, with_digests=False, pending=True)
    assert state is not None and state.pending is None


def test_a_pause_is_replaced_only_while_it_is_the_one_kept(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    kept = stores.turns.keep_pending("s1", 2, paused_turn())
    assert kept is not None
    again = replace(paused_turn("pause_2"), user_seq=kept.user_seq)
    assert stores.turns.keep_pending("s1", 2, again, replaces="pause_1") == again
    assert stores.turns.keep_pending("s1", 2, again, replaces="pause_1") == again  # a retry
    late = replace(paused_turn("pause_3"), user_seq=kept.user_seq)
    assert stores.turns.keep_pending("s1", 2, late, replaces="pause_1") is None


def test_retention_finds_and_abandons_the_pauses_that_wait_no_more(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    stores.turns.keep_pending("s1", 2, paused_turn(expires="2026-01-01T00:15"))
    shard = _shard(stores, "s1")
    assert list(stores.retention.paused_turns(shard, "2026-01-01T00:10")) == []
    assert list(stores.retention.paused_turns(shard, "2026-01-01T00:20")) == [("s1", 3)]

    assert stores.retention.abandon_paused("s1", 3, "2026-01-01T00:10") is False  # not yet
    assert stores.retention.abandon_paused("s1", 3, "2026-01-01T00:20") is True
    assert stores.retention.abandon_paused("s1", 3, "2026-01-01T00:20") is False
    answer = stores.turns.read_messages("s1", 3, 4)[1]
    assert (answer.abandoned, answer.content) == (True, "")
    assert list(stores.retention.paused_turns(shard, "2026-01-01T00:20")) == []


# -- stored responses (v4) ----------------------------------------------------------------------


def test_a_response_is_found_by_its_turn_with_the_turn_before_it(stores: Stores) -> None:
    with_turns(stores, "s1", 3)  # turns t0, t1, t2 at user seqs 1, 3, 5

    found = stores.responses.find_response(ResponseRef("s1", 5, "t2"))

    assert found is not None and not found.deleted
    assert (found.user_seq, found.user.content, found.answer.content) == (
        5,
        "question 2",
        "answer 2",
    )
    assert found.previous == ResponseRef("s1", 3, "t1")
    first = stores.responses.find_response(ResponseRef("s1", 1, "t0"))
    assert first is not None and first.previous is None
    assert stores.responses.find_response(ResponseRef("s1", 5, "someone-else")) is None
    assert stores.responses.find_response(ResponseRef("missing", 1, "t0")) is None


def test_a_response_pushed_on_by_a_racing_turn_is_found_further_on(stores: Stores) -> None:
    # The turn began at user seq 3, but a racing turn took that place: it landed at 5.
    with_turns(stores, "s1", 1)
    stores.turns.append_turn("s1", 2, turn("racer"))
    stores.turns.append_turn("s1", 2, turn("late", "mine", "my answer"))

    found = stores.responses.find_response(ResponseRef("s1", 3, "late"))

    assert found is not None and (found.user_seq, found.user.content) == (5, "mine")
    assert found.previous == ResponseRef("s1", 3, "racer")


def test_a_deleted_response_is_marked_and_its_turn_stays(stores: Stores) -> None:
    with_turns(stores, "s1", 2)
    ref = ResponseRef("s1", 3, "t1")

    assert stores.responses.mark_deleted(ResponseRef("s1", 3, "not-it"), 3) is False
    assert stores.responses.mark_deleted(ref, 3) is True

    found = stores.responses.find_response(ref)
    assert found is not None and found.deleted
    state = stores.turns.load_turn_state("s1", 10, with_digests=False)
    assert state is not None and (state.newest_turn_id, state.newest_response_deleted) == (
        "t1",
        True,
    )
    assert [m.seq for m in state.recent] == [1, 2, 3, 4]


def test_a_forks_first_turn_follows_its_parents_answer(stores: Stores) -> None:
    with_turns(stores, "p1", 3)
    stores.forks.create_fork(fork_of("p1", "f1", 4), 2, keep_earlier_summary=False)
    stores.turns.append_turn("f1", 4, turn("own", "branch", "branch answer"))

    found = stores.responses.find_response(ResponseRef("f1", 5, "own"))

    assert found is not None and found.session.id == "f1"
    assert found.previous == ResponseRef("p1", 3, "t1")


def test_a_waiting_pause_is_found_with_its_calls_and_once_ended_names_its_turn(
    stores: Stores,
) -> None:
    with_turns(stores, "s1", 1)
    kept = stores.turns.keep_pending("s1", 2, paused_turn("a1b2c3d4"))
    assert kept is not None and kept.user_seq == 3
    pause = ResponseRef("s1", 3, "a1b2c3d4")

    # (v5) Waiting, it is found with the calls it waits for; nothing of it is recorded yet.
    waiting = stores.responses.find_response(pause)
    assert waiting is not None and [c.name for c in waiting.waiting] == ["get_weather"]
    session = stores.sessions.get_session("s1")
    assert session is not None
    at = stores.responses.turn_at(session, 3)
    assert at is not None and at.waiting == waiting.waiting and at.ref == pause

    stores.turns.append_turn("s1", 2, turn("e5f6a7b8", "weather?", "sunny", resolves="a1b2c3d4"))
    ended = stores.responses.find_response(pause)
    answer = stores.responses.find_response(ResponseRef("s1", 3, "e5f6a7b8"))
    assert ended is not None and ended.pause and ended.answer.content == "sunny"
    assert answer is not None and not answer.pause and answer.ended_pause == "a1b2c3d4"


def test_a_turn_keeps_that_its_request_named_the_response_before_it(stores: Stores) -> None:
    with_turns(stores, "s1", 1)
    chained = turn("t-chained", prompt_record=PromptRecord(1, 2, chained=True))
    stores.turns.append_turn("s1", 2, chained)

    found = stores.responses.find_response(ResponseRef("s1", 3, "t-chained"))
    plain = stores.responses.find_response(ResponseRef("s1", 1, "t0"))

    assert found is not None and found.settings.chained and found.previous is not None
    assert plain is not None and not plain.settings.chained


def test_a_listing_that_races_the_end_of_a_forks_copy_still_shows_every_message(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy finishes between the listing's read of the fork's own turns (the older
    ones not there yet) and its read of the fork's head (no copy due any more): the
    listing reads the fork again rather than showing only its newest turns."""
    with_turns(stores, "p1", 5)
    stores.forks.create_fork(fork_of("p1", "f1", 10), 1, keep_earlier_summary=False)
    if isinstance(stores.forks, DynamoForkStore):
        original = fork_reads.copy_state

        def copy_finishes_first(table: Any, session_id: str) -> Any:
            assert stores.forks.copy_inherited("p1", "f1") == "done"
            return original(table, session_id)

        monkeypatch.setattr(fork_reads, "copy_state", copy_finishes_first)
    else:
        assert stores.forks.copy_inherited("p1", "f1") == "done"

    listed, more = stores.turns.list_messages("f1", 0, 100)

    assert ([m.seq for m in listed], more) == (list(range(1, 11)), False)
