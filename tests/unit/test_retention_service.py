"""Retention (RetentionService) over the in-memory store: idle sessions archived by the
schedule's time, archived ones purged after their window, run traces kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from convo_memory.domain.errors import SessionArchived
from convo_memory.domain.models import Session, Summary, iso
from convo_memory.domain.turn_records import TurnRecord
from convo_memory.services.retention import RetentionPolicy, RetentionService
from tests.fakes.in_memory_store import FakeMetrics, InMemoryStore

WS = "ws_alpha"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = RetentionPolicy(idle_archive_days=7, purge_after_days=30)


def at(moment: datetime) -> str:
    return iso(moment)


def open_session(store: InMemoryStore, session_id: str, last_active: datetime) -> str:
    """A session whose last turn was at ``last_active`` (one turn recorded then)."""
    created = at(last_active - timedelta(minutes=5))
    store.create_session(
        Session(
            id=session_id,
            workspace_id=WS,
            capability_id="cap-agent",
            external_ref="end-user-1",
            principal=None,
            metadata={},
            status="active",
            created_at=created,
            last_active_at=created,
            message_count=0,
        )
    )
    store.add_turn(
        session_id, "Where is order 12345?", "It ships today.", created_at=at(last_active)
    )
    return session_id


def agent_turn(store: InMemoryStore, session_id: str, moment: datetime, run_id: str) -> None:
    """An agent turn with a tool digest and a run trace, as the serving path records it."""
    head = store.get_session(session_id)
    assert head is not None
    store.put_run({"runId": run_id, "workspaceId": WS, "sessionId": session_id, "steps": []})
    store.append_turn(
        session_id,
        head.message_count,
        TurnRecord(
            turn_id=f"turn-{run_id}",
            user_content="Track it",
            answer="In transit.",
            withheld=False,
            created_at=at(moment),
            digest_tools=("track_order",),
            digest_text="order 12345: in transit",
            digest_expires_at=(moment + timedelta(hours=24)).timestamp(),
            run_id=run_id,
        ),
    )


def service(store: InMemoryStore, policy: RetentionPolicy = POLICY) -> RetentionService:
    return RetentionService(store, policy)


def status(store: InMemoryStore, session_id: str) -> str:
    session = store.get_session(session_id)
    assert session is not None
    return session.status


# -- archive -------------------------------------------------------------------------


def test_given_sessions_idle_past_the_window_when_the_run_fires_then_exactly_those_are_archived() -> (
    None
):
    store = InMemoryStore()
    cutoff = NOW - timedelta(days=7)
    idle = open_session(store, "ses-idle", cutoff - timedelta(milliseconds=1))
    long_idle = open_session(store, "ses-long-idle", NOW - timedelta(days=20))
    on_the_boundary = open_session(store, "ses-boundary", cutoff)
    recent = open_session(store, "ses-recent", NOW - timedelta(days=1))

    report = service(store).run(NOW)

    assert {sid: status(store, sid) for sid in (idle, long_idle, on_the_boundary, recent)} == {
        idle: "archived",
        long_idle: "archived",
        on_the_boundary: "active",
        recent: "active",
    }
    assert (report.archived, report.archive_skipped, report.purged, report.more) == (2, 0, 0, False)
    assert report.now == "2026-03-01T12:00:00.000Z"
    assert report.archive_before == "2026-02-22T12:00:00.000Z"
    assert store.partitions[idle].head["archivedAt"] == report.now


def test_the_boundary_comes_from_the_given_time_not_the_clock() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=3))

    early = service(store).run(NOW)
    later = service(store).run(NOW + timedelta(days=5))

    assert (early.archived, later.archived) == (0, 1)
    assert status(store, session_id) == "archived"


def test_an_archived_session_stays_readable_and_refuses_new_turns() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=8))

    service(store).run(NOW)

    assert [m.content for m in store.messages_of(session_id)] == [
        "Where is order 12345?",
        "It ships today.",
    ]
    page, more = store.list_messages(session_id, 0, 10)
    assert len(page) == 2 and more is False
    with pytest.raises(SessionArchived):
        store.add_turn(session_id, "Anything new?", "...")
    assert len(store.messages_of(session_id)) == 2


class TurnRacesTheArchive(InMemoryStore):
    """A turn lands after the index was read and before the archive write."""

    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool:
        self.add_turn(session_id, "still here", "hello again", created_at=at(NOW))
        return super().archive_session(session_id, last_active_at, archived_at)


def test_given_a_turn_racing_the_archive_when_the_run_fires_then_the_session_stays_active() -> None:
    store = TurnRacesTheArchive()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=9))

    report = service(store).run(NOW)

    assert status(store, session_id) == "active"
    assert (report.archived, report.archive_skipped) == (0, 1)
    assert len(store.messages_of(session_id)) == 4
    # The turn made it recent: the next run does not even consider it.
    again = service(store).run(NOW)
    assert (again.archived, again.archive_skipped) == (0, 0)
    assert status(store, session_id) == "active"


# -- purge ---------------------------------------------------------------------------


def test_given_archived_sessions_when_their_purge_window_passes_then_only_those_are_purged() -> (
    None
):
    store = InMemoryStore()
    archived_long_ago = open_session(store, "ses-old", NOW - timedelta(days=60))
    archived_lately = open_session(store, "ses-new", NOW - timedelta(days=10))
    service(store).run(NOW - timedelta(days=40))  # archives ses-old only
    service(store).run(NOW)  # archives ses-new; ses-old archived 40 days ago -> purged

    assert archived_long_ago not in store.partitions
    assert status(store, archived_lately) == "archived"

    report = service(store).run(NOW + timedelta(days=30))  # ses-new archived exactly 30 days ago
    assert (report.purged, status(store, archived_lately)) == (0, "archived")
    report = service(store).run(NOW + timedelta(days=30, milliseconds=1))
    assert report.purged == 1 and archived_lately not in store.partitions


def test_a_purge_removes_the_whole_conversation_but_never_the_run_trace() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=50))
    agent_turn(store, session_id, NOW - timedelta(days=45), run_id="run-1")
    store.advance_summary(session_id, 0, Summary(text="customer asked about 12345", through_seq=2))
    assert store.digests_of(session_id)
    service(store).run(NOW - timedelta(days=35))  # archived: idle since day -45
    assert status(store, session_id) == "archived"

    report = service(store).run(NOW)

    # The head, 4 messages, the digest, 2 turn markers and the summary.
    assert (report.purged, report.purged_items) == (1, 1 + 4 + 1 + 2 + 1)
    assert store.get_session(session_id) is None
    assert store.messages_of(session_id) == []
    assert store.digests_of(session_id) == {}
    assert store.get_summary(session_id) is None
    assert store.get_run(WS, "run-1") == {
        "runId": "run-1",
        "workspaceId": WS,
        "sessionId": session_id,
        "steps": [],
    }


def test_a_session_is_archived_before_it_is_purged_however_long_it_was_idle() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=400))

    report = service(store).run(NOW)

    # The purge window counts from archival, so the transcript stays readable a while.
    assert (report.archived, report.purged) == (1, 0)
    assert status(store, session_id) == "archived"
    assert service(store).run(NOW + timedelta(days=29)).purged == 0
    assert service(store).run(NOW + timedelta(days=31)).purged == 1


def test_a_purge_rechecks_the_head_it_found_in_the_index() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=50))
    service(store).run(NOW - timedelta(days=40))
    archived_at = store.partitions[session_id].head["archivedAt"]

    assert store.purge_session(session_id, "2000-01-01T00:00:00.000Z") is None
    assert store.get_session(session_id) is not None
    assert store.purge_session(session_id, archived_at) == 1 + 2 + 1
    assert store.purge_session(session_id, archived_at) is None


# -- runs as a whole -----------------------------------------------------------------


def test_a_rerun_with_the_same_time_changes_nothing() -> None:
    store = InMemoryStore()
    open_session(store, "ses-archive", NOW - timedelta(days=8))
    open_session(store, "ses-purge", NOW - timedelta(days=60))
    service(store).run(NOW - timedelta(days=40))
    first = service(store).run(NOW)
    snapshot = store.dump()

    again = service(store).run(NOW)

    assert (first.archived, first.purged) == (1, 1)
    assert again.to_dict() | {"now": None} == {
        "now": None,
        "archiveBefore": first.archive_before,
        "purgeBefore": first.purge_before,
        "archived": 0,
        "archiveSkipped": 0,
        "purged": 0,
        "purgedItems": 0,
        "purgeSkipped": 0,
        "more": False,
    }
    assert store.dump() == snapshot


def test_a_run_stops_at_its_bound_and_the_next_one_continues() -> None:
    store = InMemoryStore()
    ids = [open_session(store, f"ses-{n}", NOW - timedelta(days=10 + n)) for n in range(5)]
    bounded = RetentionPolicy(idle_archive_days=7, purge_after_days=30, max_archives_per_run=3)

    first = service(store, bounded).run(NOW)
    second = service(store, bounded).run(NOW)

    assert (first.archived, first.more) == (3, True)
    assert (second.archived, second.more) == (2, False)
    assert {status(store, sid) for sid in ids} == {"archived"}


def test_a_run_at_its_archive_bound_still_purges() -> None:
    store = InMemoryStore()
    open_session(store, "ses-old", NOW - timedelta(days=60))
    service(store).run(NOW - timedelta(days=40))
    for n in range(3):
        open_session(store, f"ses-{n}", NOW - timedelta(days=10))
    bounded = RetentionPolicy(idle_archive_days=7, purge_after_days=30, max_archives_per_run=1)

    report = service(store, bounded).run(NOW)

    assert (report.archived, report.purged, report.more) == (1, 1, True)
    assert "ses-old" not in store.partitions


def test_a_run_with_too_little_time_left_starts_nothing() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=10))

    report = service(store).run(NOW, time_left=lambda: 5.0)

    assert (report.archived, report.more) == (0, True)
    assert status(store, session_id) == "active"


def test_digests_are_left_to_ttl_and_the_run_counts_archives_and_purges() -> None:
    store = InMemoryStore()
    session_id = open_session(store, "ses-1", NOW - timedelta(days=3))
    agent_turn(store, session_id, NOW - timedelta(days=2), run_id="run-1")
    open_session(store, "ses-idle", NOW - timedelta(days=9))
    metrics = FakeMetrics()

    RetentionService(store, POLICY, metrics).run(NOW)

    # The digest is past its 24 h window, but expiry is DynamoDB TTL's job (and the
    # read path's): the run neither reads nor deletes it.
    assert store.digests_of(session_id)
    assert metrics.counts == {"SessionsArchived": 1}


def test_now_must_carry_a_timezone() -> None:
    with pytest.raises(ValueError, match="timezone"):
        service(InMemoryStore()).run(datetime(2026, 1, 1))
