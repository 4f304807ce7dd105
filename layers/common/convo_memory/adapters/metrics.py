"""Powertools Metrics (CloudWatch EMF) behind the services' metrics port."""

from __future__ import annotations

import os


class PowertoolsMetrics:
    """Each metric is written at once as its own EMF record (``single_metric``), with its
    own dimensions: the serving path is not always wrapped in ``log_metrics`` (streaming,
    the local runtime), and a lost failure count would hide exactly the faults it counts."""

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = namespace or os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "ConvoMemory")

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        self._emit(name, "Count", value, dimensions)

    def timing(self, name: str, milliseconds: float, **dimensions: str) -> None:
        self._emit(name, "Milliseconds", milliseconds, dimensions)

    def _emit(self, name: str, unit: str, value: float, dimensions: dict[str, str]) -> None:
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        with single_metric(
            name=name, unit=MetricUnit(unit), value=value, namespace=self.namespace
        ) as metric:
            for key, dimension in dimensions.items():
                metric.add_dimension(name=key, value=str(dimension))
