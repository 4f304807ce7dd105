"""Erasing an end user, over fakes: the request claims at once and queues the job; the
job erases and counts exactly once whatever it is redelivered after; it reports failed
only on its last delivery; sweeps never touch a live session; a deletion queues its
sweep for when no write in flight can land."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from convo_memory.api import ErasureRequest
from convo_memory.domain.erasures import Erasure
from convo_memory.domain.errors import (
    ErasureNotFound,
    SessionNotFound,
    StoreUnavailable,
)
from convo_memory.domain.jobs import ErasureJob, SweepJob
from convo_memory.domain.turn_records import TurnRecord
from convo_memory.services.erasure_policy import ErasureIncomplete, ErasurePolicy
from convo_memory.services.erasures import ErasureService
from tests.fakes.app import WS, FakeApp, fake_app

REF = "end-user-1"


@pytest.fixture
def app() -> FakeApp:
    app = fake_app()
    app.capability("cap-gen")
    app.capability("cap-agent", kind="agent")
    return app


def request(app: FakeApp, traces: str = "keep", ws: str = WS, ref: str = REF) -> Erasure:
    body = ErasureRequest.model_validate({"externalRef": ref, "traces": traces})
    return app.container.erasures.request(ws, body.external_ref, body.traces)


def the_job(app: FakeApp, erasure: Erasure) -> ErasureJob:
    (job,) = [
        ErasureJob.model_validate(body)
        for body in app.erasure_queue.bodies
        if body.get("erasureId") == erasure.id and body["kind"] == "erase"
    ]
    return job


def with_run(app: FakeApp, session_id: str, run_id: str) -> None:
    """A turn of the session that names its agent run, and the run's trace."""
    app.db.runs[run_id] = f'{{"runId": "{run_id}", "workspaceId": "{WS}", "status": "ok"}}'
    app.container.adapters.stores.turns.append_turn(
        session_id,
        0,
        TurnRecord("t-" + run_id, "hi", "hello", False, "2025-01-01T00:00:00.000Z", run_id=run_id),
    )


def test_given_sessions_when_an_erasure_is_requested_then_they_are_gone_at_once(
    app: FakeApp,
) -> None:
    erased = [app.session("cap-gen"), app.session("cap-agent")]
    other_user = app.session("cap-gen", external_ref="end-user-2")
    app.capability("cap-gen", ws="ws_beta")
    other_workspace = app.session("cap-gen", ws="ws_beta")

    erasure = request(app)

    assert (erasure.status, erasure.external_ref, erasure.traces) == ("pending", REF, "keep")
    assert app.erasure_queue.sent == [
        ({"kind": "erase", "workspaceId": WS, "erasureId": erasure.id}, 0)
    ]
    for session_id in erased:
        with pytest.raises(SessionNotFound):
            app.container.sessions.get(WS, session_id)
    assert app.container.sessions.get(WS, other_user).external_ref == "end-user-2"
    assert app.container.sessions.get("ws_beta", other_workspace).external_ref == REF
    assert app.container.erasures.get(WS, erasure.id) == erasure
    with pytest.raises(ErasureNotFound):
        app.container.erasures.get("ws_beta", erasure.id)


def test_given_no_queue_takes_the_job_when_requested_then_it_fails_and_leaves_nothing(
    app: FakeApp,
) -> None:
    session_id = app.session("cap-gen")
    app.erasure_queue.fail_with = StoreUnavailable("SQS down")

    with pytest.raises(StoreUnavailable):
        request(app)

    assert app.db.erasures == {}
    assert app.container.sessions.get(WS, session_id).id == session_id  # not claimed


