"""Exporting an end user's data (their right to it): every session of one externalRef,
newest first, each followed by its messages, oldest first, as JSON Lines.

    {"type": "session", "id": ..., "capabilityId": ..., "externalRef": ..., ...}
    {"type": "message", "sessionId": ..., "seq": 1, "role": "user", "content": ..., ...}

Each line is the service's own JSON of the session or message (every field it sends,
including those this version of the client does not model), with ``type`` first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from convo_memory_client.client import Conversations

__all__ = ["export_end_user", "export_lines"]

# Pages as large as the service allows: fewer requests for a long history.
PAGE_SIZE = 100


def export_lines(client: Conversations, external_ref: str) -> Iterator[dict[str, Any]]:
    """The end user's sessions (newest first), each followed by its messages (oldest
    first), page after page, as they are read."""
    for session in client.sessions.list(external_ref, limit=PAGE_SIZE):
        yield {"type": "session", **session.raw}
        for message in client.sessions.messages(session.id, limit=PAGE_SIZE):
            yield {"type": "message", "sessionId": session.id, **message.raw}


def export_end_user(
    client: Conversations, external_ref: str, write: Callable[[str], object]
) -> tuple[int, int]:
    """Write every line of the export (each with its newline): (sessions, messages)."""
    sessions = messages = 0
    for line in export_lines(client, external_ref):
        if line["type"] == "session":
            sessions += 1
        else:
            messages += 1
        write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    return sessions, messages
