"""Server-Sent Events framing for the streaming door."""

from __future__ import annotations

import json
from typing import Any


def sse_event(name: str, data: Any) -> str:
    """One SSE event; data is JSON on a single line (so it cannot inject events)."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"
