"""Pure helpers of the benchmark: aggregation and plain-text tables. No I/O, no AWS."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

READ_OPS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
WRITE_OPS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of nothing")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0-100): always one of the observed values."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def verdict(value: float | None, limit: float) -> str:
    """PASS when ``value`` is at most ``limit``; n/a without a value."""
    if value is None:
        return "n/a"
    return "PASS" if value <= limit else "FAIL"


def per_turn(samples: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """Average count per turn of each key over the measured turns."""
    if not samples:
        return {}
    total: Counter[str] = Counter()
    for sample in samples:
        total.update(sample)
    return {key: total[key] / len(samples) for key in sorted(total) if total[key]}


def reads_writes(ops: Mapping[str, float]) -> tuple[float, float]:
    reads = sum(n for op, n in ops.items() if op in READ_OPS)
    writes = sum(n for op, n in ops.items() if op in WRITE_OPS)
    return reads, writes


def tables_of(operation: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The table names one DynamoDB request touches (sorted, without repeats)."""
    names: set[str] = set()
    if isinstance(params.get("TableName"), str):
        names.add(params["TableName"])
    request_items = params.get("RequestItems")
    if isinstance(request_items, Mapping):  # BatchGetItem / BatchWriteItem
        names.update(str(name) for name in request_items)
    for item in params.get("TransactItems") or ():  # TransactWriteItems / TransactGetItems
        if isinstance(item, Mapping):
            for action in item.values():
                if isinstance(action, Mapping) and isinstance(action.get("TableName"), str):
                    names.add(action["TableName"])
    return tuple(sorted(names)) or ("?",)


def num(value: float | None, digits: int = 1) -> str:
    """Counts print as integers when they are whole, else with ``digits`` decimals."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.{digits}f}"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def ops_text(ops: Mapping[str, float]) -> str:
    if not ops:
        return "none"
    return ", ".join(f"{op} {num(n, 2)}" for op, n in sorted(ops.items()))


def capacity_cells(units: Mapping[str, Any]) -> list[str]:
    """A ``bench.capacity.Units`` record as table cells: requests, read units, write units
    (table and indexes), all units."""
    return [
        ops_text(units["requests"]),
        num(units["readUnits"], 1),
        num(units["tableWriteUnits"] + units["indexWriteUnits"], 1),
        num(units["totalUnits"], 1),
    ]


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned text columns; numbers (and n/a dashes) right-aligned."""
    body = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, expected {len(headers)}: {row}")
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def numeric(cell: str) -> bool:
        stripped = cell.rstrip("x%").replace(".", "", 1).replace("-", "", 1).replace("+", "", 1)
        return stripped.isdigit() or cell == "-"

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.rjust(width) if numeric(cell) else cell.ljust(width)
            for cell, width in zip(cells, widths, strict=True)
        ]
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(row) for row in body)])
