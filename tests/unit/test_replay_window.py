"""The replay window (CONTRACT.md, "Replay window") checked against an independent
reading of the contract's rule, by property and by worked examples."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from convo_memory.domain.models import Message, ReplayPolicy
from convo_memory.domain.replay_window import ReplayWindow, select_replay_window

PROPERTY_SETTINGS = settings(max_examples=400, deadline=None, database=None)


def history_of(contents: Sequence[str], first_seq: int = 1) -> list[Message]:
    """Recorded messages with contiguous seqs, alternating user / assistant."""
    return [
        Message(
            seq=first_seq + i,
            role="user" if (first_seq + i) % 2 == 1 else "assistant",
            content=content,
            created_at="2025-01-01T00:00:00.000Z",
        )
        for i, content in enumerate(contents)
    ]


def contract_window(history: Sequence[Message], c: int, b: int, f: int) -> list[Message]:
    """The contract's rule, read literally and written without reference to the code:

    1. consider the newest C messages;
    2. walking newest -> oldest, a message is taken when the running total of content
       characters *including it* stays <= B, or when fewer than F are taken so far;
       the walk stops at the first message that fits neither rule;
    3. what is taken is a contiguous newest suffix of the history.
    """
    considered_newest_first = list(history[-c:])[::-1]
    taken = 0
    while taken < len(considered_newest_first):
        total_with_next = sum(len(m.content) for m in considered_newest_first[: taken + 1])
        if total_with_next <= b or taken < f:
            taken += 1
        else:
            break
    return list(history[len(history) - taken :]) if taken else []


@st.composite
def policies(draw: st.DrawFn) -> ReplayPolicy:
    c = draw(st.integers(min_value=1, max_value=30))
    f = draw(st.integers(min_value=1, max_value=c))
    b = draw(st.integers(min_value=1, max_value=600))
    return ReplayPolicy(max_messages=c, max_chars=b, min_messages=f)


contents = st.lists(
    st.one_of(
        st.text(max_size=12),
        st.text(alphabet="xyz", min_size=40, max_size=250),
    ),
    max_size=60,
)


def check_window_invariants(
    window: ReplayWindow, history: Sequence[Message], policy: ReplayPolicy
) -> None:
    c, b, f = policy.max_messages, policy.max_chars, policy.min_messages
    replayed = list(window.messages)
    k = len(replayed)
    total = len(history)

    assert replayed == contract_window(history, c, b, f)
    # A contiguous newest suffix, oldest first.
    assert replayed == (list(history[total - k :]) if k else [])
    # The floor beats the budget; the ceiling beats everything.
    assert k >= min(f, total)
    assert k <= c
    assert window.replayed_chars == sum(len(m.content) for m in replayed)
    if k > f:
        assert window.replayed_chars <= b
    # Everything older than the window is omitted, and nothing else.
    assert window.omitted_messages == total - k
    expected_newest_omitted = replayed[0].seq - 1 if replayed else total
    assert window.newest_omitted_seq == expected_newest_omitted
    # The walk stopped for a reason: the ceiling, the history's start, or a message that
    # fitted neither rule.
    if k < min(c, total):
        next_older = history[total - k - 1]
        assert window.replayed_chars + len(next_older.content) > b
        assert k >= f


@PROPERTY_SETTINGS
@given(texts=contents, policy=policies())
def test_given_any_history_when_selecting_then_the_window_follows_the_contract_rule(
    texts: list[str], policy: ReplayPolicy
) -> None:
    history = history_of(texts)

    window = select_replay_window(history, policy)

    check_window_invariants(window, history, policy)


@PROPERTY_SETTINGS
@given(texts=contents, policy=policies(), data=st.data())
def test_given_only_the_newest_tail_when_selecting_with_the_total_then_same_as_full_history(
    texts: list[str], policy: ReplayPolicy, data: st.DataObject
) -> None:
    # The serving path reads only the newest maxMessages (or more); the total count
    # comes from the session head.
    history = history_of(texts)
    shortest = min(policy.max_messages, len(history))
    tail_length = data.draw(st.integers(min_value=shortest, max_value=len(history)))
    tail = history[len(history) - tail_length :]

    window = select_replay_window(tail, policy, total_messages=len(history))

    check_window_invariants(window, history, policy)
    assert window == select_replay_window(history, policy)


@PROPERTY_SETTINGS
@given(texts=contents, policy=policies())
def test_given_any_history_when_selecting_then_the_current_input_is_not_counted(
    texts: list[str], policy: ReplayPolicy
) -> None:
    # The window is chosen from recorded history only: selecting twice gives the same
    # answer and the result never contains a message that was not passed in.
    history = history_of(texts)

    first = select_replay_window(history, policy)
    second = select_replay_window(history, policy)

    assert first == second
    assert {m.seq for m in first.messages} <= {m.seq for m in history}


def test_given_a_few_enormous_turns_when_selecting_then_the_floor_beats_the_budget() -> None:
    history = history_of(["u" * 10_000, "a" * 10_000, "u" * 9_000, "a" * 11_000])
    policy = ReplayPolicy(max_messages=20, max_chars=100, min_messages=2)

    window = select_replay_window(history, policy)

    assert [m.seq for m in window.messages] == [3, 4]
    assert window.replayed_chars == 20_000
    assert window.omitted_messages == 2
    assert window.newest_omitted_seq == 2


def test_given_many_tiny_turns_when_selecting_then_the_ceiling_cuts_the_window() -> None:
    history = history_of(["hi"] * 50)
    policy = ReplayPolicy(max_messages=20, max_chars=12_000, min_messages=2)

    window = select_replay_window(history, policy)

    assert [m.seq for m in window.messages] == list(range(31, 51))
    assert window.replayed_chars == 40
    assert window.omitted_messages == 30
    assert window.newest_omitted_seq == 30


def test_given_an_empty_history_when_selecting_then_nothing_is_replayed_or_omitted() -> None:
    window = select_replay_window([], ReplayPolicy())

    assert window.messages == ()
    assert window.replayed_chars == 0
    assert window.omitted_messages == 0
    assert window.newest_omitted_seq == 0


def test_given_a_tail_of_a_longer_history_when_selecting_then_older_messages_count_as_omitted():
    tail = history_of(["x" * 10] * 20, first_seq=81)  # seqs 81..100 of a 100-message history
    policy = ReplayPolicy(max_messages=20, max_chars=50, min_messages=2)

    window = select_replay_window(tail, policy, total_messages=100)

    assert [m.seq for m in window.messages] == [96, 97, 98, 99, 100]
    assert window.replayed_chars == 50
    assert window.omitted_messages == 95
    assert window.newest_omitted_seq == 95


def test_given_a_large_message_when_walking_then_the_walk_stops_even_if_an_older_one_fits():
    # Sizes oldest -> newest: 1, 50, 5, 5. The 50 fits neither rule, so the walk stops
    # there; the older 1-character message is not taken although it would fit.
    history = history_of(["a", "b" * 50, "c" * 5, "d" * 5])
    policy = ReplayPolicy(max_messages=20, max_chars=20, min_messages=1)

    window = select_replay_window(history, policy)

    assert [m.seq for m in window.messages] == [3, 4]
    assert window.omitted_messages == 2


def test_given_a_running_total_exactly_at_the_budget_when_walking_then_the_message_is_taken():
    history = history_of(["a" * 4, "b" * 6, "c" * 4])
    policy = ReplayPolicy(max_messages=20, max_chars=10, min_messages=1)

    window = select_replay_window(history, policy)

    assert [m.seq for m in window.messages] == [2, 3]
    assert window.replayed_chars == 10


# -- replay.alignment (v3, "Prompts a provider can cache") -------------------------------


def aligned_window(history: Sequence[Message], policy: ReplayPolicy) -> list[Message]:
    """The contract's aligned start, read literally: the first message at or after the
    rule's oldest whose ``seq - 1`` is a multiple of K, unless that leaves fewer than
    ``minMessages`` (then the rule's start)."""
    rule = contract_window(history, policy.max_messages, policy.max_chars, policy.min_messages)
    for start, message in enumerate(rule):
        if (message.seq - 1) % policy.alignment == 0:
            if len(rule) - start >= policy.min_messages:
                return rule[start:]
            break
    return rule


@PROPERTY_SETTINGS
@given(
    texts=contents,
    policy=policies(),
    alignment=st.integers(min_value=1, max_value=50),
    first_seq=st.integers(min_value=1, max_value=120),
)
def test_given_an_alignment_when_selecting_then_the_start_moves_in_steps_within_the_rule(
    texts: list[str], policy: ReplayPolicy, alignment: int, first_seq: int
) -> None:
    policy = policy.model_copy(update={"alignment": alignment})
    history = history_of(texts, first_seq)
    total = first_seq - 1 + len(history)

    window = select_replay_window(history, policy, total)

    expected = aligned_window(history, policy)
    assert list(window.messages) == expected
    rule = contract_window(history, policy.max_messages, policy.max_chars, policy.min_messages)
    # A suffix of the rule's window: never above the ceiling, never above the budget
    # unless the rule's floor already was.
    assert list(window.messages) == rule[len(rule) - len(window.messages) :]
    assert len(window.messages) >= min(policy.min_messages, len(rule))
    assert window.omitted_messages == total - len(window.messages)
    assert window.replayed_chars == sum(len(m.content) for m in window.messages)
    if window.messages and window.messages[0] is not rule[0]:
        assert (window.messages[0].seq - 1) % alignment == 0


@PROPERTY_SETTINGS
@given(texts=contents, policy=policies())
def test_given_alignment_one_when_selecting_then_the_window_is_the_rule_exactly(
    texts: list[str], policy: ReplayPolicy
) -> None:
    history = history_of(texts)

    window = select_replay_window(history, policy.model_copy(update={"alignment": 1}))

    assert list(window.messages) == contract_window(
        history, policy.max_messages, policy.max_chars, policy.min_messages
    )


def test_given_a_steady_conversation_when_aligned_by_ten_then_the_window_grows_between_steps():
    policy = ReplayPolicy(max_messages=10, alignment=10)
    sizes = []
    for history_length in range(10, 32, 2):
        window = select_replay_window(history_of(["m"] * history_length), policy)
        sizes.append((window.omitted_messages, len(window.messages)))

    assert sizes == [
        (0, 10), (10, 2), (10, 4), (10, 6), (10, 8), (10, 10),
        (20, 2), (20, 4), (20, 6), (20, 8), (20, 10),
    ]  # fmt: skip


def test_given_a_floor_above_the_step_when_aligned_then_the_rule_start_is_kept():
    policy = ReplayPolicy(max_messages=10, min_messages=4, alignment=10)

    at_12 = select_replay_window(history_of(["m"] * 12), policy)
    at_14 = select_replay_window(history_of(["m"] * 14), policy)

    # Two messages past the step would be below the floor: the rule's window (3..12).
    assert [m.seq for m in at_12.messages] == list(range(3, 13))
    assert [m.seq for m in at_14.messages] == [11, 12, 13, 14]


def test_given_an_alignment_outside_one_to_fifty_then_the_policy_is_refused():
    for alignment in (0, 51):
        with pytest.raises(ValidationError):
            ReplayPolicy.model_validate({"alignment": alignment})
    assert ReplayPolicy.model_validate({"alignment": 50}).alignment == 50
    assert ReplayPolicy().alignment == 1
