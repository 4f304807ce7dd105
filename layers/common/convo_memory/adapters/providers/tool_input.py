"""A model's tool call as a ``ToolRequest``, whatever the provider's wire shape."""

from __future__ import annotations

import json
from typing import Any

from convo_memory.domain.tools import ToolRequest


def tool_request(call_id: str, name: str, raw: Any, what: str = "input") -> ToolRequest:
    """``raw`` is a JSON object or its text (empty text: no arguments). Anything else
    becomes a request that carries its error, answered to the model as the tool's result
    instead of being called."""
    were = f"{what} were" if what.endswith("s") else f"{what} was"
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return ToolRequest(call_id, name, {}, f"the model's tool {were} not valid JSON")
    if not isinstance(raw, dict):
        return ToolRequest(call_id, name, {}, f"the model's tool {were} not a JSON object")
    return ToolRequest(call_id, name, raw)
