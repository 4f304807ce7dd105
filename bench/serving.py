"""Figures measured on the in-process stack (moto tables, the real handlers):
requests per turn by door, reads against history length, stream time to first event,
and predict latency with the summarizer working or failing."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.meter import TableMeter
from bench.stats import median, per_turn, percentile, ratio, reads_writes

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
DOORS: tuple[tuple[str, str], ...] = (
    ("predict", "POST /v1/capabilities/cap-generative/predict (HttpApi)"),
    ("messages", "POST /v1/sessions/{id}/messages (HttpApi)"),
    ("stream-buffered", "POST .../predict/stream (HttpApi, buffered)"),
    ("stream-url", "POST .../predict/stream (Function URL, streamed)"),
)
KEY_MODES: tuple[tuple[str, str], ...] = (
    ("none", "no Idempotency-Key"),
    ("new", "new Idempotency-Key"),
    ("replay", "same key again (replay)"),
)
HISTORY_SIZES = (10, 100, 1000)


@dataclass
class TurnTiming:
    status: int
    first_event_s: float
    total_s: float
    events: int


def _load_stream_module() -> Any:
    """functions/stream/app.py under a name of its own (every handler is ``app``)."""
    name = "bench_stream_door"
    if name in sys.modules:
        return sys.modules[name]
    path = ROOT / "functions" / "stream" / "app.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while decorating
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class Doors:
    """One turn through any of the four doors, timed to its first and last event."""

    def __init__(self, api: Any, token: str) -> None:
        self.api = api
        self.token = token
        self.url_door = _load_stream_module().StreamDoor(lambda: api.container)

    def open_session(self, capability: str = CAP) -> str:
        body = {"capabilityId": capability, "externalRef": f"bench-{uuid.uuid4().hex[:8]}"}
        response = self.api.call("POST", "/v1/sessions", token=self.token, json_body=body)
        if response.status != 201:
            raise RuntimeError(f"could not open a session: {response.status} {response.body}")
        return str(response.body["id"])

    def turn(
        self,
        door: str,
        session_id: str,
        text: str,
        key: str | None = None,
        capability: str = CAP,
    ) -> TurnTiming:
        headers = {"Idempotency-Key": key} if key else {}
        body = {"input": text, "sessionId": session_id}
        began = time.perf_counter()
        if door == "stream-url":
            return self._url_turn(capability, body, headers, began)
        if door == "predict":
            path = f"/v1/capabilities/{capability}/predict"
        elif door == "stream-buffered":
            path = f"/v1/capabilities/{capability}/predict/stream"
        elif door == "messages":
            path, body = f"/v1/sessions/{session_id}/messages", {"input": text}
        else:
            raise ValueError(f"unknown door {door!r}")
        response = self.api.call("POST", path, token=self.token, json_body=body, headers=headers)
        elapsed = time.perf_counter() - began
        if response.status != 200:
            raise RuntimeError(f"{door} turn failed: {response.status} {response.body}")
        events = str(response.body).count("event: ") if door == "stream-buffered" else 1
        if door == "stream-buffered" and "event: done" not in str(response.body):
            raise RuntimeError(f"buffered stream ended without a done event: {response.body}")
        # API Gateway delivers a buffered body at once: the first event is the last.
        return TurnTiming(response.status, elapsed, elapsed, events)

    def _url_turn(
        self, capability: str, body: dict[str, Any], headers: dict[str, str], began: float
    ) -> TurnTiming:
        all_headers = {
            "authorization": f"Bearer {self.token}",
            "content-type": "application/json",
            **headers,
        }
        path = f"/v1/capabilities/{capability}/predict/stream"
        response = self.url_door.handle("POST", path, all_headers, json.dumps(body).encode())
        first: float | None = None
        last = b""
        events = 0
        for chunk in response.chunks:
            if first is None:
                first = time.perf_counter() - began
            events += 1
            last = chunk
        total = time.perf_counter() - began
        if response.status != 200 or not last.startswith(b"event: done"):
            raise RuntimeError(f"stream door failed: {response.status} {last[:300]!r}")
        return TurnTiming(response.status, first if first is not None else total, total, events)


def table_labels(api: Any) -> dict[str, str]:
    """Physical table name -> short label (ConversationsTable -> conversations)."""
    return {
        name: logical.removesuffix("Table").lower()
        for logical, name in api.resources.tables.items()
    }


def _summarize(samples: list[dict[str, dict[str, int]]]) -> dict[str, Any]:
    """Per-table average requests per turn, plus whether every turn did the same."""
    labels = sorted({label for sample in samples for label in sample})
    tables: dict[str, Any] = {}
    for label in labels:
        ops = per_turn([sample.get(label, {}) for sample in samples])
        reads, writes = reads_writes(ops)
        tables[label] = {"reads": reads, "writes": writes, "ops": ops}
    consistent = all(sample == samples[0] for sample in samples)
    return {"turns": len(samples), "consistent": consistent, "tables": tables}


# --------------------------------------------------------------------- figure 1


def requests_per_turn(api: Any, doors: Doors, meter: TableMeter, turns: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for door, door_label in DOORS:
        session_id = doors.open_session()
        doors.turn(door, session_id, "warm-up: the container, its caches and clients")
        for mode, mode_label in KEY_MODES:
            if mode == "new":  # the first keyed request also warms the idempotency layer
                doors.turn(door, session_id, "warm-up with a key", key=uuid.uuid4().hex)
            samples: list[dict[str, dict[str, int]]] = []
            for i in range(turns):
                text = f"{door} turn {i} ({mode})"
                key = uuid.uuid4().hex if mode != "none" else None
                if mode == "replay":  # the first request with this key, not measured
                    doors.turn(door, session_id, text, key=key)
                meter.reset()
                doors.turn(door, session_id, text, key=key)
                samples.append(meter.snapshot())
            rows.append(
                {"door": door, "doorLabel": door_label, "key": mode, "keyLabel": mode_label}
                | _summarize(samples)
            )
    return {"rows": rows}


# --------------------------------------------------------------------- figure 2


def storage_cost_by_history(api: Any, doors: Doors) -> dict[str, Any]:
    """Requests and capacity units of a warm turn at 10, 100 and 1,000 messages of
    history (120-character messages; past the replay window a summary of the default
    2,000 characters is stored, as once the summarizer has caught up), and of the turn
    that moves the head's coarse activity mark, amortized at a few paces."""
    import boto3

    from bench.capacity import CapacityMeter, Units, table_specs
    from convo_memory.domain.models import Summary
    from tests.support.inprocess_api import seed_history

    tables = api.resources.tables
    specs = table_specs(ROOT / "template.yaml", tables)
    side = boto3.client("dynamodb", region_name="us-east-1")
    meter = CapacityMeter(api.container.infrastructure.clients["dynamodb"], side, specs)
    warm = doors.open_session()
    doors.turn("predict", warm, "warm-up")
    question = "And what about the other one? Can you check it as well, please?".ljust(120, ".")
    rows: list[dict[str, Any]] = []
    for size in HISTORY_SIZES:
        session_id = doors.open_session()
        seed_history(api, session_id, size)
        summary_chars = 0
        if size > 20:
            summary_chars = 2_000
            summary = Summary(text="s" * summary_chars, through_seq=size - 20)
            assert api.container.adapters.stores.summaries.advance_summary(session_id, 0, summary)
        doors.turn("predict", warm, "keep the container warm")
        meter.reset()
        doors.turn("predict", session_id, question)
        rows.append({"history": size, "summaryChars": summary_chars} | meter.reset().to_dict())

    # The first turn after an hour: the head's activity mark moves before the model runs.
    # Measured against the next turn of the same session (same history and summary).
    session_id = doors.open_session()
    seed_history(api, session_id, 100)
    summary = Summary(text="s" * 2_000, through_seq=80)
    assert api.container.adapters.stores.summaries.advance_summary(session_id, 0, summary)
    side.update_item(
        TableName=tables["ConversationsTable"],
        Key={"pk": {"S": f"SESSION#{session_id}"}, "sk": {"S": "SESSION"}},
        UpdateExpression="SET lastActiveAt = :at, gsi2sk = :at",
        ExpressionAttributeValues={":at": {"S": "2020-01-01T00:00:00.000Z"}},
    )
    doors.turn("predict", warm, "keep the container warm")
    meter.reset()
    doors.turn("predict", session_id, question)
    moving: Units = meter.reset()
    doors.turn("predict", session_id, question)
    after: Units = meter.reset()
    extra_units = moving.total - after.total
    extra_dollars = moving.dollars_per_million - after.dollars_per_million
    granularity_h = api.container.settings.activity_granularity_seconds / 3600
    paces = []
    for label, turns_per_hour in (
        ("a turn every 30 s", 120),
        ("a turn every 5 min", 12),
        ("one turn per granularity (worst)", 1 / granularity_h),
    ):
        share = min(1.0, 1 / (turns_per_hour * granularity_h))  # touches per turn
        paces.append(
            {
                "pace": label,
                "unitsPerTurn": max(r["totalUnits"] for r in rows) + extra_units * share,
                "dollarsPerMillion": max(r["dollarsPerMillion"] for r in rows)
                + extra_dollars * share,
            }
        )
    return {
        "rows": rows,
        "markMove": moving.to_dict(),
        "markExtraUnits": extra_units,
        "granularityHours": granularity_h,
        "paces": paces,
    }


