"""``client.files``: the Files API (v5). Upload an image or a document once, then attach
it to turns by its id (``predict(..., attachments=[file.id])``), or resend it through an
OpenAI-compatible door as ``file_id``."""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from convo_memory_client._transport import CREATE, READ, Transport

__all__ = ["File", "Files"]


@dataclass(frozen=True)
class File:
    """An uploaded file (or an attachment's, by its id): ``expires_at`` None: never."""

    id: str
    filename: str
    bytes: int
    purpose: str
    created_at: int
    expires_at: int | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> File:
        d = data if isinstance(data, dict) else {}
        return cls(
            id=str(d.get("id", "")),
            filename=str(d.get("filename", "")),
            bytes=int(d.get("bytes") or 0),
            purpose=str(d.get("purpose", "")),
            created_at=int(d.get("created_at") or 0),
            expires_at=d.get("expires_at"),
            raw=dict(d),
        )


def multipart(
    fields: dict[str, str], filename: str, content: bytes, content_type: str
) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body: the fields, then the file; and its content type."""
    boundary = "convo-" + secrets.token_hex(12)
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    safe = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n"
    )
    body = b"".join(parts) + head.encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


class Files:
    """The Files API (``client.files``), on the client's own transport."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def create(
        self,
        content: bytes,
        filename: str,
        *,
        content_type: str = "application/octet-stream",
        purpose: str = "user_data",
        expires_after_seconds: int | None = None,
    ) -> File:
        """Upload ``content`` (at most about 4 MB): its bytes must be a type the service
        takes (PNG, JPEG, GIF, WebP; PDF, CSV, TXT, MD, HTML, DOCX, XLSX)."""
        fields = {"purpose": purpose}
        if expires_after_seconds is not None:
            fields["expires_after[anchor]"] = "created_at"
            fields["expires_after[seconds]"] = str(expires_after_seconds)
        form = multipart(fields, filename, content, content_type)
        return File.from_json(self._transport.call("POST", "/v1/files", CREATE, form=form))

    def get(self, file_id: str) -> File:
        return File.from_json(self._transport.call("GET", f"/v1/files/{_id(file_id)}", READ))

    def content(self, file_id: str) -> bytes:
        """The file's bytes (read from a short-lived link when the service sends one)."""
        path = f"/v1/files/{_id(file_id)}/content"
        data: bytes = self._transport.call("GET", path, READ, binary=True)
        return data

    def list(self) -> Iterator[File]:
        """The workspace's uploads, every page."""
        after: str | None = None
        while True:
            page = self._transport.call("GET", "/v1/files", READ, query={"after": after})
            data: builtins.list[Any] = page.get("data") or []
            yield from (File.from_json(item) for item in data)
            if not page.get("has_more") or not data:
                return
            after = str(data[-1]["id"])

    def delete(self, file_id: str) -> None:
        self._transport.call("DELETE", f"/v1/files/{_id(file_id)}", CREATE)


def _id(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")
