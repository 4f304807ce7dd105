"""Exporting an end user's data (their right to it): every session of one externalRef,
newest first, each followed by its messages, oldest first, as JSON Lines.

    {"type": "session", "id": ..., "capabilityId": ..., "externalRef": ..., ...}
    {"type": "message", "sessionId": ..., "seq": 1, "role": "user", "content": ..., ...}
    {"type": "attachment", "sessionId": ..., "seq": 1, "kind": "image", "data": ...}

Each session or message line is the service's own JSON of it (every field it sends,
including those this version of the client does not model), with ``type`` first. (v5)
Each attachment of a message follows it: its reference and its bytes, base64-encoded.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

from convo_memory_client.client import Conversations
from convo_memory_client.errors import NotFoundError

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
            for ref in message.raw.get("attachments") or []:
                yield _attachment(client, session.id, message.seq, ref)


def _attachment(
    client: Conversations, session_id: str, seq: int, ref: dict[str, Any]
) -> dict[str, Any]:
    """An attachment's line: its reference, and its bytes (base64) while they are kept."""
    try:
        data: str | None = base64.b64encode(client.files.content(ref["fileId"])).decode("ascii")
    except NotFoundError:
        data = None  # an upload deleted since: the reference stays, its bytes are gone
    fields = {name: value for name, value in ref.items() if name != "type"}
    return {
        "type": "attachment",
        "sessionId": session_id,
        "seq": seq,
        "kind": ref.get("type"),
        **fields,
        "data": data,
    }


def export_end_user(
    client: Conversations, external_ref: str, write: Callable[[str], object]
) -> tuple[int, int]:
    """Write every line of the export (each with its newline): (sessions, messages)."""
    sessions = messages = 0
    for line in export_lines(client, external_ref):
        if line["type"] == "session":
            sessions += 1
        elif line["type"] == "message":
            messages += 1
        write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    return sessions, messages
