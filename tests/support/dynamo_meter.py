"""Counts what a DynamoDB client does: requests by operation, items and bytes read.
Hooks botocore's event system, so it measures the real adapter's real calls."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


@dataclass
class DynamoMeter:
    requests: Counter[str] = field(default_factory=Counter)
    items_read: int = 0
    bytes_read: int = 0

    def attach(self, client: Any) -> DynamoMeter:
        client.meta.events.register("before-call.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb", self._after)
        return self

    def reset(self) -> None:
        self.requests.clear()
        self.items_read = 0
        self.bytes_read = 0

    @property
    def reads(self) -> int:
        return sum(n for op, n in self.requests.items() if op in READS)

    @property
    def writes(self) -> int:
        return sum(n for op, n in self.requests.items() if op in WRITES)

    def _before(self, model: Any, **_: Any) -> None:
        self.requests[model.name] += 1

    def _after(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if model.name not in READS:
            return
        items = parsed.get("Items")
        if items is None:
            items = [parsed["Item"]] if parsed.get("Item") else []
        self.items_read += len(items)
        self.bytes_read += sum(len(json.dumps(item)) for item in items)
