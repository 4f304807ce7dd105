"""No item is written by every turn of a workspace (contract v5, "Scale: no hot item"),
through the real handlers on moto: one workspace's turns through every turn door, each
conversation an end user's own (sessions by id and their message route, a chat door
key's session, the Responses door's new conversations and their next responses, agent
turns, stateless turns), with the limit at 10,000 turns a second. Every write request on
every table is recorded: the items it writes and the index partitions (``gsi1pk``,
``gsi2pk``, ``failedSessionId``) it writes them under. No item or partition is written by
more than one turn in eight: a conversation's own are written by its two turns, the turn
limiter's shards and the shared activity partitions each by a few."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace

WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
INDEX_KEYS = ("gsi1pk", "gsi2pk", "failedSessionId")
INDEX_PREFIXES = ("ACTIVE#", "ARCHIVED#", "DELETING#", "PENDING#")
END_USERS = 8  # per kind of conversation: 80 turns in all


class WriteLog:
    """The keys each turn wrote: items (``table pk sk``) and index partitions."""

    def __init__(self, client: Any) -> None:
        self.turn: int | None = None
        self.writers: dict[str, set[int]] = defaultdict(set)
        for operation in WRITES:
            client.meta.events.register(
                f"before-parameter-build.dynamodb.{operation}", self._record
            )

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if self.turn is None:
            return
        for table, key, values in _written(model.name, params):
            self.writers[f"{table} {_key_text(key)}"].add(self.turn)
            for value in values:
                self.writers[f"{table} index partition {value}"].add(self.turn)


def _written(operation: str, params: dict[str, Any]) -> Iterator[tuple[str, Any, list[str]]]:
    if operation == "BatchWriteItem":
        for table, requests in params["RequestItems"].items():
            for request in requests:
                body = request.get("PutRequest") or request["DeleteRequest"]
                item = body.get("Item") or body["Key"]
                yield table, _keys_of(item), _index_values(item)
    elif operation == "TransactWriteItems":
        for entry in params["TransactItems"]:
            ((_, body),) = entry.items()
            item = body.get("Item") or body["Key"]
            yield body["TableName"], _keys_of(item), _index_values(body)
    else:
        item = params.get("Item") or params["Key"]
        yield params["TableName"], _keys_of(item), _index_values(params)


def _keys_of(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k in ("pk", "sk", "id", "runId")}


def _key_text(key: dict[str, Any]) -> str:
    return " ".join(str(next(iter(value.values()))) for _, value in sorted(key.items()))


def _index_values(request: dict[str, Any]) -> list[str]:
    """The index partitions a write names: its item's index keys, or the values an
    update sets that are index partition keys."""
    item = request.get("Item") or {}
    found = [str(item[name]["S"]) for name in INDEX_KEYS if name in item]
    for value in (request.get("ExpressionAttributeValues") or {}).values():
        text = value.get("S") if isinstance(value, dict) else None
        if text and (text.startswith(INDEX_PREFIXES) or "#REF#" in text):
            found.append(text)
    return found


@pytest.fixture(scope="module")
def api() -> Iterator[InProcessApi]:
    limit = {"WORKSPACE_TURNS_PER_SECOND": "10000", "WORKSPACE_TURN_BURST": "40000"}
    with inprocess_stack(limit) as stack:
        yield stack


def test_no_item_or_index_partition_is_written_by_every_turn(api: InProcessApi) -> None:
    _, token = new_workspace(api, "one product")
    log = WriteLog(api.container.infrastructure.clients["dynamodb"])
    turns: list[Any] = []

    def turn(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        log.turn = len(turns)
        try:
            answer = api.call("POST", path, token=token, json_body=body, headers=headers)
        finally:
            log.turn = None
        assert answer.status == 200, answer.body
        turns.append(answer.body)
        return answer.body

    for user in range(END_USERS):
        ref = f"customer-{user}"
        opened = {"capabilityId": "cap-generative", "externalRef": ref}
        session = api.call("POST", "/v1/sessions", token=token, json_body=opened).body["id"]
        turn("/v1/capabilities/cap-generative/predict", {"input": "hi", "sessionId": session})
        turn(f"/v1/sessions/{session}/messages", {"input": "and order 123?"})
        agent = {"capabilityId": "cap-agent", "externalRef": ref}
        desk = api.call("POST", "/v1/sessions", token=token, json_body=agent).body["id"]
        for text in ("order 7", "and order 8"):
            turn("/v1/capabilities/cap-agent/predict", {"input": text, "sessionId": desk})
        chat = {
            "model": "cap-generative",
            "user": ref,
            "messages": [{"role": "user", "content": "hi"}],
        }
        for _ in range(2):
            turn("/v1/chat/completions", chat, {"X-Convo-Session-Key": f"chat-{user}"})
        first = turn("/v1/responses", {"model": "cap-generative", "input": "hello", "user": ref})
        turn(
            "/v1/responses",
            {"model": "cap-generative", "input": "more", "previous_response_id": first["id"]},
        )
        for _ in range(2):
            turn("/v1/capabilities/cap-generative/predict", {"input": "no session"})

    most = max(len(writers) for writers in log.writers.values())
    hottest = sorted(log.writers, key=lambda key: -len(log.writers[key]))[:5]
    assert len(turns) == 10 * END_USERS
    assert most <= len(turns) // 8, [(key, len(log.writers[key])) for key in hottest]
    # The turn limiter's writes are spread over its shards (100 at this limit).
    limiter = [key for key in log.writers if key.startswith(_limits_table(api))]
    assert len(limiter) > len(turns) // 4


def _limits_table(api: InProcessApi) -> str:
    return api.container.settings.turn_limits_table_name
