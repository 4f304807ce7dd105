"""(v5) The Files API's answers (OpenAI's file objects) and the attachments a native turn
names (``attachments: [{fileId}]``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from convo_memory.domain.attachments import UploadedFile

MAX_NATIVE_ATTACHMENTS = 25


class FileObject(BaseModel):
    """A file as OpenAI's SDKs read it (``file-...``; ``expires_at`` null: never)."""

    id: str = Field(pattern=r"^file-")
    object: Literal["file"]
    bytes: int
    created_at: int
    expires_at: int | None
    filename: str
    purpose: str
    status: Literal["processed"] = "processed"
    status_details: None = None


class FileList(BaseModel):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"]
    deleted: Literal[True]


class AttachmentIn(BaseModel):
    """A native door's attachment: an uploaded file (or an earlier attachment) by id."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    file_id: str = Field(alias="fileId", min_length=1, max_length=128, pattern=r"^file-")


def file_json(file: UploadedFile) -> dict[str, Any]:
    """A file as ``/v1/files`` answers it."""
    return {
        "id": file.file_id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": file.created_at,
        "expires_at": file.expires_at,
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "status_details": None,
    }


def file_list(files: list[UploadedFile], has_more: bool) -> dict[str, Any]:
    data = [file_json(file) for file in files]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
