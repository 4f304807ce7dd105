"""Tool digests: a truncated record of what an agent's tools returned in one turn.

Built from the real results of the turn's tool calls (a failed or timed-out call shows
its status), each call getting an equal share of the turn's budget. The text is data:
it is replayed inside a fence (``domain.prompt.fence``), never as instructions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

TRUNCATION_MARK = " …[truncated]"


class ToolResult(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def input(self) -> Mapping[str, Any]: ...

    @property
    def output(self) -> str: ...


def build_tool_digest(calls: Sequence[ToolResult], max_chars: int) -> str | None:
    """One line per tool call, the whole digest held within ``max_chars``.

    Each call gets an equal share of the budget so that one verbose tool cannot crowd
    out the others; the text is data and is fenced when replayed."""
    if not calls:
        return None
    # Equal shares of what is left after the newlines that join the lines.
    share = max(1, (max_chars - (len(calls) - 1)) // len(calls))
    lines = []
    for call in calls:
        args = json.dumps(dict(call.input), sort_keys=True, ensure_ascii=False)
        status = getattr(call, "status", "ok")
        marker = "" if status == "ok" else f"[{status}] "
        line = f"{call.name}({args}) -> {marker}{call.output}"
        if len(line) > share:
            line = line[: max(0, share - len(TRUNCATION_MARK))] + TRUNCATION_MARK
            line = line[:share]
        lines.append(line)
    return "\n".join(lines)[:max_chars]