@pytest.mark.parametrize("traces", ["keep", "erase"])
def test_given_a_requested_erasure_when_its_job_runs_then_it_is_done_and_counted(
    app: FakeApp, traces: str
) -> None:
    sessions = [app.session("cap-agent") for _ in range(3)]
    with_run(app, sessions[0], "run_a")
    with_run(app, sessions[1], "run_b")
    erasure = request(app, traces)

    done = app.container.erasures.run(the_job(app, erasure))

    assert done is not None and done.status == "done" and done.finished_at is not None
    assert done.sessions_erased == 3
    kept = {"run_a", "run_b"} & set(app.db.runs)
    if traces == "keep":
        assert (done.traces_kept, done.traces_erased, kept) == (2, 0, {"run_a", "run_b"})
    else:
        assert (done.traces_kept, done.traces_erased, kept) == (0, 2, set())
    assert not any(app.db.holds_session(session_id) for session_id in sessions)
    # A sweep for the erased sessions and the last one, both once no write can land.
    sweeps = [(body, delay) for body, delay in app.erasure_queue.sent if body["kind"] == "sweep"]
    assert {delay for _, delay in sweeps} == {900}
    assert sorted(sweeps[0][0]["sessionIds"]) == sorted(sessions)
    assert sweeps[-1][0]["recheck"] is True
    assert app.metrics.counts["ErasuresInFlight"] == 0  # +1 requested, -1 done


def test_given_a_done_erasure_when_its_job_is_delivered_again_then_nothing_changes(
    app: FakeApp,
) -> None:
    app.session("cap-gen")
    erasure = request(app)
    job = the_job(app, erasure)
    first = app.container.erasures.run(job)
    writes = app.db.writes()

    again = app.container.erasures.run(job)

    assert again == first
    assert app.db.writes() == writes
    assert app.metrics.counts["ErasuresInFlight"] == 0


def test_given_a_job_failing_every_time_then_it_is_failed_only_on_its_last_delivery(
    app: FakeApp,
) -> None:
    session_id = app.session("cap-gen")
    erasure = request(app)
    job = the_job(app, erasure)
    app.db.fail_always["remove_session"] = StoreUnavailable("throttled")

    with pytest.raises(StoreUnavailable):
        app.container.erasures.run(job, last_delivery=False)
    running = app.container.erasures.get(WS, erasure.id)
    with pytest.raises(StoreUnavailable):
        app.container.erasures.run(job, last_delivery=True)
    failed = app.container.erasures.get(WS, erasure.id)

    assert running.status == "running"
    assert failed.status == "failed" and failed.finished_at is not None
    assert app.metrics.counts["ErasureFailed"] == 1
    with pytest.raises(SessionNotFound):  # still unreadable while it waits
        app.container.sessions.get(WS, session_id)

    del app.db.fail_always["remove_session"]
    redriven = app.container.erasures.run(job)

    assert redriven is not None and (redriven.status, redriven.sessions_erased) == ("done", 1)
    assert app.metrics.counts["ErasuresInFlight"] == 0  # +1, -1 failed, +1 redriven, -1


def test_given_a_job_out_of_time_then_it_stops_and_its_next_delivery_finishes(
    app: FakeApp,
) -> None:
    sessions = [app.session("cap-gen") for _ in range(2)]
    erasure = request(app)
    job = the_job(app, erasure)

    with pytest.raises(ErasureIncomplete):
        app.container.erasures.run(job, time_left=lambda: 1.0)
    assert app.container.erasures.get(WS, erasure.id).status == "running"

    done = app.container.erasures.run(job, time_left=lambda: 600.0)

    assert done is not None and (done.status, done.sessions_erased) == ("done", 2)
    assert not any(app.db.holds_session(session_id) for session_id in sessions)


def test_given_two_erasures_of_one_end_user_then_each_session_is_counted_once(
    app: FakeApp,
) -> None:
    for _ in range(3):
        app.session("cap-gen")
    first, second = request(app), request(app)

    one = app.container.erasures.run(the_job(app, second))
    two = app.container.erasures.run(the_job(app, first))

    assert one is not None and two is not None
    # The first request claimed them all; the second found them claimed.
    assert (two.sessions_erased, one.sessions_erased) == (3, 0)


