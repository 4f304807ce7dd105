"""Session use cases (SessionService) over the in-memory store."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    CapabilityNotFound,
    ExternalRefImmutable,
    PrincipalImmutable,
    SessionNotFound,
    ValidationFailed,
)
from convo_memory.domain.models import (
    CapabilityCreate,
    ReplayPolicy,
    Session,
    SessionCreate,
    SessionPatch,
    Summary,
    ToolSpec,
)
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.ports import ToolCall
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.sessions import SessionService
from convo_memory.services.turns import TurnPolicy, TurnService
from tests.fakes.in_memory_store import FakeClock, FakeProvider, InMemoryStore

WS = "ws_alpha"
OTHER_WS = "ws_beta"
PRINCIPAL = {"tenant_id": "t-1", "user_id": "u-7"}


@dataclass
class World:
    store: InMemoryStore
    catalog: CapabilityCatalog
    sessions: SessionService
    clock: FakeClock

    def capability(self, cap_id: str, kind: str = "generative", ws: str = WS, **extra: Any) -> str:
        body = CapabilityCreate.model_validate({"name": cap_id, "kind": kind, **extra})
        self.catalog.create(ws, body, cap_id=cap_id)
        return cap_id

    def session(
        self,
        cap_id: str = "cap-gen",
        ws: str = WS,
        principal: dict[str, str] | None = PRINCIPAL,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        body = SessionCreate(
            capability_id=cap_id,
            external_ref="end-user-1",
            principal=principal,
            metadata=metadata or {},
        )
        return self.sessions.create(ws, body)

    def turns(
        self, provider: FakeProvider, clock: Callable[[], float] | None = None
    ) -> TurnService:
        return TurnService(
            store=self.store,
            catalog=self.catalog,
            provider_for=lambda capability: provider,
            filter_for=lambda capability: None,
            summary_queue=None,
            repair_queue=None,
            policy=TurnPolicy(digest_retention_seconds=3_600),
            clock=clock or self.clock,
        )


@pytest.fixture
def world() -> World:
    store = InMemoryStore()
    clock = FakeClock()
    catalog = CapabilityCatalog(store, cache_ttl_seconds=30, clock=clock)
    w = World(store=store, catalog=catalog, sessions=SessionService(store, catalog), clock=clock)
    w.capability("cap-gen")
    return w


def patch(body: dict[str, Any]) -> SessionPatch:
    """A PATCH body as the handler parses it (camelCase JSON)."""
    return SessionPatch.model_validate(body)


# -- create and read ---------------------------------------------------------------


def test_given_a_capability_of_the_workspace_when_creating_then_a_fresh_active_session_exists(
    world: World,
) -> None:
    session = world.session(metadata={"channel": "web"})

    stored = world.sessions.get(WS, session.id)
    assert stored == session
    assert (stored.status, stored.message_count) == ("active", 0)
    assert stored.capability_id == "cap-gen"
    assert stored.principal == PRINCIPAL
    assert stored.metadata == {"channel": "web"}
    assert stored.created_at == stored.last_active_at


def test_given_a_capability_of_another_workspace_when_creating_then_capability_not_found(
    world: World,
) -> None:
    world.capability("cap-theirs", ws=OTHER_WS)

    with pytest.raises(CapabilityNotFound):
        world.session("cap-theirs", ws=WS)
    with pytest.raises(CapabilityNotFound):
        world.session("cap-nowhere", ws=WS)

    assert world.store.partitions == {}


def test_given_a_classic_capability_when_creating_a_session_then_it_is_refused(
    world: World,
) -> None:
    world.capability("cap-classic", kind="classic")

    with pytest.raises(CapabilityNotConversational):
        world.session("cap-classic")

    assert world.store.partitions == {}


def test_given_another_workspaces_session_when_reading_then_it_is_not_found(world: World) -> None:
    session = world.session()

    with pytest.raises(SessionNotFound):
        world.sessions.get(OTHER_WS, session.id)
    with pytest.raises(SessionNotFound):
        world.sessions.get(WS, "ses_missing")
    with pytest.raises(SessionNotFound):
        world.sessions.context(OTHER_WS, session.id)
    with pytest.raises(SessionNotFound):
        world.sessions.messages(OTHER_WS, session.id, limit=10)
    with pytest.raises(SessionNotFound):
        world.sessions.patch(OTHER_WS, session.id, patch({"metadata": {"x": 1}}))
    with pytest.raises(SessionNotFound):
        world.sessions.delete(OTHER_WS, session.id)

    assert world.sessions.get(WS, session.id) == session


# -- patch -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "principal",
    [{"tenant_id": "t-1", "user_id": "someone-else"}, None, {}, {"tenant_id": "t-1"}],
)
def test_given_a_different_principal_when_patching_then_it_is_refused_and_nothing_changes(
    world: World, principal: dict[str, str] | None
) -> None:
    session = world.session(metadata={"keep": True})

    with pytest.raises(PrincipalImmutable):
        world.sessions.patch(WS, session.id, patch({"principal": principal, "metadata": {"x": 1}}))

    assert world.sessions.get(WS, session.id) == session
    assert world.store.calls["update_metadata"] == 0


def test_given_a_session_without_principal_when_patching_one_in_then_it_is_refused(
    world: World,
) -> None:
    session = world.session(principal=None)

    with pytest.raises(PrincipalImmutable):
        world.sessions.patch(WS, session.id, patch({"principal": {"user_id": "u-1"}}))

    assert world.sessions.get(WS, session.id).principal is None


def test_given_the_same_principal_when_patching_then_the_metadata_change_is_allowed(
    world: World,
) -> None:
    session = world.session(metadata={"a": 1})

    updated = world.sessions.patch(
        WS, session.id, patch({"principal": dict(PRINCIPAL), "metadata": {"b": 2}})
    )

    assert updated.principal == PRINCIPAL
    assert updated.metadata == {"b": 2}
    assert world.sessions.get(WS, session.id).metadata == {"b": 2}


def test_given_a_different_external_ref_when_patching_then_it_is_refused_and_nothing_changes(
    world: World,
) -> None:
    session = world.session(metadata={"keep": True})

    with pytest.raises(ExternalRefImmutable):
        world.sessions.patch(
            WS, session.id, patch({"externalRef": "someone-else", "metadata": {"x": 1}})
        )

    assert world.sessions.get(WS, session.id) == session
    assert world.store.calls["update_metadata"] == 0


def test_given_the_same_external_ref_when_patching_then_it_is_allowed(world: World) -> None:
    session = world.session()

    updated = world.sessions.patch(
        WS, session.id, patch({"externalRef": "end-user-1", "metadata": {"n": 1}})
    )

    assert updated.external_ref == "end-user-1"
    assert updated.metadata == {"n": 1}


def test_given_new_metadata_when_patching_then_it_replaces_the_old_as_a_whole(
    world: World,
) -> None:
    session = world.session(metadata={"a": 1, "nested": {"x": 1, "y": 2}})

    updated = world.sessions.patch(WS, session.id, patch({"metadata": {"nested": {"x": 9}}}))

    assert updated.metadata == {"nested": {"x": 9}}
    stored = world.sessions.get(WS, session.id)
    assert stored.metadata == {"nested": {"x": 9}}
    assert stored.model_dump(exclude={"metadata"}) == session.model_dump(exclude={"metadata"})


# -- delete ------------------------------------------------------------------------


def test_given_a_conversation_when_deleting_then_the_transcript_goes_and_run_traces_stay(
    world: World,
) -> None:
    world.capability("cap-agent", kind="agent", tools=[ToolSpec(name="lookup").model_dump()])
    session = world.session("cap-agent")
    provider = FakeProvider("done", tool_calls=[ToolCall("lookup", {"q": "1"}, "found it")])
    prediction = world.turns(provider).predict(WS, "cap-agent", "look it up", session.id)
    world.store.advance_summary(session.id, 0, Summary(text="earlier", through_seq=2))
    assert prediction.run_id is not None
    assert world.store.digests_of(session.id)

    world.sessions.delete(WS, session.id)

    with pytest.raises(SessionNotFound):
        world.sessions.get(WS, session.id)
    assert world.store.messages_of(session.id) == []
    assert world.store.digests_of(session.id) == {}
    assert world.store.get_summary(session.id) is None
    assert world.store.list_messages(session.id, 0, 10) == ([], False)
    assert session.id not in world.store.partitions
    assert session.id not in world.store.summaries
    # The agent run trace outlives the conversation.
    run = world.store.get_run(WS, prediction.run_id)
    assert run is not None and run["sessionId"] == session.id


# -- transcript pages ----------------------------------------------------------------


def test_given_five_messages_when_paging_by_two_then_the_cursor_walks_oldest_first(
    world: World,
) -> None:
    session = world.session()
    world.store.add_turn(session.id, "q1", "a1")
    world.store.add_turn(session.id, "q2", "a2")
    world.store.add_turn(session.id, "q3", "a3")  # seqs 1..6

    pages: list[list[int]] = []
    position = None
    while True:
        page, position = world.sessions.messages(WS, session.id, limit=4, after=position)
        pages.append([m.seq for m in page])
        if position is None:
            break

    assert pages == [[1, 2, 3, 4], [5, 6]]

    first, position = world.sessions.messages(WS, session.id, limit=2)
    assert ([m.content for m in first], position) == (["q1", "a1"], {"after": 2})
    second, position = world.sessions.messages(WS, session.id, limit=2, after=position)
    assert ([m.content for m in second], position) == (["q2", "a2"], {"after": 4})
    last, position = world.sessions.messages(WS, session.id, limit=2, after=position)
    assert ([m.content for m in last], position) == (["q3", "a3"], None)


@pytest.mark.parametrize("position", [{"after": "2"}, {"after": -1}, {"after": True}, {}])
def test_given_a_position_this_service_never_issues_when_paging_then_422(
    world: World, position: dict[str, object]
) -> None:
    session = world.session()

    with pytest.raises(ValidationFailed):
        world.sessions.messages(WS, session.id, limit=2, after=position)


def test_given_seven_sessions_when_finding_by_three_then_the_pages_walk_the_listing(
    world: World,
) -> None:
    created = {world.session().id for _ in range(7)}
    world.sessions.create(WS, SessionCreate(capability_id="cap-gen", external_ref="someone-else"))

    pages: list[list[str]] = []
    position = None
    while True:
        page, position = world.sessions.find(WS, "end-user-1", 3, position)
        pages.append([s.id for s in page])
        if position is None:
            break

    everything, _ = world.sessions.find(WS, "end-user-1", 100)
    assert [sid for page in pages for sid in page] == [s.id for s in everything]
    assert set(s.id for s in everything) == created
    assert [len(page) for page in pages] == [3, 3, 1]


def test_given_no_messages_when_paging_then_an_empty_last_page(world: World) -> None:
    session = world.session()

    assert world.sessions.messages(WS, session.id, limit=50) == ([], None)


# -- context -----------------------------------------------------------------------


def test_given_a_history_and_a_summary_when_reading_context_then_it_is_the_replay_window(
    world: World,
) -> None:
    world.capability("cap-small", replay={"maxMessages": 4, "maxChars": 30, "minMessages": 1})
    session = world.session("cap-small")
    for i in range(1, 5):
        world.store.add_turn(session.id, f"question {i}", f"answer {i}")
    world.store.advance_summary(session.id, 0, Summary(text="so far: 1-4", through_seq=4))
    history = world.store.messages_of(session.id)

    context = world.sessions.context(WS, session.id)

    window = select_replay_window(
        history, ReplayPolicy(max_messages=4, max_chars=30, min_messages=1)
    )
    assert context.messages == list(window.messages)
    assert [m.seq for m in context.messages] == [6, 7, 8]  # 8 + 10 + 8 chars <= 30
    assert context.omitted_messages == window.omitted_messages == 5
    assert context.replayed_chars == window.replayed_chars
    assert context.summary == Summary(text="so far: 1-4", through_seq=4)
    assert context.tool_digests == []


def test_given_a_context_when_the_next_turn_runs_then_the_model_sees_exactly_those_messages(
    world: World,
) -> None:
    world.capability("cap-small", replay={"maxMessages": 3, "maxChars": 1_000, "minMessages": 1})
    session = world.session("cap-small")
    for i in range(1, 4):
        world.store.add_turn(session.id, f"question {i}", f"answer {i}")
    provider = FakeProvider("ok")

    context = world.sessions.context(WS, session.id)
    world.turns(provider).predict(WS, "cap-small", "next", session.id)

    assert provider.last_prompt.messages[:-1] == tuple(
        ChatMessage(m.role, m.content) for m in context.messages
    )


def test_given_an_agent_session_when_reading_context_then_only_live_replayed_digests_show(
    world: World,
) -> None:
    # SessionService.context reads the real clock (it takes no clock), so the turns are
    # stamped relative to it: one an hour and a bit ago (digest expired), one just now.
    world.capability("cap-agent", kind="agent", tools=[ToolSpec(name="lookup").model_dump()])
    session = world.session("cap-agent")
    old = FakeProvider("first", tool_calls=[ToolCall("lookup", {"q": "old"}, "stale result")])
    world.turns(old, clock=lambda: time.time() - 3_600 - 600).predict(
        WS, "cap-agent", "look it up", session.id
    )
    new = FakeProvider("second", tool_calls=[ToolCall("lookup", {"q": "new"}, "fresh result")])
    world.turns(new, clock=time.time).predict(WS, "cap-agent", "again", session.id)

    context = world.sessions.context(WS, session.id)

    assert sorted(world.store.digests_of(session.id)) == [2, 4]  # both still stored
    assert [d.seq for d in context.tool_digests] == [4]
    assert context.tool_digests[0] == world.store.digests_of(session.id)[4][0]
    assert "fresh result" in context.tool_digests[0].text
    assert [m.seq for m in context.messages] == [1, 2, 3, 4]
