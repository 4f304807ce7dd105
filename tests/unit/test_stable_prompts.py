"""A session's prompts are stable from turn to turn (contract v3, "Prompts a provider can
cache"), over fakes: the fence nonce is the session's (a session from before nonces gets
one on its next turn), and a tool turn changes nothing before its own messages."""

from __future__ import annotations

import itertools

from convo_memory.api import ContextView
from convo_memory.domain.errors import StoreUnavailable
from convo_memory.domain.models import ToolSpec
from convo_memory.domain.tools import ToolCall
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import predict

LOOKUP = ToolCall("lookup_order", {"order": "42"}, "order 42 shipped; ETA Tuesday")


def chat_app() -> FakeApp:
    app = fake_app(provider=FakeProvider(lambda p: f"answer to {p.user_input}"))
    app.capability("cap-gen", instructions="Be brief.")
    return app


def test_given_a_new_session_then_its_turns_share_one_nonce_and_one_system_text() -> None:
    app = chat_app()
    first, second = app.session("cap-gen"), app.session("cap-gen")

    for text in ("one", "two", "three"):
        predict(app.container, WS, "cap-gen", text, first)
    predict(app.container, WS, "cap-gen", "other", second)

    prompts = app.provider.prompts
    assert len({p.fence_nonce for p in prompts[:3]}) == 1
    assert prompts[3].fence_nonce != prompts[0].fence_nonce  # each session has its own
    assert prompts[0].system == prompts[1].system == prompts[2].system
    assert f"<data-{prompts[0].fence_nonce} ...>" in prompts[0].system  # the data policy
    # Each prompt begins with the previous one: its messages, then the answer and input.
    assert prompts[2].messages[: len(prompts[1].messages)] == prompts[1].messages
    assert app.db.calls["keep_fence_nonce"] == 0  # created with one: nothing more to write


def test_given_a_session_from_before_nonces_then_its_next_turn_keeps_one() -> None:
    app = chat_app()
    sid = app.session("cap-gen")
    del app.db.heads[sid]["fenceNonce"]  # as a session created before nonces were kept

    predict(app.container, WS, "cap-gen", "one", sid)
    kept = app.db.heads[sid]["fenceNonce"]
    predict(app.container, WS, "cap-gen", "two", sid)

    first, second = app.provider.prompts
    assert first.fence_nonce == second.fence_nonce == kept
    assert first.system == second.system
    assert app.db.calls["keep_fence_nonce"] == 1
    # Never shown: not in the session, not in the context view.
    assert kept not in str(app.container.sessions.get(WS, sid).to_json_dict())
    assert kept not in str(ContextView.of(app.container.sessions.context(WS, sid)).to_json_dict())


def test_given_a_tool_turn_then_the_next_prompt_still_begins_with_the_previous_one() -> None:
    provider = FakeProvider("Your order ships Tuesday", tool_calls=[LOOKUP])
    app = fake_app(provider=provider)
    app.capability("cap-agent", kind="agent", tools=[ToolSpec(name="lookup_order").model_dump()])
    sid = app.session("cap-agent")

    predict(app.container, WS, "cap-agent", "where is order 42?", sid)
    provider.tool_calls = ()
    predict(app.container, WS, "cap-agent", "and when does it arrive?", sid)
    predict(app.container, WS, "cap-agent", "thanks", sid)

    first, second, third = (step.prompt for step in provider.steps if not step.rounds)
    # The digest travels in the message after its answer: the system text is unchanged.
    assert first.system == second.system == third.system
    assert LOOKUP.output in second.messages[-1].content
    assert second.messages[: len(first.messages)] == first.messages
    assert third.messages[: len(second.messages)] == second.messages


def flags_over(alignment: int, turns: int) -> list[tuple[int, bool]]:
    """(messages the turn's window omits, whether its prompt says the next turn will
    replay the same messages), turn by turn, for a steady conversation."""
    app = fake_app(provider=FakeProvider("an answer of a steady size"))
    app.capability("cap-gen", replay={"maxMessages": 10, "alignment": alignment})
    sid = app.session("cap-gen")
    flags = []
    for i in range(turns):
        prediction = predict(app.container, WS, "cap-gen", f"question {i:03d}", sid)
        assert prediction.context is not None
        flags.append((prediction.context.omitted_messages, app.provider.prompts[-1].replay_reused))
    return flags


def test_a_prompt_says_whether_the_next_turn_replays_its_messages() -> None:
    aligned = flags_over(10, 16)
    # Marked unless the next turn's window moves: the turn before each step is not (nor
    # the first turn: it replays nothing).
    assert aligned[0] == (0, False)
    for (omitted, reused), (next_omitted, _) in itertools.pairwise(aligned[1:]):
        assert reused == (next_omitted == omitted)
    assert [reused for _, reused in aligned[1:]].count(False) == 3  # before each step

    # Without alignment the window moves every turn once it has filled.
    assert [reused for _, reused in flags_over(1, 8)] == [False] + [True] * 4 + [False] * 3


def test_given_the_nonce_cannot_be_kept_then_the_turn_goes_on_with_a_fresh_one() -> None:
    app = chat_app()
    sid = app.session("cap-gen")
    del app.db.heads[sid]["fenceNonce"]
    app.db.fail_next["keep_fence_nonce"] = StoreUnavailable("throttled")

    first = predict(app.container, WS, "cap-gen", "one", sid)
    predict(app.container, WS, "cap-gen", "two", sid)

    # The turn was served and recorded; the next turn keeps a nonce for good.
    assert first.recorded is True
    one, two = app.provider.prompts
    assert one.fence_nonce and one.fence_nonce != two.fence_nonce
    assert two.fence_nonce == app.db.heads[sid]["fenceNonce"]