def test_given_a_session_opened_after_the_request_then_the_erasure_leaves_it(
    app: FakeApp,
) -> None:
    erasure = request(app)
    app.clock.advance(1)
    later = app.session("cap-gen")

    done = app.container.erasures.run(the_job(app, erasure))

    assert done is not None and done.sessions_erased == 0
    assert app.container.sessions.get(WS, later).id == later


def test_given_a_late_write_when_swept_then_it_goes_and_a_live_session_is_never_touched(
    app: FakeApp,
) -> None:
    erased, live = app.session("cap-gen"), app.session("cap-gen", external_ref="end-user-2")
    erasure = request(app, "erase")
    app.container.erasures.run(the_job(app, erasure))
    with_run(app, erased, "run_late")  # a turn that was in flight lands now
    app.db.add_turn(live, "hello", "hi")

    removed = app.container.erasures.sweep(
        SweepJob(
            workspace_id=WS, session_ids=(erased, live), erasure_id=erasure.id, erase_traces=True
        )
    )

    assert removed == 1
    assert not app.db.holds_session(erased) and "run_late" not in app.db.runs
    assert app.container.erasures.get(WS, erasure.id).traces_erased == 1
    assert len(app.db.messages_of(live)) == 2


@pytest.mark.parametrize(("grace", "delay"), [(400, 400), (900, 900), (3600, 900)])
def test_given_a_deletion_then_its_sweep_is_queued_for_when_no_write_can_land(
    grace: int, delay: int
) -> None:
    app = fake_app(deletion_grace_seconds=grace)
    app.capability("cap-gen")
    session_id = app.session("cap-gen", principal={"user_id": "u_913"})

    app.container.sessions.delete(WS, session_id)

    assert app.erasure_queue.sent == [
        (
            {
                "kind": "sweep",
                "workspaceId": WS,
                "sessionIds": [session_id],
                "erasureId": None,
                "eraseTraces": False,
                "recheck": False,
            },
            delay,
        )
    ]
    # The tombstone holds ids, status and times only.
    tombstone = {"workspaceId", "capabilityId", "status", "createdAt", "lastActiveAt", "deletedAt"}
    assert set(app.db.heads[session_id]) == tombstone


def test_given_an_erased_session_when_deleted_then_it_is_not_found(app: FakeApp) -> None:
    session_id = app.session("cap-gen")
    request(app)

    with pytest.raises(SessionNotFound):
        app.container.sessions.delete(WS, session_id)


# -- turns in flight ------------------------------------------------------------------


