"""The benchmark's capacity arithmetic: DynamoDB's billing rules on known items."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.capacity import (
    CapacityMeter,
    IndexSpec,
    TableSpec,
    batch_read_units,
    index_write_units,
    item_size,
    read_units,
    value_size,
    write_units,
)

SPEC = TableSpec(
    ("pk", "sk"),
    (
        IndexSpec("byRef", ("gsi1pk", "gsi1sk"), "INCLUDE", ("metadata",)),
        IndexSpec("byActivity", ("gsi2pk", "gsi2sk"), "KEYS_ONLY"),
    ),
)


def head(mark: str, metadata: str = "{}") -> dict[str, dict[str, str]]:
    return {
        "pk": {"S": "SESSION#s1"},
        "sk": {"S": "SESSION"},
        "metadata": {"S": metadata},
        "lastActiveAt": {"S": mark},
        "gsi1pk": {"S": "WS#w#REF#u"},
        "gsi1sk": {"S": "2026#s1"},
        "gsi2pk": {"S": "ACTIVE#03"},
        "gsi2sk": {"S": mark},
    }


def test_item_size_counts_names_and_values_as_dynamodb_does() -> None:
    assert item_size({"pk": {"S": "abc"}}) == 2 + 3
    assert item_size({"é": {"S": "é"}}) == 2 + 2  # UTF-8 bytes
    assert value_size({"N": "12345"}) == 4  # 5 significant digits: 3 + 1
    assert value_size({"BOOL": True}) == 1
    assert value_size({"SS": ["ab", "c"]}) == 3
    assert value_size({"L": [{"S": "ab"}]}) == 3 + 1 + 2
    assert item_size(None) == 0


def test_reads_round_up_per_4_kb_and_halve_when_eventually_consistent() -> None:
    assert read_units(0, consistent=True) == 1
    assert read_units(4096, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(4097, consistent=False) == 1


def test_a_batch_read_costs_a_get_of_each_key_each_item_rounded_up_alone() -> None:
    small, large = {"pk": {"S": "x"}}, {"pk": {"S": "x" * 5000}}
    params = {
        "RequestItems": {
            "conv": {"Keys": [{}, {}, {}], "ConsistentRead": True},
            "idem": {"Keys": [{}, {}]},
        }
    }
    parsed: dict[str, Any] = {
        "Responses": {"conv": [small, large], "idem": [small]},
        "UnprocessedKeys": {},
    }
    # conv: 1 (small) + 2 (5,001 bytes) + 1 (not found); idem, eventually: 0.5 + 0.5.
    assert batch_read_units(params, parsed) == 5
    parsed["UnprocessedKeys"] = {"idem": {"Keys": [{}]}}
    assert batch_read_units(params, parsed) == 4.5  # an unprocessed key is not read


def test_writes_round_up_per_1_kb_of_the_larger_item() -> None:
    small, large = {"pk": {"S": "x"}}, {"pk": {"S": "x" * 1500}}
    assert write_units(None, small) == 1
    assert write_units(large, small) == 2
    assert write_units(small, None) == 1


def test_an_index_is_written_only_when_its_keys_or_projection_change() -> None:
    # A new head enters both indexes.
    assert index_write_units(SPEC, None, head("t1")) == 2
    # The mark moves: byActivity's key changes (delete + put); byRef projects neither
    # the mark nor gsi2sk, so it is not written.
    assert index_write_units(SPEC, head("t1"), head("t2")) == 2
    # Metadata changes: byRef projects it (one write); byActivity keys stay.
    assert index_write_units(SPEC, head("t1"), head("t1", '{"a":1}')) == 1
    # An item without index keys (a turn) writes no index.
    turn = {"pk": {"S": "SESSION#s1"}, "sk": {"S": "MSG#0000000001"}, "u": {"S": "hi"}}
    assert index_write_units(SPEC, None, turn) == 0
    # Deleting a head removes it from both.
    assert index_write_units(SPEC, head("t1"), None) == 2


class _Events:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def register(self, event: str, handler: Any) -> None:
        self.handlers[event.split(".")[0]] = handler


class _Client:
    def __init__(self, items: dict[str, dict[str, Any]] | None = None) -> None:
        self.meta = SimpleNamespace(events=_Events())
        self.items = items or {}

    def get_item(self, TableName: str, Key: dict[str, Any], ConsistentRead: bool) -> Any:
        found = self.items.get(Key["pk"]["S"])
        return {"Item": found} if found else {}


def test_a_transaction_doubles_each_items_write_units_a_condition_check_included() -> None:
    checked = {"s0": head("t0"), "s9": head("t9")}
    client = _Client()
    meter = CapacityMeter(client, _Client(checked), {"conv": SPEC})
    new = {**head("t1", metadata="m" * 1_500), "pk": {"S": "SESSION#new"}}
    params = {
        "TransactItems": [
            {"Put": {"TableName": "conv", "Item": new}},
            *(
                {
                    "ConditionCheck": {
                        "TableName": "conv",
                        "Key": {"pk": checked[k]["pk"], "sk": checked[k]["sk"]},
                    }
                }
                for k in ("s0", "s9")
            ),
        ]
    }
    model = SimpleNamespace(name="TransactWriteItems")
    before, after = (
        client.meta.events.handlers["provide-client-params"],
        client.meta.events.handlers["after-call"],
    )

    before(model=model, params=params)
    after(model=model, parsed={})
    applied = meter.reset()
    before(model=model, params=params)
    after(model=model, parsed={"Error": {"Code": "TransactionCanceledException"}})
    canceled = meter.reset()

    # The new head (about 1.6 KB: 2 units) and two checked heads (1 unit each), doubled;
    # the new head enters both indexes (byRef projects its metadata: 2 units), the
    # checks write none.
    assert applied.table_write_units == 2 * (2 + 1 + 1)
    assert applied.index_write_units == 2 + 1
    assert applied.requests == {"TransactWriteItems": 1}
    # Canceled: each item charged as a failed condition (the absent head: 1 unit).
    assert canceled.table_write_units == 2 * (1 + 1 + 1) and canceled.index_write_units == 0
