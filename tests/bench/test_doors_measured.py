"""``make bench``'s door figures, measured (one timed turn each, to be quick; the times
are not asserted): a warm turn through the OpenAI-compatible doors makes the DynamoDB
requests and consumes the units of the same turn through predict."""

from __future__ import annotations

from bench.chat_door import chat_door_figure
from bench.responses_door import responses_door_figure


def test_a_responses_turn_costs_what_a_predict_turn_costs() -> None:
    figure = responses_door_figure(1, lambda message: None)

    predict, previous, conversation, items = figure["rows"]
    assert (previous["door"], conversation["door"]) == ("previous", "conversation")
    # (v5) A request naming the service's items costs no read a previous_response_id does not.
    assert items["door"] == "items"
    for row in figure["rows"]:
        assert row["consistent"], row
        assert (row["requests"], row["readUnits"], row["writeUnits"]) == (
            predict["requests"],
            predict["readUnits"],
            predict["writeUnits"],
        ), row
    assert predict["requests"]["Query"] == 1 and "BatchGetItem" not in predict["requests"]
    assert figure["sameRequests"] and figure["sameUnits"]

    stored = {row["call"]: row for row in figure["stored"]}
    # A stored response is found with one read, and deleted with one more write.
    assert stored["GET /v1/responses/{id}"]["requests"] == {"BatchGetItem": 1}
    assert stored["DELETE /v1/responses/{id}"]["requests"] == {
        "BatchGetItem": 1,
        "UpdateItem": 1,
    }
    fork = stored["POST /v1/responses after an older response (a fork at its answer)"]
    assert fork["requests"]["BatchGetItem"] == 1 and fork["requests"]["TransactWriteItems"] == 1


def test_a_chat_door_turn_costs_what_a_predict_turn_costs() -> None:
    figure = chat_door_figure(1, lambda message: None)

    predict, chat = figure["rows"]
    assert chat["consistent"] and figure["sameRequests"] and figure["sameUnits"]
    assert (chat["requests"], chat["readUnits"]) == (predict["requests"], predict["readUnits"])
