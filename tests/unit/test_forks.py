"""Forks (ForkService) wired by the composition root over fakes: a fork is a session of
the parent's end user whose history is the parent's messages up to its point; it sees
only its own past; it lives independently of its parent; it is created holding what a
turn reads, the rest copied by a job (or by the parent's deletion)."""

from __future__ import annotations

from typing import Any

import pytest

from convo_memory.api import SessionCreate
from convo_memory.domain.errors import RateLimited, SessionNotFound, ValidationFailed
from convo_memory.domain.forks import COPIES_DUE_RETRY_SECONDS, MAX_COPIES_DUE
from convo_memory.domain.jobs import ForkCopyJob
from convo_memory.domain.models import Recall, Session, Summary
from convo_memory.services.forks import ForkService
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.prompts import nonce_blind
from tests.support.turns import session_message

OTHER_WS = "ws_beta"
PRINCIPAL = {"tenant_id": "t-1", "user_id": "u-7"}
# Two messages replayed: a fork copies one turn when it is created.
SHORT = {"maxMessages": 2, "maxChars": 10_000, "minMessages": 1}


class Transcriber:
    """A summarizer that keeps every message it folds, one line each."""

    def summarize(self, previous: str | None, messages: list[tuple[str, str]], _: int) -> str:
        lines = [previous] if previous else []
        return "\n".join(lines + [f"{role}: {content}" for role, content in messages])


@pytest.fixture
def app() -> FakeApp:
    app = fake_app(
        provider=FakeProvider(lambda prompt: f"answer to {prompt.user_input}"),
        summarizer=Transcriber(),
    )
    app.capability("cap-gen")
    app.capability("cap-short", replay=SHORT)
    return app


def conversation(app: FakeApp, turns: int, cap: str = "cap-gen", **session: Any) -> Session:
    body = SessionCreate(
        capability_id=cap,
        external_ref="end-user-1",
        principal=session.get("principal", PRINCIPAL),
        metadata=session.get("metadata", {"channel": "web"}),
    )
    opened = app.container.sessions.create(WS, body.new_session())
    say(app, opened.id, *(f"message {i}" for i in range(1, turns + 1)))
    return opened


def say(app: FakeApp, session_id: str, *inputs: str) -> None:
    for text in inputs:
        assert session_message(app.container, WS, session_id, text).recorded


def contents(app: FakeApp, session_id: str) -> list[tuple[int, str]]:
    messages, _ = app.container.sessions.messages(WS, session_id, limit=100)
    return [(m.seq, m.content) for m in messages]


def copy_jobs(app: FakeApp) -> list[ForkCopyJob]:
    return [
        ForkCopyJob.model_validate(body)
        for body in app.fork_copy_queue.bodies
        if body.get("kind") == "fork_copy"
    ]


# -- what a fork is ---------------------------------------------------------------------


def test_a_fork_is_a_session_of_the_parents_end_user_with_its_messages_up_to_the_point(
    app: FakeApp,
) -> None:
    parent = conversation(app, 4)

    fork = app.container.forks.fork(WS, parent.id, 4)

    assert fork.fork_of is not None
    assert (fork.fork_of.session_id, fork.fork_of.at_seq) == (parent.id, 4)
    assert (fork.capability_id, fork.external_ref, fork.principal, fork.metadata) == (
        "cap-gen",
        "end-user-1",
        PRINCIPAL,
        {"channel": "web"},
    )
    assert (fork.status, fork.message_count, fork.session_key) == ("active", 4, None)
    assert fork.fence_nonce and fork.fence_nonce != parent.fence_nonce
    assert app.container.sessions.get(WS, fork.id) == fork
    assert contents(app, fork.id) == contents(app, parent.id)[:4]
    assert fork.to_json_dict()["forkOf"] == {"sessionId": parent.id, "atSeq": 4}
    assert app.container.sessions.get(WS, parent.id).to_json_dict()["forkOf"] is None


