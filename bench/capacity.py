"""DynamoDB capacity units of real requests, computed the way DynamoDB bills them.

moto does not report consumed capacity, so the meter hooks a boto3 client, reads every
request's parameters and response, and fetches the item a write replaces (through a
second, unmetered client) to apply DynamoDB's rules:

- item size = the UTF-8 bytes of every attribute name and value (numbers: about one
  byte per two significant digits plus one; lists and maps: 3 bytes plus 1 per element);
- a read (GetItem, Query) costs one unit per 4 KB of the items it returns, summed per
  request, at least one unit; half of that when eventually consistent; a BatchGetItem
  costs what a GetItem of each of its keys would (each item rounded up on its own);
- a write costs one unit per 1 KB of the larger of the item before and after (a failed
  condition too); a transaction doubles it, for each of its items (a ConditionCheck is
  charged like a write that leaves its item as it was; a canceled transaction like a
  failed condition on each item);
- a global secondary index is written when the item carries its keys before or after:
  a put of the projected item when its keys appear, a delete when they go, both when
  they change, and one write when they stay but a projected attribute changes (the
  index definitions are read from template.yaml).

Prices are DynamoDB on-demand in us-east-1 (standard table class), from AWS's price
list after the November 2024 reduction: $0.125 per million read request units and
$0.625 per million write request units.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.prices import (
    DYNAMODB_USD_PER_MILLION_READ_UNITS,
    DYNAMODB_USD_PER_MILLION_WRITE_UNITS,
)

READ_UNIT_BYTES = 4096
WRITE_UNIT_BYTES = 1024
TRANSACTION_FACTOR = 2


# -- item size ------------------------------------------------------------------------


def _number_size(text: str) -> int:
    digits = Decimal(text).normalize().as_tuple().digits
    return max(1, math.ceil(len(digits) / 2) + 1)


def value_size(value: Mapping[str, Any]) -> int:
    (kind, data), *_ = value.items()
    if kind == "S":
        return len(str(data).encode("utf-8"))
    if kind == "N":
        return _number_size(str(data))
    if kind == "B":
        return len(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode("utf-8")) for s in data)
    if kind == "NS":
        return sum(_number_size(str(s)) for s in data)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in data.items())
    raise ValueError(f"unknown DynamoDB type {kind}")


def item_size(item: Mapping[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(v) for name, v in item.items())


# -- the tables' shape, from template.yaml ---------------------------------------------


@dataclass(frozen=True)
class IndexSpec:
    name: str
    keys: tuple[str, ...]
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    included: tuple[str, ...] = ()

    def projected(self, item: Mapping[str, Any], table_keys: tuple[str, ...]) -> dict[str, Any]:
        if self.projection == "ALL":
            return dict(item)
        names = {*table_keys, *self.keys, *self.included}
        return {k: v for k, v in item.items() if k in names}

    def key_of(self, item: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
        if not item or any(k not in item for k in self.keys):
            return None
        return tuple(json.dumps(item[k], sort_keys=True) for k in self.keys)


@dataclass(frozen=True)
class TableSpec:
    keys: tuple[str, ...]
    indexes: tuple[IndexSpec, ...] = ()


def table_specs(template: Path, physical_names: Mapping[str, str]) -> dict[str, TableSpec]:
    """Physical table name -> its keys and indexes, from the template's definitions."""
    from local_runtime.aws_resources import load_template

    resources = load_template(template)["Resources"]
    specs: dict[str, TableSpec] = {}
    for logical, physical in physical_names.items():
        props = resources[logical]["Properties"]
        indexes = tuple(
            IndexSpec(
                gsi["IndexName"],
                tuple(k["AttributeName"] for k in gsi["KeySchema"]),
                gsi["Projection"]["ProjectionType"],
                tuple(gsi["Projection"].get("NonKeyAttributes", [])),
            )
            for gsi in props.get("GlobalSecondaryIndexes", [])
        )
        keys = tuple(k["AttributeName"] for k in props["KeySchema"])
        specs[physical] = TableSpec(keys, indexes)
    return specs


# -- the meter -------------------------------------------------------------------------


@dataclass
class Units:
    requests: dict[str, int] = field(default_factory=dict)
    read_units: float = 0.0
    table_write_units: float = 0.0
    index_write_units: float = 0.0

    def add_request(self, operation: str) -> None:
        self.requests[operation] = self.requests.get(operation, 0) + 1

    @property
    def total(self) -> float:
        return self.read_units + self.table_write_units + self.index_write_units

    @property
    def dollars_per_million(self) -> float:
        writes = self.table_write_units + self.index_write_units
        return (
            self.read_units * DYNAMODB_USD_PER_MILLION_READ_UNITS
            + writes * DYNAMODB_USD_PER_MILLION_WRITE_UNITS
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": dict(sorted(self.requests.items())),
            "readUnits": self.read_units,
            "tableWriteUnits": self.table_write_units,
            "indexWriteUnits": self.index_write_units,
            "totalUnits": self.total,
            "dollarsPerMillion": self.dollars_per_million,
        }


