"""Run as a script by bench.cold (never imported): one cold start of a handler, timed.

    python cold_probe.py <function dir> <seed.json>

Times, in a fresh interpreter: ``import app``; ``import boto3`` (what the first container
build pays when the handler module did not import it); building the container; the
first request (cold caches, first use of every client); then warm requests (median).
Setting up moto and seeding the tables happens between the timers, with a client of
its own, so none of it is counted and none of it warms what is measured.
Prints one line: ``BENCH_RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(function_dir: str, seed_path: str) -> dict[str, Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, function_dir)
    os.chdir(function_dir)
    figures: dict[str, Any] = {}

    began = time.perf_counter()
    import app

    figures["importApp"] = time.perf_counter() - began

    already = "boto3" in sys.modules
    began = time.perf_counter()
    import boto3

    figures["importBoto3"] = time.perf_counter() - began
    figures["boto3ImportedByApp"] = already

    # ---- not timed: an in-process AWS (moto) with the template's tables, seeded
    with open(seed_path, encoding="utf-8") as handle:
        seed = json.load(handle)
    from moto import mock_aws

    mock = mock_aws()
    mock.start()
    from local_runtime.aws_resources import ensure_resources
    from local_runtime.handlers import LambdaContext

    resources = ensure_resources(boto3.session.Session(region_name=seed["region"]))
    os.environ.update(resources.env())
    seeder = boto3.session.Session(region_name=seed["region"]).client("dynamodb")
    table = resources.env()["TABLE_NAME"]
    items = seed["items"]
    for start in range(0, len(items), 25):
        seeder.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]}
        )

    def context() -> Any:
        return LambdaContext("PredictFunction", 512, "arn:aws:lambda:::function:bench", "r", 60)

    # ---- timed again
    began = time.perf_counter()
    from convo_memory.execution_environment import get_container

    get_container()
    figures["buildContainer"] = time.perf_counter() - began

    spent = []
    for event in seed["events"]:
        began = time.perf_counter()
        result = app.handler(event, context())
        spent.append(time.perf_counter() - began)
        if result.get("statusCode") != 200:
            raise SystemExit(f"request answered {result.get('statusCode')}: {result.get('body')}")
    figures["firstRequest"] = spent[0]
    warm = sorted(spent[1:])
    figures["warmRequest"] = warm[len(warm) // 2]  # the median of the warm requests
    mock.stop()
    return figures


if __name__ == "__main__":
    out = main(sys.argv[1], sys.argv[2])
    sys.stdout.write("BENCH_RESULT " + json.dumps(out) + "\n")