# --------------------------------------------------------------------- figure 4


def stream_first_event(
    api: Any, doors: Doors, meter: TableMeter, runs: int, chunk_delay: float = 0.02
) -> dict[str, Any]:
    from convo_memory.adapters.providers.embedded import EmbeddedChatProvider

    answerer = api.container.turns._answerer
    original: Callable[[Any], Any] = answerer._provider_for
    answerer._provider_for = lambda cap: EmbeddedChatProvider(chunk_delay=chunk_delay)
    try:
        sessions = {door: doors.open_session() for door in ("stream-buffered", "stream-url")}
        timings: dict[str, list[TurnTiming]] = {door: [] for door in sessions}
        samples: dict[str, list[dict[str, dict[str, int]]]] = {door: [] for door in sessions}
        for door, session_id in sessions.items():
            doors.turn(door, session_id, "warm-up")
        for i in range(runs):
            for door, session_id in sessions.items():  # interleaved
                meter.reset()
                timings[door].append(doors.turn(door, session_id, f"tell me more, part {i}"))
                samples[door].append(meter.snapshot())
    finally:
        answerer._provider_for = original
    rows = []
    for door, measured in timings.items():
        first = median([t.first_event_s for t in measured])
        total = median([t.total_s for t in measured])
        rows.append(
            {
                "door": door,
                "firstEventSeconds": first,
                "totalSeconds": total,
                "ratio": ratio(first, total),
                "events": median([t.events for t in measured]),
                "runs": len(measured),
            }
            | _summarize(samples[door])
        )
    return {"chunkDelaySeconds": chunk_delay, "rows": rows}