def read_units(total_bytes: int, consistent: bool) -> float:
    units = max(1, math.ceil(total_bytes / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def batch_read_units(params: Mapping[str, Any], parsed: Mapping[str, Any]) -> float:
    """A BatchGetItem's read units: each key read as one GetItem (an item rounded up to
    4 KB on its own; a key that found nothing, the least a GetItem costs; a key left
    unprocessed, nothing), by its table's ConsistentRead."""
    units = 0.0
    for table, asked in params.get("RequestItems", {}).items():
        consistent = bool(asked.get("ConsistentRead"))
        found = parsed.get("Responses", {}).get(table, [])
        units += sum(read_units(item_size(item), consistent) for item in found)
        unread = parsed.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
        missing = len(asked.get("Keys", [])) - len(found) - len(unread)
        units += max(0, missing) * read_units(0, consistent)
    return units


def write_units(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> float:
    return float(max(1, math.ceil(max(item_size(before), item_size(after)) / WRITE_UNIT_BYTES)))


def index_write_units(
    spec: TableSpec, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> float:
    units = 0.0
    for index in spec.indexes:
        old_key, new_key = index.key_of(before), index.key_of(after)
        old = index.projected(before, spec.keys) if old_key and before else None
        new = index.projected(after, spec.keys) if new_key and after else None
        if old_key and old_key != new_key:
            units += max(1, math.ceil(item_size(old) / WRITE_UNIT_BYTES))
        if new_key and (old_key != new_key or old != new):
            units += max(1, math.ceil(item_size(new) / WRITE_UNIT_BYTES))
    return units


class CapacityMeter:
    """Counts the requests and capacity units of one boto3 DynamoDB client."""

    def __init__(self, client: Any, side_client: Any, specs: Mapping[str, TableSpec]) -> None:
        self._side = side_client
        self._specs = dict(specs)
        self._local = threading.local()
        self.units = Units()
        client.meta.events.register("provide-client-params.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb", self._after)

    def reset(self) -> Units:
        measured, self.units = self.units, Units()
        return measured

    def _key(self, table: str, item: Mapping[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in self._specs[table].keys}

    def _current(self, table: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._side.get_item(
            TableName=table, Key=dict(key), ConsistentRead=True
        ).get("Item")
        return found

    def _before(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        op = model.name
        # (table, key, item before, item put or None[, the transaction item's kind])
        pending: list[tuple[Any, ...]]
        pending = []
        table = params.get("TableName", "")
        if op == "PutItem" and table in self._specs:
            key = self._key(table, params["Item"])
            pending.append((table, key, self._current(table, key), params["Item"]))
        elif op in ("UpdateItem", "DeleteItem") and table in self._specs:
            key = dict(params["Key"])
            pending.append((table, key, self._current(table, key), None))
        elif op == "BatchWriteItem":
            for name, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        item = request["PutRequest"]["Item"]
                        key = self._key(name, item)
                        pending.append((name, key, self._current(name, key), item))
                    else:
                        key = dict(request["DeleteRequest"]["Key"])
                        pending.append((name, key, self._current(name, key), None))
        elif op == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((kind, body),) = entry.items()
                name = body["TableName"]
                if name not in self._specs:
                    continue
                key = self._key(name, body["Item"]) if kind == "Put" else dict(body["Key"])
                put = body["Item"] if kind == "Put" else None
                pending.append((name, key, self._current(name, key), put, kind))
        self._local.pending = (op, params, pending)

    def _after(self, model: Any, parsed: Mapping[str, Any], **_: Any) -> None:
        state: tuple[str, dict[str, Any], list[Any]] = getattr(self._local, "pending", None) or (
            model.name,
            {},
            [],
        )
        self._local.pending = None
        op: str = state[0]
        params: dict[str, Any] = state[1]
        pending: list[Any] = state[2]
        self.units.add_request(op)
        failed = "Error" in parsed
        if op in ("Query", "Scan", "GetItem"):
            found = parsed.get("Items") or ([parsed["Item"]] if parsed.get("Item") else [])
            total = sum(item_size(i) for i in found)
            self.units.read_units += read_units(total, bool(params.get("ConsistentRead")))
            return
        if op == "BatchGetItem":
            self.units.read_units += batch_read_units(params, parsed)
            return
        if op == "TransactWriteItems":
            self._transaction(pending, failed)
            return
        for table, key, before, put in pending:
            if failed:
                after = before
            elif op == "PutItem":
                after = put
            elif op == "DeleteItem" or (op == "BatchWriteItem" and put is None):
                after = None
            elif op == "BatchWriteItem":
                after = put
            else:
                after = self._current(table, key)
            self.units.table_write_units += write_units(before, after)
            if not failed:
                self.units.index_write_units += index_write_units(self._specs[table], before, after)

    def _transaction(self, pending: list[Any], failed: bool) -> None:
        """Each item of a transaction: its write units doubled; its index writes as a
        plain write's (a ConditionCheck changes nothing)."""
        for table, key, before, put, kind in pending:
            if failed or kind == "ConditionCheck":
                after = before
            elif kind == "Put":
                after = put
            elif kind == "Delete":
                after = None
            else:
                after = self._current(table, key)
            self.units.table_write_units += TRANSACTION_FACTOR * write_units(before, after)
            if not failed:
                self.units.index_write_units += index_write_units(self._specs[table], before, after)
