"""A turn's result as an Idempotency-Key's record keeps it: JSON there and back, so a
replayed turn answers exactly as the first time, on every door."""

from __future__ import annotations

import json

from convo_memory.domain.generation import TokenUsage
from convo_memory.domain.turns import ReplayStats, TurnPosition, TurnResult
from convo_memory.doors import chat_frames
from convo_memory.doors.predict import prediction
from tests.support.turns import served

RECORDED = served(
    reply_id="0123456789abcdef01234567",
    created=1_767_225_600,
    output="It ships Friday.",
    turn=TurnPosition(3, 4),
    run_id="run_1",
    context=ReplayStats(2, 40, 0, False),
    finish="length",
    usage=TokenUsage(1200, 30, cached_input_tokens=1024, cache_write_input_tokens=0),
)
STATELESS = served(None, reply_id="r", created=7, output="hi", withheld=True, recorded=False)


def test_a_result_comes_back_from_its_json_whole() -> None:
    for result in (RECORDED, STATELESS):
        kept = json.loads(json.dumps(result.to_json()))  # as the idempotency table keeps it

        assert TurnResult.from_json(kept) == result


def test_a_replayed_chat_completion_keeps_its_id_and_time() -> None:
    replayed = TurnResult.from_json(json.loads(json.dumps(RECORDED.to_json())))

    first, again = (chat_frames.chat_completion(r, "cap-1") for r in (RECORDED, replayed))
    assert again == first
    assert (again["id"], again["created"]) == ("chatcmpl-0123456789abcdef01234567", 1_767_225_600)
    assert again["usage"] == {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    assert again["choices"][0]["finish_reason"] == "length"


def test_a_record_kept_before_results_were_typed_replays_as_it_was_served() -> None:
    predicted = {
        "output": "It ships Friday.",
        "withheld": False,
        "sessionId": "ses_1",
        "turn": {"userSeq": 3, "assistantSeq": 4},
        "recorded": True,
        "runId": "run_1",
        "context": {
            "replayedMessages": 2,
            "replayedChars": 40,
            "omittedMessages": 0,
            "summaryIncluded": False,
        },
    }
    completed = {
        **predicted,
        "completion": {
            "id": "chatcmpl-0123456789abcdef01234567",
            "created": 1_767_225_600,
            "model": "cap-1",
            "finishReason": "length",
            "usage": {"prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230},
        },
    }

    assert prediction(TurnResult.from_json(predicted)) == predicted
    body = chat_frames.chat_completion(TurnResult.from_json(completed), "cap-1")
    assert (body["id"], body["created"]) == ("chatcmpl-0123456789abcdef01234567", 1_767_225_600)
    # Such a record knew no cached tokens: the same counts, none of them from a cache.
    assert body["usage"] == {
        **completed["completion"]["usage"],  # type: ignore[index]
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert body["choices"][0]["finish_reason"] == "length"