def test_a_fork_at_zero_inherits_nothing_and_given_metadata_replaces_the_parents(
    app: FakeApp,
) -> None:
    parent = conversation(app, 2)

    fork = app.container.forks.fork(WS, parent.id, 0, {"edited": True})

    assert (fork.message_count, fork.metadata) == (0, {"edited": True})
    assert contents(app, fork.id) == []
    say(app, fork.id, "a new start")
    assert contents(app, fork.id) == [(1, "a new start"), (2, "answer to a new start")]


@pytest.mark.parametrize("at_seq", [-2, 1, 3, 6, 10])
def test_a_point_that_is_not_a_recorded_answer_is_refused_and_nothing_is_stored(
    app: FakeApp, at_seq: int
) -> None:
    parent = conversation(app, 2)
    heads = set(app.db.heads)

    with pytest.raises(ValidationFailed):
        app.container.forks.fork(WS, parent.id, at_seq)

    assert set(app.db.heads) == heads
    assert app.fork_copy_queue.bodies == []


def test_a_missing_deleted_or_other_workspaces_parent_is_not_found(app: FakeApp) -> None:
    parent = conversation(app, 2)
    forks = app.container.forks

    with pytest.raises(SessionNotFound):
        forks.fork(OTHER_WS, parent.id, 2)
    with pytest.raises(SessionNotFound):
        forks.fork(WS, "ses_missing", 0)
    app.container.sessions.delete(WS, parent.id)
    with pytest.raises(SessionNotFound):
        forks.fork(WS, parent.id, 2)


def test_an_archived_parent_may_be_forked_and_its_fork_takes_turns(app: FakeApp) -> None:
    parent = conversation(app, 2)
    app.db.set_status(parent.id, "archived")

    fork = app.container.forks.fork(WS, parent.id, 2)
    say(app, fork.id, "go on")

    assert fork.status == "active"
    assert contents(app, fork.id)[-1] == (4, "answer to go on")


# -- a fork sees only its own past ----------------------------------------------------------


def test_a_turn_on_a_fork_is_sent_what_a_session_with_that_transcript_would_be_sent(
    app: FakeApp,
) -> None:
    parent = conversation(app, 3)
    twin = conversation(app, 2)  # the same first two turns, and nothing else
    fork = app.container.forks.fork(WS, parent.id, 4)

    say(app, fork.id, "and then?")
    say(app, twin.id, "and then?")

    on_fork, on_twin = app.provider.prompts[-2], app.provider.prompts[-1]
    assert nonce_blind(on_fork) == nonce_blind(on_twin)
    assert "message 3" not in str(on_fork)


def test_the_parents_later_turns_and_the_forks_turns_never_meet(app: FakeApp) -> None:
    parent = conversation(app, 2)
    fork = app.container.forks.fork(WS, parent.id, 2)

    say(app, parent.id, "parent goes on")
    say(app, fork.id, "fork goes elsewhere")
    say(app, parent.id, "parent again")

    assert contents(app, fork.id) == [
        (1, "message 1"),
        (2, "answer to message 1"),
        (3, "fork goes elsewhere"),
        (4, "answer to fork goes elsewhere"),
    ]
    assert "fork goes elsewhere" not in str(app.provider.prompts[-1])
    assert [seq for seq, _ in contents(app, parent.id)] == list(range(1, 9))


def test_a_fork_starts_from_the_newest_summary_version_that_ends_at_or_before_its_point(
    app: FakeApp,
) -> None:
    parent = conversation(app, 4, cap="cap-short")
    summaries = app.db.stores.summaries
    assert summaries.advance_summary(parent.id, 0, Summary(text="up to 2", through_seq=2))
    assert summaries.advance_summary(parent.id, 2, Summary(text="up to 6", through_seq=6))

    early = app.container.forks.fork(WS, parent.id, 4)
    late = app.container.forks.fork(WS, parent.id, 8)
    say(app, early.id, "what do you know?")

    assert app.db.summaries[early.id] == Summary(text="up to 2", through_seq=2)
    assert app.db.summaries[late.id] == Summary(text="up to 6", through_seq=6)
    assert "up to 2" in app.provider.prompts[-1].system
    assert "up to 6" not in app.provider.prompts[-1].system


