"""DynamoDB requests by table and operation, next to ``tests.support.dynamo_meter``
(which counts by operation only): the idempotency table's requests are reported apart
from the conversations table's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from bench.stats import tables_of


class TableMeter:
    def __init__(self, labels: Mapping[str, str]) -> None:
        """``labels`` maps a physical table name to the name the report uses."""
        self.labels = dict(labels)
        self.requests: dict[str, Counter[str]] = {}

    def attach(self, client: Any) -> TableMeter:
        # before-parameter-build sees the Python parameters (before-call sees the wire).
        client.meta.events.register("before-parameter-build.dynamodb", self._before)
        return self

    def reset(self) -> None:
        self.requests = {}

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {label: dict(ops) for label, ops in self.requests.items()}

    def _before(self, model: Any, params: Mapping[str, Any], **_: Any) -> None:
        names = tables_of(model.name, params)
        label = "+".join(self.labels.get(name, name) for name in names)
        self.requests.setdefault(label, Counter())[model.name] += 1
