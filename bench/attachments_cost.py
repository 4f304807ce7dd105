"""Figure 23: a turn with an image (v5). Four warm turns of one end user on the chat door,
in sessions of the seeded generative capability: a turn without attachments, one that
sends a new 500 KB image, the next turn (the image replayed from its window) and the same
image sent again in another session of the same end user (stored once: no second
object). For each: DynamoDB requests and capacity units (``bench.capacity``) and S3
requests and bytes. A turn whose message carries no attachment makes the same DynamoDB
requests and units whatever its window holds.

On the in-process stack (moto's DynamoDB and S3, the real handlers).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
IMAGE_BYTES = 500_000


class S3Meter:
    """S3 requests by operation, and the bytes each way."""

    def __init__(self, client: Any) -> None:
        self.requests: Counter[str] = Counter()
        self.bytes_in = self.bytes_out = 0
        client.meta.events.register("before-parameter-build.s3", self._before)
        client.meta.events.register("after-call.s3.GetObject", self._got)

    def _before(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.requests[model.name] += 1
        body: Any = params.get("Body")
        if isinstance(body, bytes | bytearray):
            self.bytes_in += len(body)
        elif body is not None and hasattr(body, "getbuffer"):  # boto3 hands bytes as BytesIO
            self.bytes_in += body.getbuffer().nbytes

    def _got(self, parsed: dict[str, Any], **_: Any) -> None:
        self.bytes_out += int(parsed.get("ContentLength") or 0)

    def take(self) -> dict[str, Any]:
        taken = {"requests": dict(self.requests), "in": self.bytes_in, "out": self.bytes_out}
        self.requests, self.bytes_in, self.bytes_out = Counter(), 0, 0
        return taken


def attachments_figure(progress: Callable[[str], None]) -> dict[str, Any]:
    """Figure 23 (see the module docstring)."""
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from tests.support.inprocess_api import inprocess_stack, new_workspace
    from tests.support.sample_files import data_url, padded_png

    progress("attachments: a turn with an image, and the turns after it")
    image = {
        "type": "image_url",
        "image_url": {"url": data_url("image/png", padded_png(IMAGE_BYTES))},
    }
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-attachments")

        def turn(key: str, content: Any) -> None:
            body = {
                "model": CAP,
                "user": "bench-user",
                "messages": [{"role": "user", "content": content}],
            }
            headers = {"X-Convo-Session-Key": key}
            answer = api.call(
                "POST", "/v1/chat/completions", token=token, json_body=body, headers=headers
            )
            if answer.status != 200:
                raise RuntimeError(f"a turn failed: {answer.status} {answer.body}")

        turn("warm", "warm-up")
        turn("one", "a first message")
        clients = api.container.infrastructure.clients
        dynamodb = CapacityMeter(
            clients["dynamodb"],
            boto3.client("dynamodb", region_name="us-east-1"),
            table_specs(ROOT / "template.yaml", api.resources.tables),
        )
        s3 = S3Meter(clients["s3"])
        steps = [
            ("a turn without attachments", "one", "Where is order 12345?"),
            (
                "a turn sending a new 500 KB image",
                "one",
                [{"type": "text", "text": "This?"}, image],
            ),
            ("the next turn (the image in its window)", "one", "And now?"),
            ("the same image, another session (opening it)", "two", [image]),
        ]
        rows = []
        for case, key, content in steps:
            dynamodb.reset()
            s3.take()
            turn(key, content)
            rows.append({"case": case, "s3": s3.take()} | dynamodb.reset().to_dict())
    plain, replay = rows[0], rows[2]
    same = (plain["requests"], plain["totalUnits"]) == (replay["requests"], replay["totalUnits"])
    return {"imageBytes": IMAGE_BYTES, "rows": rows, "plainTurnsAlike": same}


def render_attachments(figure: dict[str, Any], table: Any, title: str) -> str:
    """The figure as text (``table``: ``bench.stats.table``)."""
    from bench.stats import capacity_cells as units
    from bench.stats import ops_text

    rows = [
        [
            r["case"],
            *units(r),
            ops_text(r["s3"]["requests"]) or "-",
            f"{r['s3']['in']:,}",
            f"{r['s3']['out']:,}",
        ]
        for r in figure["rows"]
    ]
    alike = "the same" if figure["plainTurnsAlike"] else "NOT the same"
    return "\n".join(
        [
            title,
            "warm, in process (moto); DynamoDB units as in figure 2; S3 bytes written and read",
            table(
                ["turn", "requests", "RRU", "WRU", "units", "S3 requests", "S3 in", "S3 out"], rows
            ),
            f"a turn whose message carries no attachment: {alike} DynamoDB requests and units "
            "with an image in its window as without",
        ]
    )
