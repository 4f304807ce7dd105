"""Powertools Metrics (CloudWatch EMF) behind the services' tiny metrics port."""

from __future__ import annotations

from typing import Any


class PowertoolsMetrics:
    def __init__(self) -> None:
        from aws_lambda_powertools import Metrics

        self.metrics: Any = Metrics()

    def count(self, name: str, value: int = 1) -> None:
        from aws_lambda_powertools.metrics import MetricUnit

        self.metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        # Flush now: the serving path is not always wrapped in log_metrics (streaming,
        # local runtime), and a lost failure count would hide exactly the faults we count.
        self.metrics.flush_metrics()
