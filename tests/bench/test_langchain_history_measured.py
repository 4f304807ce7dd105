"""``make bench``'s figure 21, measured (at 10 and 200 messages here, to be quick): a turn
of this service makes the same requests and sends a bounded prompt whatever the history,
while LangChain's DynamoDB chat history reads and rewrites its one item, which grows with
every message, and sends every message to the model."""

from __future__ import annotations

from bench.langchain_history import langchain_history_figure, render_langchain_history
from bench.stats import table


def test_a_turn_here_stays_flat_while_langchains_history_grows_with_the_conversation() -> None:
    figure = langchain_history_figure(lambda message: None, sizes=(10, 200))

    short, long = figure["rows"]
    assert short["ours"]["requests"] == long["ours"]["requests"]
    assert long["ours"]["requests"]["Query"] == 1
    assert long["ours"]["totalUnits"] <= short["ours"]["totalUnits"] + 1
    assert long["langchain"]["requests"] == {"GetItem": 3, "PutItem": 2}
    assert long["langchain"]["tableWriteUnits"] > 5 * short["langchain"]["tableWriteUnits"]
    assert long["langchain"]["promptTokens"] > 5 * long["ours"]["promptTokens"] / 2
    assert 1_000 < figure["langchainMessagesAtItemLimit"] < 5_000
    text = render_langchain_history(figure, table, "21. LangChain")
    assert "LangChain history  GetItem 3, PutItem 2" in text
    assert "400 KB item limit" in text