# --------------------------------------------------------------------- figure 5


class SummaryWorker(threading.Thread):
    """The SQS event source mapping of SummarizeFunction, in the background: short
    polls (a long poll would hold moto's lock), invokes the function with the batch,
    deletes what succeeded."""

    def __init__(self, api: Any, sqs: Any, deadline_s: float) -> None:
        super().__init__(name="bench-summary-worker", daemon=True)
        from local_runtime.aws_resources import function_specs

        self.api = api
        self.sqs = sqs
        self.url = api.resources.queue_urls["SummaryQueue"]
        self.arn = sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        spec = function_specs()["SummarizeFunction"]
        self.batch_size = spec.sqs_batch_size or 10
        self.report_failures = spec.report_batch_item_failures
        self.deadline = time.monotonic() + deadline_s
        self.stopping = threading.Event()
        self.idle = threading.Event()
        self.lock = threading.Lock()
        self.invocations = 0
        self.records_ok = 0
        self.records_failed = 0
        self.errors: list[str] = []

    def run(self) -> None:
        from local_runtime.queue_pollers import delete_records, sqs_event, succeeded_records

        while not self.stopping.is_set() and time.monotonic() < self.deadline:
            messages = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=self.batch_size,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                self.idle.set()
                self.stopping.wait(0.02)
                continue
            self.idle.clear()
            event = sqs_event(messages, self.arn)
            try:
                result = self.api.invoke("SummarizeFunction", event)
            except Exception as exc:  # the whole batch failed: SQS redelivers it later
                result, done = None, []
                if len(self.errors) < 3:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                done = succeeded_records(event["Records"], result, self.report_failures)
            delete_records(self.sqs, self.url, done)
            with self.lock:
                self.invocations += 1
                self.records_ok += len(done)
                self.records_failed += len(messages) - len(done)

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            return self.invocations, self.records_ok, self.records_failed

    def wait_drained(self, timeout_s: float) -> bool:
        """Until no message is visible and the worker has found the queue empty."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.idle.clear()
            if self.idle.wait(max(0.0, end - time.monotonic())):
                attrs = self.sqs.get_queue_attributes(
                    QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages"]
                )["Attributes"]
                if int(attrs.get("ApproximateNumberOfMessages", "0")) == 0:
                    return True
        return False


@contextmanager
def _summarizer_failing(failing: bool) -> Iterator[None]:
    from convo_memory.adapters.summarizers import FAIL_ENV

    saved = os.environ.get(FAIL_ENV)
    if failing:
        os.environ[FAIL_ENV] = "1"
    else:
        os.environ.pop(FAIL_ENV, None)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(FAIL_ENV, None)
        else:
            os.environ[FAIL_ENV] = saved


def summarizer_isolation(turns: int, blocks: int) -> dict[str, Any]:
    """Predict latency while SummarizeFunction works or fails, in the same run.

    The capability replays at most 4 messages, so from the third turn on every turn
    omits messages the summary does not cover yet; coalescing and the queue delay are
    set to 0 so that every such turn enqueues a job (the most summarizer traffic the
    serving path can cause). Blocks of turns alternate between the modes."""
    from local_runtime.aws_resources import function_specs

    spec = function_specs()["SummarizeFunction"]
    if not (spec.code_uri / "app.py").is_file():
        return {"available": False, "reason": "summarize handler not available"}

    import boto3

    from tests.support.inprocess_api import (
        REGION,
        inprocess_stack,
        new_workspace,
        serialized,
    )

    env = {"SUMMARY_COALESCE_SECONDS": "0", "SUMMARY_DELAY_SECONDS": "0"}
    latencies: dict[str, list[float]] = {"working": [], "failing": []}
    requests: dict[str, list[dict[str, dict[str, int]]]] = {"working": [], "failing": []}
    jobs: dict[str, list[int]] = {"working": [0, 0, 0], "failing": [0, 0, 0]}
    summaries: dict[str, int] = {"working": 0, "failing": 0}
    with inprocess_stack(env) as api:
        _, token = new_workspace(api, "bench-summarizer")
        doors = Doors(api, token)
        created = api.call(
            "POST",
            "/v1/capabilities",
            token=token,
            json_body={
                "name": "bench small window",
                "kind": "generative",
                "replay": {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1},
            },
        )
        if created.status != 201:
            raise RuntimeError(f"could not create the capability: {created.body}")
        cap = str(created.body["id"])
        # The foreground's own requests (the summarizer shares the container's clients).
        meter = TableMeter(table_labels(api), only_thread=threading.current_thread())
        meter.attach(api.container.infrastructure.clients["dynamodb"])
        meter.attach(api.container.infrastructure.clients["sqs"], "sqs")
        sqs = serialized(boto3.client("sqs", region_name=REGION))
        worker = SummaryWorker(api, sqs, deadline_s=150)
        worker.start()
        try:
            # Warm-up: load SummarizeFunction and warm every cache, in both modes.
            for mode in ("working", "failing"):
                with _summarizer_failing(mode == "failing"):
                    session_id = doors.open_session(cap)
                    for i in range(4):
                        doors.turn("predict", session_id, f"warm-up {i}", capability=cap)
                    worker.wait_drained(5)
            order = ["working", "failing"] * blocks
            for index, mode in enumerate(order):
                if index % 4 >= 2:  # W F F W W F ...: neither mode always goes first
                    mode = "failing" if mode == "working" else "working"
                with _summarizer_failing(mode == "failing"):
                    before = worker.counts()
                    session_id = doors.open_session(cap)
                    for i in range(turns):
                        meter.reset()
                        timing = doors.turn(
                            "predict", session_id, f"{mode} turn {i}", capability=cap
                        )
                        latencies[mode].append(timing.total_s)
                        requests[mode].append(meter.snapshot())
                    worker.wait_drained(10)
                    after = worker.counts()
                for slot in range(3):
                    jobs[mode][slot] += after[slot] - before[slot]
                context = api.call("GET", f"/v1/sessions/{session_id}/context", token=token).body
                summaries[mode] += 1 if context.get("summary") else 0
        finally:
            worker.stopping.set()
            worker.join(timeout=10)
    modes: dict[str, dict[str, Any]] = {}
    for mode, values in latencies.items():
        modes[mode] = {
            "turns": len(values),
            "medianSeconds": median(values),
            "p95Seconds": percentile(values, 95),
            "summarizeInvocations": jobs[mode][0],
            "jobsSucceeded": jobs[mode][1],
            "jobsFailed": jobs[mode][2],
            "sessionsWithSummary": summaries[mode],
            "sessions": blocks,
            "predictRequests": _summarize(requests[mode]),
        }
    return {
        "available": True,
        "modes": modes,
        "medianRatio": ratio(modes["failing"]["medianSeconds"], modes["working"]["medianSeconds"]),
        "p95Ratio": ratio(modes["failing"]["p95Seconds"], modes["working"]["p95Seconds"]),
        "workerErrors": worker.errors,
    }


# --------------------------------------------------------------------- driver


def serving_figures(
    turns: int, stream_runs: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Figures 1, 2 and 4, on one in-process stack."""
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench")
        doors = Doors(api, token)
        dynamodb = api.container.infrastructure.clients["dynamodb"]
        meter = TableMeter(table_labels(api)).attach(dynamodb)
        progress("requests per turn by door")
        per_door = requests_per_turn(api, doors, meter, turns)
        progress("storage cost against history length")
        history = storage_cost_by_history(api, doors)
        progress("stream time to first event")
        stream = stream_first_event(api, doors, meter, stream_runs)
    return {"requestsPerTurn": per_door, "storageCost": history, "streamFirstEvent": stream}
