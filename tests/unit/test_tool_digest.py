"""Tool digests: one line per tool call, held within the per-turn budget."""

from __future__ import annotations

import json

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from convo_memory.domain.tool_digest import TRUNCATION_MARK, build_tool_digest
from convo_memory.domain.tools import ToolCall


def full_line(call: ToolCall) -> str:
    """The untruncated line of a call, as the contract's digest describes it."""
    args = json.dumps(dict(call.input), sort_keys=True, ensure_ascii=False)
    return f"{call.name}({args}) -> {call.output}"


def test_given_no_tool_calls_when_digesting_then_there_is_no_digest() -> None:
    assert build_tool_digest([], max_chars=2_000) is None


def test_given_short_results_when_digesting_then_each_call_is_one_whole_line() -> None:
    calls = [
        ToolCall("lookup_order", {"order": "42", "a": 1}, "shipped, arrives Tuesday"),
        ToolCall("search_kb", {"q": "retours café"}, "30 days"),
    ]

    digest = build_tool_digest(calls, max_chars=2_000)

    assert digest == (
        'lookup_order({"a": 1, "order": "42"}) -> shipped, arrives Tuesday\n'
        'search_kb({"q": "retours café"}) -> 30 days'
    )
    assert TRUNCATION_MARK not in digest


def test_given_one_verbose_tool_when_digesting_then_it_cannot_crowd_out_the_others() -> None:
    verbose = ToolCall("search_kb", {"q": "x"}, "v" * 5_000)
    short_before = ToolCall("lookup_order", {"order": "1"}, "shipped")
    short_after = ToolCall("lookup_order", {"order": "2"}, "lost")

    digest = build_tool_digest([short_before, verbose, short_after], max_chars=300)

    assert digest is not None
    lines = digest.split("\n")
    assert lines[0] == full_line(short_before)
    assert lines[2] == full_line(short_after)
    assert lines[1].endswith(TRUNCATION_MARK)
    # Its fair share of the budget once the two newlines are paid for.
    assert len(lines[1]) >= (300 - 2) // 3
    assert lines[1].startswith('search_kb({"q": "x"}) -> vvv')
    assert len(digest) <= 300


def test_given_a_single_huge_result_when_digesting_then_it_is_cut_to_the_budget_with_a_mark():
    call = ToolCall("search_kb", {}, "z" * 10_000)

    digest = build_tool_digest([call], max_chars=2_000)

    assert digest is not None
    assert len(digest) == 2_000
    assert digest.endswith(TRUNCATION_MARK)
    assert digest.startswith("search_kb({}) -> zzz")


outputs = st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=900)


@settings(max_examples=300, deadline=None, database=None)
@given(
    results=st.lists(outputs, min_size=1, max_size=8),
    max_chars=st.integers(min_value=100, max_value=3_000),
)
# Two verbose tools in a 100-character turn: 50-character shares plus the newline that
# joins them would make 101 characters, and a final cut would eat the last line's mark.
@example(results=["a" * 200, "b" * 200], max_chars=100)
def test_given_any_results_when_digesting_then_each_gets_an_equal_share_and_a_visible_mark(
    results: list[str], max_chars: int
) -> None:
    calls = [ToolCall(f"tool_{i}", {"i": i}, output) for i, output in enumerate(results)]
    fair_share = (max_chars - (len(calls) - 1)) // len(calls)
    # A share smaller than the mark itself cannot carry it (hundreds of calls per turn).
    assume(fair_share > len(TRUNCATION_MARK))

    digest = build_tool_digest(calls, max_chars=max_chars)

    assert digest is not None
    assert len(digest) <= max_chars
    lines = digest.split("\n")
    assert len(lines) == len(calls)
    truncated = [line for call, line in zip(calls, lines, strict=True) if line != full_line(call)]
    # Equal shares: every cut result is cut to the same length, at least its fair share.
    assert len({len(line) for line in truncated}) <= 1
    share = len(truncated[0]) if truncated else None
    if share is not None:
        assert share >= fair_share
    for call, line in zip(calls, lines, strict=True):
        whole = full_line(call)
        if line == whole:
            assert share is None or len(whole) <= share  # only what exceeds a share is cut
            continue
        # Truncated: the start of its own line, then the mark, intact.
        assert line.endswith(TRUNCATION_MARK), (
            f"truncated result of {call.name} lost its truncation mark: {line[-20:]!r}"
        )
        assert whole.startswith(line[: -len(TRUNCATION_MARK)])
