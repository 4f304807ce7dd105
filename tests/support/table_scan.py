"""What the stack's tables hold, read whole (a test's own moto backend only: a scan reads
every workspace's items): for "nothing of this end user is left anywhere" checks."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tests.support.inprocess_api import InProcessApi


def every_item(api: InProcessApi) -> dict[str, list[dict[str, Any]]]:
    """Every item of every table of the stack, by the table's logical id."""
    dynamodb = api.container.infrastructure.clients["dynamodb"]
    found: dict[str, list[dict[str, Any]]] = {}
    for logical_id, name in api.resources.tables.items():
        items: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        while True:
            out = dynamodb.scan(TableName=name, **({"ExclusiveStartKey": start} if start else {}))
            items += out.get("Items", [])
            start = out.get("LastEvaluatedKey")
            if not start:
                break
        found[logical_id] = items
    return found


def items_naming(items: Iterable[dict[str, Any]], needles: Iterable[str]) -> list[dict[str, Any]]:
    """The items in which any of ``needles`` appears, in a key or a value."""
    wanted = [needle for needle in needles if needle]
    return [item for item in items if any(n in json.dumps(item) for n in wanted)]