def test_a_forks_summary_folds_its_own_past_only(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")
    fork = app.container.forks.fork(WS, parent.id, 4)
    say(app, fork.id, "fork 1", "fork 2")

    app.container.summaries.fold(WS, fork.id)
    app.container.summaries.fold(WS, parent.id)

    fork_summary, parent_summary = app.db.summaries[fork.id], app.db.summaries[parent.id]
    assert "message 1" in fork_summary.text and "fork 1" in fork_summary.text
    assert "message 3" not in fork_summary.text
    assert "message 3" in parent_summary.text and "fork 1" not in parent_summary.text


def test_a_new_fork_asks_for_a_summary_run(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")
    app.summary_queue.sent.clear()

    fork = app.container.forks.fork(WS, parent.id, 6)

    assert app.summary_queue.bodies == [{"workspaceId": WS, "sessionId": fork.id}]


def test_a_fork_carries_the_parents_recall_unless_one_of_its_sources_was_deleted(
    app: FakeApp,
) -> None:
    source = conversation(app, 1)
    parent = conversation(app, 1)
    recall = Recall(text="earlier: message 1", from_sessions=[source.id])
    app.db.heads[parent.id]["recall"] = recall.model_dump_json(by_alias=True)

    kept = app.container.forks.fork(WS, parent.id, 2)
    app.container.sessions.delete(WS, source.id)
    dropped = app.container.forks.fork(WS, parent.id, 2)

    assert app.container.sessions.get(WS, kept.id).recall == recall
    assert app.container.sessions.get(WS, dropped.id).recall is None


# -- copying the rest -------------------------------------------------------------------------


def test_a_fork_holds_what_a_turn_reads_and_a_job_copies_the_rest(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")

    fork = app.container.forks.fork(WS, parent.id, 8)

    assert sorted(app.db.turns[fork.id]) == [7]  # the one turn a turn's read takes
    assert [seq for seq, _ in contents(app, fork.id)] == list(range(1, 9))  # via the parent
    [job] = copy_jobs(app)
    assert (job.parent_id, job.fork_id) == (parent.id, fork.id)
    assert app.container.forks.copy(job) == "done"
    assert sorted(app.db.turns[fork.id]) == [1, 3, 5, 7]
    assert app.db.fork_markers.get(parent.id) == {}
    assert app.container.forks.copy(job) == "done"  # a duplicate delivery changes nothing
    assert sorted(app.db.turns[fork.id]) == [1, 3, 5, 7]


def test_a_copy_not_queued_is_finished_by_the_parents_deletion(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")
    app.fork_copy_queue.fail_with = RuntimeError("SQS down")

    fork = app.container.forks.fork(WS, parent.id, 8)
    app.fork_copy_queue.fail_with = None
    app.container.sessions.delete(WS, parent.id)

    assert app.metrics.counts["ForkCopyNotQueued"] == 1
    assert [seq for seq, _ in contents(app, fork.id)] == list(range(1, 9))
    assert parent.id not in app.db.turns
    assert parent.id not in app.db.kept_versions
    say(app, fork.id, "still here?")
    assert contents(app, fork.id)[-1] == (10, "answer to still here?")


def test_the_copy_job_of_a_deleted_fork_does_nothing(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")
    fork = app.container.forks.fork(WS, parent.id, 8)
    [job] = copy_jobs(app)

    app.container.sessions.delete(WS, fork.id)

    assert app.container.forks.copy(job) == "gone"
    assert fork.id not in app.db.turns
    assert app.db.fork_markers.get(parent.id) == {}


def test_a_fork_of_a_fork_whose_copy_is_due_is_made_without_that_copy(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")
    child = app.container.forks.fork(WS, parent.id, 8)
    app.settle()

    grandchild = app.container.forks.fork(WS, child.id, 6)

    # Bounded work: the child's copy is still due, nothing but the new fork was copied.
    assert "copy_inherited" not in app.db.calls
    assert app.container.sessions.get(WS, child.id).copying_from == parent.id
    assert sorted(app.db.turns[grandchild.id]) == [5]
    # Its older messages read through the chain meanwhile, exactly.
    assert contents(app, grandchild.id) == contents(app, parent.id)[:6]
    say(app, grandchild.id, "and now?")
    assert contents(app, grandchild.id)[-2:] == [(7, "and now?"), (8, "answer to and now?")]


def test_a_fork_of_a_fork_queues_its_copy_after_its_parents(app: FakeApp) -> None:
    parent = conversation(app, 4, cap="cap-short")
    child = app.container.forks.fork(WS, parent.id, 8)
    grandchild = app.container.forks.fork(WS, child.id, 6)
    _, second = copy_jobs(app)
    assert (second.parent_id, second.fork_id) == (child.id, grandchild.id)

    # The grandchild's job runs first: the child's own copy is finished before it.
    assert app.container.forks.copy(second) == "done"

    assert app.container.sessions.get(WS, child.id).copying_from is None
    assert app.container.sessions.get(WS, grandchild.id).copying_from is None
    assert sorted(app.db.turns[child.id]) == [1, 3, 5, 7]
    assert sorted(app.db.turns[grandchild.id]) == [1, 3, 5]
    assert app.db.fork_markers.get(parent.id) == {} and app.db.fork_markers.get(child.id) == {}


@pytest.mark.parametrize("deleted_first", ["child", "parent"])
def test_a_chain_of_copies_due_survives_the_deletion_of_any_session_above(
    app: FakeApp, deleted_first: str
) -> None:
    parent = conversation(app, 4, cap="cap-short")
    child = app.container.forks.fork(WS, parent.id, 8)
    grandchild = app.container.forks.fork(WS, child.id, 6)
    expected = contents(app, parent.id)[:6]
    order = [child, parent] if deleted_first == "child" else [parent, child]

    for session in order:
        app.container.sessions.delete(WS, session.id)

    assert contents(app, grandchild.id) == expected
    assert app.container.sessions.get(WS, grandchild.id).copying_from is None
    assert not app.db.turns.get(parent.id) and not app.db.turns.get(child.id)


def test_a_chain_of_copies_due_too_long_to_read_waits_for_them(app: FakeApp) -> None:
    session = conversation(app, 4, cap="cap-short")
    for _ in range(MAX_COPIES_DUE):
        session = app.container.forks.fork(WS, session.id, 8)
    heads = set(app.db.heads)

    with pytest.raises(RateLimited) as refused:
        app.container.forks.fork(WS, session.id, 8)

    assert refused.value.headers() == {"Retry-After": str(COPIES_DUE_RETRY_SECONDS)}
    assert set(app.db.heads) == heads  # nothing opened
    app.container.forks.copy(copy_jobs(app)[-1])  # the copies catch up (the chain first)
    assert app.container.forks.fork(WS, session.id, 8).message_count == 8


def test_a_fork_on_its_route_counts_against_the_workspaces_turn_limit(app: FakeApp) -> None:
    admitted: list[str] = []

    def refuse(workspace_id: str) -> None:
        admitted.append(workspace_id)
        raise RateLimited("over the limit", retry_after=3)

    parent = conversation(app, 2)
    limited = ForkService(
        app.db.stores.sessions, app.db.stores.forks, app.container.catalog, admit=refuse
    )
    heads = set(app.db.heads)

    with pytest.raises(RateLimited):
        limited.branch(WS, parent.id, 2)

    assert admitted == [WS] and set(app.db.heads) == heads  # refused before anything
    assert app.container.forks.branch(WS, parent.id, 2).message_count == 2
