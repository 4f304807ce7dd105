"""Figure 21: a turn of this service next to LangChain's own DynamoDB chat history, at
10, 100 and 1,000 messages of history.

LangChain's ``DynamoDBChatMessageHistory`` (langchain-community) keeps a conversation in
one item (``SessionId``, ``History``: every message as ``message_to_dict`` makes it). A
turn of ``RunnableWithMessageHistory`` reads the item to build the prompt (GetItem), then
adds the question and the answer: ``add_messages`` adds them one at a time, and each
``add_message`` reads the item again and puts it back whole with the message appended
(GetItem + PutItem, twice). Every message goes to the model. Its requests are replayed
here on moto, with LangChain's own ``message_to_dict`` for the item's shape, and metered
like every other figure (``bench.capacity``); an item stops at DynamoDB's 400 KB limit.

This service's turn is the same question on a session seeded with the same history
(120-character messages, a 2,000-character summary past the replay window, as in figure
2), through the OpenAI-compatible door, metered on every table; its prompt's size is the
embedded model's estimate (about four characters a token), LangChain's the characters of
every message it sends over four.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
HISTORY_SIZES = (10, 100, 1_000)
MESSAGE_CHARS = 120
ITEM_LIMIT_BYTES = 400 * 1024
LANGCHAIN_TABLE = "SessionTable"
QUESTION = "And what about the other one? Can you check it as well, please?".ljust(120, ".")
ANSWER = "Here is what I found about the other one: it is on its way, as the first.".ljust(120, ".")


def langchain_history_figure(
    progress: Callable[[str], None], sizes: tuple[int, ...] = HISTORY_SIZES
) -> dict[str, Any]:
    """Both sides at each history size of ``sizes`` (see the module's docstring)."""
    from tests.support.inprocess_api import inprocess_stack

    progress("a turn next to LangChain's DynamoDB chat history")
    with inprocess_stack() as api:
        ours = [_our_turn(api, size) for size in sizes]
        theirs = [_langchain_turn(size) for size in sizes]
    per_message = (theirs[-1]["itemBytes"] - theirs[0]["itemBytes"]) / (sizes[-1] - sizes[0])
    return {
        "messageChars": MESSAGE_CHARS,
        "rows": [
            {"history": n, "ours": o, "langchain": t}
            for n, o, t in zip(sizes, ours, theirs, strict=True)
        ],
        "langchainBytesPerMessage": per_message,
        "langchainMessagesAtItemLimit": int(ITEM_LIMIT_BYTES // per_message),
    }


def _our_turn(api: Any, size: int) -> dict[str, Any]:
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from convo_memory.domain.models import Summary
    from tests.support.inprocess_api import new_workspace, seed_history

    _, token = new_workspace(api, f"bench-langchain-{size}")
    session = api.call(
        "POST",
        "/v1/sessions",
        token=token,
        json_body={"capabilityId": CAP, "externalRef": "bench", "principal": None},
    ).body
    seed_history(api, session["id"], size)
    if size > 20:
        summary = Summary(text="s" * 2_000, through_seq=size - 20)
        assert api.container.adapters.stores.summaries.advance_summary(session["id"], 0, summary)
    side = boto3.client("dynamodb", region_name="us-east-1")
    specs = table_specs(ROOT / "template.yaml", api.resources.tables)
    meter = CapacityMeter(api.container.infrastructure.clients["dynamodb"], side, specs)
    body = {"model": CAP, "messages": [{"role": "user", "content": QUESTION}]}
    headers = {"X-Convo-Session-Id": session["id"]}
    _chat(api, token, body, headers)  # warm: the container, the token and capability caches
    meter.reset()
    answer = _chat(api, token, body, headers)
    units = meter.reset()
    _detach(api, meter)
    return units.to_dict() | {"promptTokens": answer["usage"]["prompt_tokens"]}


def _chat(api: Any, token: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    response = api.call(
        "POST", "/v1/chat/completions", token=token, json_body=body, headers=headers
    )
    if response.status != 200:
        raise RuntimeError(f"chat completion failed: {response.status} {response.body}")
    return response.body


def _detach(api: Any, meter: Any) -> None:
    events = api.container.infrastructure.clients["dynamodb"].meta.events
    events.unregister("provide-client-params.dynamodb", meter._before)
    events.unregister("after-call.dynamodb", meter._after)


def _langchain_turn(size: int) -> dict[str, Any]:
    """One turn of LangChain's history at ``size`` messages: its requests, metered."""
    import boto3
    from boto3.dynamodb.types import TypeSerializer
    from langchain_core.messages import AIMessage, HumanMessage, message_to_dict

    from bench.capacity import CapacityMeter, TableSpec, item_size

    client = boto3.client("dynamodb", region_name="us-east-1")
    if LANGCHAIN_TABLE not in client.list_tables()["TableNames"]:
        client.create_table(
            TableName=LANGCHAIN_TABLE,
            KeySchema=[{"AttributeName": "SessionId", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "SessionId", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    serializer = TypeSerializer()
    key: dict[str, Any] = {"SessionId": {"S": f"bench-{size}"}}

    def message(seq: int) -> dict[str, Any]:
        text = f"message {seq:06d} ".ljust(MESSAGE_CHARS, "x")
        kind = HumanMessage if seq % 2 else AIMessage
        return message_to_dict(kind(text))

    history = [message(seq) for seq in range(1, size + 1)]
    seeded = {**key, "History": serializer.serialize(history)}
    client.put_item(TableName=LANGCHAIN_TABLE, Item=seeded)
    metered = boto3.client("dynamodb", region_name="us-east-1")
    meter = CapacityMeter(metered, client, {LANGCHAIN_TABLE: TableSpec(("SessionId",), ())})
    # RunnableWithMessageHistory: the history for the prompt, then each new message.
    metered.get_item(TableName=LANGCHAIN_TABLE, Key=key)
    sent_chars = sum(len(m["data"]["content"]) for m in history) + len(QUESTION)
    for new in (HumanMessage(QUESTION), AIMessage(ANSWER)):
        read: dict[str, Any] = dict(metered.get_item(TableName=LANGCHAIN_TABLE, Key=key)["Item"])
        listed = [*read["History"]["L"], serializer.serialize(message_to_dict(new))]
        stored: dict[str, Any] = {**key, "History": {"L": listed}}
        metered.put_item(TableName=LANGCHAIN_TABLE, Item=stored)
    return meter.reset().to_dict() | {
        "promptTokens": -(-sent_chars // 4),
        "itemBytes": item_size(stored),
    }


def render_langchain_history(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    rows = []
    for row in figure["rows"]:
        for side, label in (("ours", "this service"), ("langchain", "LangChain history")):
            measured = row[side]
            writes = measured["tableWriteUnits"] + measured["indexWriteUnits"]
            rows.append(
                [
                    str(row["history"]),
                    label,
                    ", ".join(f"{op} {n}" for op, n in sorted(measured["requests"].items())),
                    f"{measured['readUnits']:g}",
                    f"{writes:g}",
                    f"${measured['dollarsPerMillion']:.2f}",
                    f"{measured['promptTokens']:,}",
                ]
            )
    return "\n".join(
        [
            title,
            f"one turn at each history length ({figure['messageChars']}-character messages):"
            " this service through the OpenAI-compatible door on a seeded session (figure 2's"
            " set-up); LangChain's DynamoDBChatMessageHistory as RunnableWithMessageHistory"
            " uses it (a read for the prompt, then a read and a put of the whole item for each"
            " of the two new messages), replayed on moto with its own message format",
            table(
                [
                    "history msgs",
                    "memory",
                    "DynamoDB requests",
                    "RRU",
                    "WRU",
                    "DynamoDB $ per M turns",
                    "prompt tokens",
                ],
                rows,
            ),
            "prompt tokens: what the model is sent for the turn (this service: the replay"
            " window and the summary, estimated at four characters a token; LangChain: every"
            " message). LangChain's one item grows by about"
            f" {figure['langchainBytesPerMessage']:,.0f} bytes a message and reaches"
            f" DynamoDB's 400 KB item limit at about {figure['langchainMessagesAtItemLimit']:,}"
            " messages, where every later write fails.",
        ]
    )
