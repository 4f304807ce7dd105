"""Retention (RetentionService) wired by the composition root over fakes: idle sessions
archived by the schedule's time (after re-checking the real last turn, since the head's
activity mark is coarse), archived ones purged after their window, interrupted deletions
finished after the grace period, run traces kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from convo_memory.domain.errors import SessionArchived, StoreUnavailable
from convo_memory.domain.models import Session, Summary, iso
from convo_memory.domain.turn_records import TurnRecord
from convo_memory.services.retention import RetentionPolicy, RetentionService
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import session_message

CAP = "cap-agent"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = RetentionPolicy(idle_archive_days=7, purge_after_days=30)
GRACE = timedelta(seconds=900)  # the default DELETION_GRACE_SECONDS


def at(moment: datetime) -> str:
    return iso(moment)


@pytest.fixture
def app() -> FakeApp:
    """The application with an agent capability; its clock reads ``NOW``."""
    app = fake_app(idle_archive_days=7, purge_after_days=30, deletion_grace_seconds=900)
    app.clock.now = NOW.timestamp()
    app.capability(CAP, kind="agent")
    return app


def open_session(
    app: FakeApp, session_id: str, last_turn: datetime, mark: datetime | None = None
) -> str:
    """A session whose one turn was at ``last_turn``. Its head's coarse activity mark is
    ``mark``, by default that turn's time (as the turn's touch would have left it)."""
    created = last_turn - timedelta(minutes=5)
    app.db.stores.sessions.create_session(
        Session(
            id=session_id,
            workspace_id=WS,
            capability_id=CAP,
            external_ref="end-user-1",
            principal=None,
            metadata={},
            status="active",
            created_at=at(created),
            last_active_at=at(mark or last_turn),
            message_count=0,
        )
    )
    app.db.add_turn(
        session_id, "Where is order 12345?", "It ships today.", created_at=at(last_turn)
    )
    return session_id


def agent_turn(app: FakeApp, session_id: str, moment: datetime, run_id: str) -> None:
    """An agent turn with a tool digest and a run trace, as the serving path records it."""
    session = app.db.stores.sessions.get_session(session_id)
    assert session is not None
    app.db.stores.runs.put_run(
        {"runId": run_id, "workspaceId": WS, "sessionId": session_id, "steps": []}
    )
    turn = TurnRecord(
        turn_id=f"turn-{run_id}",
        user_content="Track it",
        answer="In transit.",
        withheld=False,
        created_at=at(moment),
        digest_tools=("track_order",),
        digest_text="order 12345: in transit",
        digest_expires_at=(moment + timedelta(hours=24)).timestamp(),
        run_id=run_id,
    )
    landed = app.db.stores.turns.append_turn(session_id, session.message_count, turn)
    app.db.stores.turns.put_digest(session_id, landed.user_seq, turn)


def service(app: FakeApp, policy: RetentionPolicy | None = None) -> RetentionService:
    """The container's retention run; with ``policy`` (work bounds the deployment
    settings do not expose), one over the same store and metrics."""
    if policy is None:
        return app.container.retention
    return RetentionService(app.db.stores.retention, policy, app.metrics)


def status(app: FakeApp, session_id: str) -> str:
    session = app.db.stores.sessions.get_session(session_id)
    assert session is not None
    return session.status


# -- archive -------------------------------------------------------------------------


def test_given_sessions_idle_past_the_window_when_the_run_fires_then_exactly_those_are_archived(
    app: FakeApp,
) -> None:
    cutoff = NOW - timedelta(days=7)
    idle = open_session(app, "ses-idle", cutoff - timedelta(milliseconds=1))
    long_idle = open_session(app, "ses-long-idle", NOW - timedelta(days=20))
    on_the_boundary = open_session(app, "ses-boundary", cutoff)
    recent = open_session(app, "ses-recent", NOW - timedelta(days=1))

    report = service(app).run(NOW)

    assert {sid: status(app, sid) for sid in (idle, long_idle, on_the_boundary, recent)} == {
        idle: "archived",
        long_idle: "archived",
        on_the_boundary: "active",
        recent: "active",
    }
    assert (report.archived, report.archive_skipped, report.purged, report.more) == (2, 0, 0, False)
    assert report.activity_refreshed == 0
    assert report.now == "2026-03-01T12:00:00.000Z"
    assert report.archive_before == "2026-02-22T12:00:00.000Z"
    assert app.db.heads[idle]["archivedAt"] == report.now


def test_the_boundary_comes_from_the_given_time_not_the_clock(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=3))

    early = service(app).run(NOW)
    later = service(app).run(NOW + timedelta(days=5))

    assert (early.archived, later.archived) == (0, 1)
    assert status(app, session_id) == "archived"


def test_an_archived_session_stays_readable_and_refuses_new_turns(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=8))

    service(app).run(NOW)

    page, cursor = app.container.sessions.messages(WS, session_id, limit=10)
    assert [m.content for m in page] == ["Where is order 12345?", "It ships today."]
    assert cursor is None
    with pytest.raises(SessionArchived):
        session_message(app.container, WS, session_id, "Anything new?")
    assert app.provider.prompts == []
    assert len(app.db.messages_of(session_id)) == 2


def test_given_a_stale_activity_mark_but_a_recent_turn_then_the_mark_is_refreshed_not_archived(
    app: FakeApp,
) -> None:
    # The mark moves at most once per granularity: turns after it leave it behind.
    session_id = open_session(
        app, "ses-1", last_turn=NOW - timedelta(days=1), mark=NOW - timedelta(days=10)
    )

    report = service(app).run(NOW)

    assert status(app, session_id) == "active"
    assert (report.archived, report.archive_skipped, report.activity_refreshed) == (0, 0, 1)
    assert app.db.heads[session_id]["lastActiveAt"] == at(NOW - timedelta(days=1))
    # Refreshed to its real last turn: the next run does not even consider it ...
    again = service(app).run(NOW)
    assert (again.archived, again.archive_skipped, again.activity_refreshed) == (0, 0, 0)
    # ... until that turn itself is past the idle window.
    later = service(app).run(NOW + timedelta(days=6, milliseconds=1))
    assert (later.archived, status(app, session_id)) == (1, "archived")


def test_given_a_turn_racing_the_archive_when_the_run_fires_then_the_session_stays_active(
    app: FakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=9))
    retention = app.db.stores.retention
    archive_session = retention.archive_session

    def a_turn_lands_first(session_id: str, last_active_at: str, archived_at: str) -> bool:
        # After the index read, before the archive write: a turn on the idle session
        # moves the activity mark (before its model call), then records itself.
        app.db.stores.sessions.touch(session_id, at(NOW))
        app.db.add_turn(session_id, "still here", "hello again", created_at=at(NOW))
        return archive_session(session_id, last_active_at, archived_at)

    monkeypatch.setattr(retention, "archive_session", a_turn_lands_first)

    report = service(app).run(NOW)

    assert status(app, session_id) == "active"
    assert (report.archived, report.archive_skipped) == (0, 1)
    assert len(app.db.messages_of(session_id)) == 4
    # The turn made it recent: the next run does not even consider it.
    monkeypatch.undo()
    again = service(app).run(NOW)
    assert (again.archived, again.archive_skipped) == (0, 0)
    assert status(app, session_id) == "active"


def test_given_a_turn_racing_the_refresh_when_the_run_fires_then_the_turns_mark_stays(
    app: FakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = open_session(
        app, "ses-1", last_turn=NOW - timedelta(days=2), mark=NOW - timedelta(days=8)
    )
    retention = app.db.stores.retention
    last_turn_at = retention.last_turn_at

    def a_turn_moves_the_mark_meanwhile(session_id: str) -> tuple[int, str] | None:
        found = last_turn_at(session_id)
        app.db.stores.sessions.touch(session_id, at(NOW))
        return found

    monkeypatch.setattr(retention, "last_turn_at", a_turn_moves_the_mark_meanwhile)

    report = service(app).run(NOW)

    # The refresh is conditional on the mark it found: it never moves a newer mark back.
    assert (report.archived, report.archive_skipped, report.activity_refreshed) == (0, 1, 0)
    assert app.db.heads[session_id]["lastActiveAt"] == at(NOW)
    assert status(app, session_id) == "active"


# -- purge ---------------------------------------------------------------------------


def test_given_archived_sessions_when_their_purge_window_passes_then_only_those_are_purged(
    app: FakeApp,
) -> None:
    archived_long_ago = open_session(app, "ses-old", NOW - timedelta(days=60))
    archived_lately = open_session(app, "ses-new", NOW - timedelta(days=10))
    service(app).run(NOW - timedelta(days=40))  # archives ses-old only
    service(app).run(NOW)  # archives ses-new; ses-old archived 40 days ago -> purged

    assert not app.db.holds_session(archived_long_ago)
    assert status(app, archived_lately) == "archived"

    report = service(app).run(NOW + timedelta(days=30))  # ses-new archived exactly 30 days ago
    assert (report.purged, status(app, archived_lately)) == (0, "archived")
    report = service(app).run(NOW + timedelta(days=30, milliseconds=1))
    assert report.purged == 1 and not app.db.holds_session(archived_lately)


def test_a_purge_removes_the_whole_conversation_but_never_the_run_trace(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=50))
    agent_turn(app, session_id, NOW - timedelta(days=45), run_id="run-1")
    summary = Summary(text="customer asked about 12345", through_seq=2)
    assert app.db.stores.summaries.advance_summary(session_id, 0, summary)
    assert app.db.digests_of(session_id)
    service(app).run(NOW - timedelta(days=35))  # archived: idle since day -45
    assert status(app, session_id) == "archived"

    report = service(app).run(NOW)

    # The head, 2 turns (one item each), the digest, the summary and its version.
    assert (report.purged, report.purged_items) == (1, 1 + 2 + 1 + 1 + 1)
    assert not app.db.holds_session(session_id)
    assert app.db.stores.sessions.get_session(session_id) is None
    assert app.db.messages_of(session_id) == []
    assert app.db.digests_of(session_id) == {}
    assert app.db.stores.summaries.get_summary(session_id) is None
    assert app.db.stores.runs.get_run(WS, "run-1") == {
        "runId": "run-1",
        "workspaceId": WS,
        "sessionId": session_id,
        "steps": [],
    }


def test_a_session_is_archived_before_it_is_purged_however_long_it_was_idle(
    app: FakeApp,
) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=400))

    report = service(app).run(NOW)

    # The purge window counts from archival, so the transcript stays readable a while.
    assert (report.archived, report.purged) == (1, 0)
    assert status(app, session_id) == "archived"
    assert service(app).run(NOW + timedelta(days=29)).purged == 0
    assert service(app).run(NOW + timedelta(days=31)).purged == 1


def test_a_purge_rechecks_the_head_it_found_in_the_index(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=50))
    service(app).run(NOW - timedelta(days=40))
    archived_at = app.db.heads[session_id]["archivedAt"]
    retention = app.db.stores.retention

    assert retention.begin_purge(session_id, "2000-01-01T00:00:00.000Z", at(NOW)) is False
    assert status(app, session_id) == "archived"
    # The head goes last, and only once the session is marked deleted.
    assert retention.remove_head(session_id) is False
    assert retention.begin_purge(session_id, archived_at, at(NOW)) is True
    assert app.db.stores.sessions.get_session(session_id) is None
    assert retention.begin_purge(session_id, archived_at, at(NOW)) is False


def test_a_purge_cut_short_is_finished_by_a_later_run(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=60))
    service(app).run(NOW - timedelta(days=40))
    app.db.fail_next["delete_contents"] = StoreUnavailable("throttled")

    with pytest.raises(StoreUnavailable):
        service(app).run(NOW)  # marked deleted, then the sweep failed

    assert app.db.stores.sessions.get_session(session_id) is None
    assert len(app.db.messages_of(session_id)) == 2
    report = service(app).run(NOW + GRACE + timedelta(milliseconds=1))
    assert (report.purged, report.deletions_finished) == (0, 1)
    assert not app.db.holds_session(session_id)


# -- finishing deletions -------------------------------------------------------------


def deleted(app: FakeApp, session_id: str, moment: datetime, swept: bool) -> None:
    """A DELETE that began at ``moment``; ``swept``: it also deleted the contents (only
    the head is left), else it was cut short right after marking the session."""
    assert app.db.stores.sessions.begin_deletion(session_id, WS, at(moment))
    if swept:
        app.db.stores.sessions.delete_contents(session_id)


@pytest.mark.parametrize("swept", [False, True], ids=["marked-only", "emptied"])
def test_deletions_past_the_grace_period_are_finished_and_younger_ones_left(
    app: FakeApp, swept: bool
) -> None:
    old = open_session(app, "ses-old", NOW - timedelta(hours=1))
    young = open_session(app, "ses-young", NOW - timedelta(hours=1))
    deleted(app, old, NOW - GRACE - timedelta(milliseconds=1), swept)
    deleted(app, young, NOW - GRACE, swept)

    report = service(app).run(NOW)

    assert report.deletions_finished == 1
    assert not app.db.holds_session(old)
    # A turn already in flight may still land on the younger one: its head stays.
    assert app.db.heads[young]["status"] == "deleting"
    assert app.metrics.counts["DeletionsFinished"] == 1
    later = service(app).run(NOW + timedelta(milliseconds=1))
    assert later.deletions_finished == 1 and not app.db.holds_session(young)


@pytest.mark.parametrize("failing_step", ["delete_contents", "remove_head"])
def test_a_deletion_the_run_cannot_finish_is_finished_by_the_next_run(
    app: FakeApp, failing_step: str
) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(hours=1))
    deleted(app, session_id, NOW - timedelta(hours=1), swept=False)
    app.db.fail_next[failing_step] = StoreUnavailable("throttled")

    with pytest.raises(StoreUnavailable):
        service(app).run(NOW)

    assert app.db.heads[session_id]["status"] == "deleting"
    report = service(app).run(NOW)
    assert report.deletions_finished == 1
    assert not app.db.holds_session(session_id)


# -- runs as a whole -----------------------------------------------------------------


def test_a_rerun_with_the_same_time_changes_nothing(app: FakeApp) -> None:
    open_session(app, "ses-archive", NOW - timedelta(days=8))
    open_session(app, "ses-purge", NOW - timedelta(days=60))
    service(app).run(NOW - timedelta(days=40))
    first = service(app).run(NOW)
    snapshot = app.db.dump()

    again = service(app).run(NOW)

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
        "activityRefreshed": 0,
        "deletionsFinished": 0,
        "pausesAbandoned": 0,
        "filesExpired": 0,
        "more": False,
    }
    assert app.db.dump() == snapshot


def test_a_run_stops_at_its_bound_and_the_next_one_continues(app: FakeApp) -> None:
    ids = [open_session(app, f"ses-{n}", NOW - timedelta(days=10 + n)) for n in range(5)]
    bounded = RetentionPolicy(idle_archive_days=7, purge_after_days=30, max_archives_per_run=3)

    first = service(app, bounded).run(NOW)
    second = service(app, bounded).run(NOW)

    assert (first.archived, first.more) == (3, True)
    assert (second.archived, second.more) == (2, False)
    assert {status(app, sid) for sid in ids} == {"archived"}


def test_a_run_at_its_archive_bound_still_purges(app: FakeApp) -> None:
    open_session(app, "ses-old", NOW - timedelta(days=60))
    service(app).run(NOW - timedelta(days=40))
    for n in range(3):
        open_session(app, f"ses-{n}", NOW - timedelta(days=10))
    bounded = RetentionPolicy(idle_archive_days=7, purge_after_days=30, max_archives_per_run=1)

    report = service(app, bounded).run(NOW)

    assert (report.archived, report.purged, report.more) == (1, 1, True)
    assert not app.db.holds_session("ses-old")


def test_a_run_with_too_little_time_left_starts_nothing(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=10))

    report = service(app).run(NOW, time_left=lambda: 5.0)

    assert (report.archived, report.more) == (0, True)
    assert status(app, session_id) == "active"


def test_digests_are_left_to_ttl_and_the_run_counts_archives_and_purges(app: FakeApp) -> None:
    session_id = open_session(app, "ses-1", NOW - timedelta(days=3))
    agent_turn(app, session_id, NOW - timedelta(days=2), run_id="run-1")
    open_session(app, "ses-idle", NOW - timedelta(days=9))

    service(app).run(NOW)

    # The digest is past its 24 h window, but expiry is DynamoDB TTL's job (and the
    # read path's): the run neither reads nor deletes it.
    assert app.db.digests_of(session_id)
    assert app.metrics.counts == {"SessionsArchived": 1}


def test_now_must_carry_a_timezone(app: FakeApp) -> None:
    with pytest.raises(ValueError, match="timezone"):
        service(app).run(datetime(2026, 1, 1))
