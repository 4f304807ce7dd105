"""DynamoDB requests by table and operation, next to ``tests.support.dynamo_meter``
(which counts by operation only): the idempotency table's requests are reported apart
from the conversations table's. Optionally only one thread's requests are counted."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from bench.stats import tables_of


class TableMeter:
    def __init__(
        self, labels: Mapping[str, str], only_thread: threading.Thread | None = None
    ) -> None:
        """``labels`` maps a physical table name to the name the report uses;
        with ``only_thread``, requests made by other threads are not counted."""
        self.labels = dict(labels)
        self.only_thread = only_thread
        self.requests: dict[str, Counter[str]] = {}

    def attach(self, client: Any, service: str = "dynamodb") -> TableMeter:
        """Count ``client``'s requests: DynamoDB ones by table, others (``sqs``) under
        the service's name. before-parameter-build sees the Python parameters."""
        handler = self._before if service == "dynamodb" else self._other(service)
        client.meta.events.register(f"before-parameter-build.{service}", handler)
        return self

    def reset(self) -> None:
        self.requests = {}

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {label: dict(ops) for label, ops in self.requests.items()}

    def _counted(self) -> bool:
        return self.only_thread is None or threading.current_thread() is self.only_thread

    def _before(self, model: Any, params: Mapping[str, Any], **_: Any) -> None:
        if not self._counted():
            return
        names = tables_of(model.name, params)
        label = "+".join(self.labels.get(name, name) for name in names)
        self.requests.setdefault(label, Counter())[model.name] += 1

    def _other(self, service: str) -> Any:
        def count(model: Any, **_: Any) -> None:
            if self._counted():
                self.requests.setdefault(service, Counter())[model.name] += 1

        return count