class TurnsInFlight:
    """The workspace's slow turns as the tracker reports them; ``ending`` says at which
    poll each of them ends (``None``: never, it can only expire). ``on_call`` runs at
    each look."""

    def __init__(
        self,
        app: FakeApp,
        ending: dict[str, int | None],
        expires_in: float = 60,
        on_call: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        self.ending = ending
        self.expires = {turn: app.clock() + expires_in for turn in ending}
        self.polls = 0
        self.on_call = on_call

    def __call__(self, workspace_id: str) -> dict[str, float]:
        assert workspace_id == WS
        self.on_call()
        now = self.app.clock()
        return {
            turn: self.expires[turn]
            for turn, ends in self.ending.items()
            if (ends is None or self.polls < ends) and self.expires[turn] >= now
        }


def waiting_service(
    app: FakeApp, tracker: TurnsInFlight | None, sleeps: list[float]
) -> ErasureService:
    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        app.clock.advance(seconds)
        if tracker is not None and seconds == ErasurePolicy().in_flight_poll_seconds:
            tracker.polls += 1

    return ErasureService(
        app.db.stores.erasures,
        app.erasure_queue,
        app.metrics,
        ErasurePolicy(turn_budget_seconds=243),
        app.clock,
        sleep,
        turns_in_flight=tracker,
    )


def test_given_turns_in_flight_when_the_job_runs_then_it_erases_once_they_have_ended(
    app: FakeApp,
) -> None:
    session_id = app.session("cap-agent")
    erasure = request(app, "erase")
    held: list[bool] = []  # nothing is erased while it waits
    tracker = TurnsInFlight(
        app, {"a": 2, "b": 4}, on_call=lambda: held.append(app.db.holds_session(session_id))
    )
    sleeps: list[float] = []

    done = waiting_service(app, tracker, sleeps).run(the_job(app, erasure))

    assert done is not None and done.status == "done" and done.sessions_erased == 1
    assert tracker.polls == 4 and all(held) and len(held) == 5
    assert not app.db.holds_session(session_id)
    # First a second and a half after the claims (and the index's two seconds).
    assert sleeps[0] == 2.0


def test_given_a_turn_that_never_ends_then_its_expiry_bounds_the_wait(app: FakeApp) -> None:
    app.session("cap-gen")
    erasure = request(app)
    tracker = TurnsInFlight(app, {"killed": None}, expires_in=10)
    sleeps: list[float] = []

    done = waiting_service(app, tracker, sleeps).run(the_job(app, erasure))

    assert done is not None and done.status == "done"
    assert 7 <= tracker.polls <= 9  # about ten seconds from the request, then it stops counting


def test_given_no_tracked_turns_then_the_job_waits_the_turn_budget(app: FakeApp) -> None:
    app.session("cap-gen")
    erasure = request(app)
    sleeps: list[float] = []

    done = waiting_service(app, None, sleeps).run(the_job(app, erasure))

    assert done is not None and done.status == "done"
    assert 243 in sleeps


@pytest.mark.parametrize(
    ("idle_seconds", "waited"),
    [
        (0, 243.0),  # active just now: a turn may still be writing, for the whole budget
        (3600 + 100, 243 + 5 - 100),  # the mark moves hourly: a turn began in that hour
        (3600 + 243 + 5, 0.0),  # idle longer than an hour and a turn: nothing in flight
        (86_400, 0.0),
    ],
)
def test_given_no_tracked_turns_then_the_wait_ends_when_no_turn_can_still_write(
    app: FakeApp, idle_seconds: float, waited: float
) -> None:
    session_id = app.session("cap-gen")
    app.clock.advance(idle_seconds)  # the session's activity mark is where it was
    erasure = request(app)
    sleeps: list[float] = []

    done = waiting_service(app, None, sleeps).run(the_job(app, erasure))

    assert done is not None and done.status == "done" and done.sessions_erased == 1
    assert not app.db.holds_session(session_id)
    # After the claims' own settling, the one wait for turns in flight.
    assert sleeps[-1] == pytest.approx(waited, abs=2.5)
    assert max(sleeps) <= 243


def test_given_an_end_user_without_sessions_then_the_job_waits_for_nothing(
    app: FakeApp,
) -> None:
    erasure = request(app)
    tracker = TurnsInFlight(app, {"elsewhere": None})
    sleeps: list[float] = []

    done = waiting_service(app, tracker, sleeps).run(the_job(app, erasure))

    assert done is not None and done.status == "done" and done.sessions_erased == 0
    assert tracker.polls == 0 and 243 not in sleeps


def test_given_turns_outlasting_the_invocation_then_the_job_resumes_later(
    app: FakeApp,
) -> None:
    session_id = app.session("cap-gen")
    erasure = request(app)
    tracker = TurnsInFlight(app, {"long": 30}, expires_in=300)
    service = waiting_service(app, tracker, [])
    ends = app.clock() + 40

    with pytest.raises(ErasureIncomplete):
        service.run(the_job(app, erasure), time_left=lambda: ends - app.clock())

    assert app.container.erasures.get(WS, erasure.id).status == "running"
    assert app.db.holds_session(session_id)  # claimed, not erased yet
    done = service.run(the_job(app, erasure))
    assert done is not None and done.status == "done" and not app.db.holds_session(session_id)
