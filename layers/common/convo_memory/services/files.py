"""(v5) The Files API (``/v1/files``): files a workspace uploads, to attach by id.

An upload belongs to the workspace, not to an end user: it lives until it is deleted or
expires (``expires_after``), and an erasure removes the conversations' references to
it, never the file. Its bytes are checked as an attachment's are (``check_file``). An
inline attachment's ``file-`` id can be read here too (retrieve, content: what an
export reads), never listed nor deleted (it goes with its conversations).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from convo_memory.domain.attachments import (
    MAX_UPLOAD_BYTES,
    FileRef,
    InlineFile,
    check_file,
    is_upload_id,
    parse_inline_id,
)
from convo_memory.domain.errors import FileNotFound, PayloadTooLarge, ValidationFailed
from convo_memory.ports import AttachmentStore, FileStore, UploadedFile

PURPOSES = frozenset({"user_data", "vision", "assistants"})
MIN_EXPIRY_SECONDS = 3600
MAX_EXPIRY_SECONDS = 30 * 24 * 3600
# Bytes a Lambda response carries after base64 (6 MB, less its headers): a larger file's
# content is a redirect to a short-lived URL.
MAX_CONTENT_IN_RESPONSE = 4_400_000
LINK_SECONDS = 300


@dataclass(frozen=True)
class FileContent:
    """A file's bytes, or a short-lived URL to them (too large for a Lambda response)."""

    file: UploadedFile
    data: bytes | None = None
    url: str | None = None


class FileService:
    def __init__(
        self,
        files: FileStore | None,
        attachments: AttachmentStore | None,
        clock: Callable[[], float] = time.time,
        *,
        max_content_in_response: int = MAX_CONTENT_IN_RESPONSE,
    ) -> None:
        self._files = files
        self._attachments = attachments
        self._clock = clock
        self._max_content = max_content_in_response

    def upload(
        self,
        workspace_id: str,
        data: bytes,
        filename: str | None,
        declared: str | None,
        purpose: str,
        expires_after: int | None,
    ) -> UploadedFile:
        """Store an upload: 413 over ``MAX_UPLOAD_BYTES``, 422 for a purpose or an
        expiry outside OpenAI's, or bytes the service does not take (naming ``file``)."""
        store = self._store()
        if purpose not in PURPOSES:
            raise _invalid("purpose", "must be user_data or vision")
        if expires_after is not None and not (
            MIN_EXPIRY_SECONDS <= expires_after <= MAX_EXPIRY_SECONDS
        ):
            raise _invalid(
                "expires_after.seconds",
                f"must be {MIN_EXPIRY_SECONDS}-{MAX_EXPIRY_SECONDS} (an hour to 30 days)",
            )
        if len(data) > MAX_UPLOAD_BYTES:
            raise PayloadTooLarge(
                f"file: the file is {len(data):,} bytes; an upload may be at most "
                f"{MAX_UPLOAD_BYTES:,} bytes (Lambda's request limit after base64)",
                param="file",
            )
        checked = check_file(InlineFile(data, declared, filename, "file"))
        now = int(self._clock())
        expires = now + expires_after if expires_after is not None else None
        return store.put(workspace_id, checked, purpose, expires, now)

    def list(
        self, workspace_id: str, limit: int, after: str | None
    ) -> tuple[list[UploadedFile], bool]:
        """The workspace's uploads (inline attachments are not listed), in id order."""
        return self._store().list(workspace_id, int(self._clock()), limit, after)

    def get(self, workspace_id: str, file_id: str) -> UploadedFile:
        """An upload, or an inline attachment of the workspace; 404 otherwise."""
        if is_upload_id(file_id):
            found = self._store().get(workspace_id, file_id, int(self._clock()))
            if found is not None:
                return found
        else:
            ref = self._inline(workspace_id, file_id)
            if ref is not None:
                return UploadedFile(
                    ref.file_id, ref.filename, ref.bytes, ref.mime_type, "user_data", 0
                )
        raise FileNotFound(f"file {file_id!r} not found")

    def content(self, workspace_id: str, file_id: str) -> FileContent:
        """A file's bytes, or a link to them when they are more than a response carries."""
        file = self.get(workspace_id, file_id)
        ref = self._inline(workspace_id, file_id) or FileRef(
            type="image" if file.mime_type.startswith("image/") else "document",
            file_id=file.file_id,
            filename=file.filename,
            bytes=file.bytes,
            mime_type=file.mime_type,
        )
        assert self._attachments is not None  # a file was found
        if file.bytes > self._max_content:
            return FileContent(file, url=self._attachments.link(workspace_id, ref, LINK_SECONDS))
        data = self._attachments.read(workspace_id, ref)
        if data is None:
            raise FileNotFound(f"file {file_id!r} not found")
        return FileContent(file, data=data)

    def delete(self, workspace_id: str, file_id: str) -> None:
        """Delete an upload (an inline attachment goes with its conversations: 404)."""
        if not is_upload_id(file_id) or not self._store().delete(workspace_id, file_id):
            raise FileNotFound(f"file {file_id!r} not found")

    def _inline(self, workspace_id: str, file_id: str) -> FileRef | None:
        inline = parse_inline_id(file_id)
        if inline is None or self._attachments is None:
            return None
        return self._attachments.find(workspace_id, *inline)

    def _store(self) -> FileStore:
        if self._files is None:
            raise ValidationFailed("this deployment stores no files (it has no bucket)")
        return self._files


def _invalid(field: str, what: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field} {what}",
        details=[{"loc": field.split("."), "msg": what, "type": "value_error"}],
        param=field,
    )
