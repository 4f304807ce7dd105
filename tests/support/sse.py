"""Server-Sent Events as the turn doors write them: one ``event:`` and one ``data:`` line
(JSON) per event."""

from __future__ import annotations

import json
from typing import Any


def parse_sse(raw: str) -> list[tuple[str, Any]]:
    """The events of a whole stream, in order: (event name, parsed data)."""
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events
