"""(v5) Images and files: where their bytes live (the stack's bucket) and what names
them. ``AttachmentStore`` keeps the attachments of conversations, owned by their end
user (or by a conversation without one) and counted by the sessions that refer to them;
``FileStore`` keeps the files the workspace uploaded (``/v1/files``); ``FileFetcher``
fetches an attachment's URL once, under the webhook rules; ``OwnerKeys`` names an end
user's attachments by a keyed hash, never the raw externalRef. Both stores raise
``StoreUnavailable`` for capacity and availability errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from convo_memory.domain.attachments import CheckedFile, FileRef, UploadedFile

__all__ = ["AttachmentStore", "FileFetcher", "FileStore", "OwnerKeys", "UploadedFile"]


class AttachmentStore(Protocol):
    """The attachments of conversations. An object belongs to an owner (``u<hash>`` of
    an end user, ``c<session>`` of a conversation without one) and is named by a digest
    of its bytes: the same bytes of one owner are stored once. It goes when the last
    session that refers to it releases it."""

    def keep(self, workspace_id: str, owner: str, session_id: str, file: CheckedFile) -> FileRef:
        """Store ``file`` for ``owner`` (once: a digest already stored is only referred
        to again) and count ``session_id`` among the sessions that refer to it."""
        ...

    def find(self, workspace_id: str, owner: str, digest: str) -> FileRef | None:
        """The stored object ``owner`` has of ``digest`` (None: none)."""
        ...

    def refer(self, workspace_id: str, owner: str, session_id: str, digest: str) -> FileRef | None:
        """Count ``session_id`` among those that refer to an object ``owner`` already
        has (an attachment resent by its id); None when there is none."""
        ...

    def read(self, workspace_id: str, ref: FileRef) -> bytes | None:
        """The bytes of an attachment (inline or uploaded); None when gone."""
        ...

    def link(self, workspace_id: str, ref: FileRef, seconds: int) -> str:
        """A URL that reads the attachment for ``seconds`` (a presigned GET)."""
        ...

    def share(self, parent_id: str, fork_id: str) -> int:
        """Count a new fork among the sessions that refer to what its parent refers to
        (its inherited messages keep their attachments after the parent goes)."""
        ...

    def release(self, session_id: str) -> int:
        """The session goes: it no longer refers to its objects; an object no session
        refers to any more is deleted. How many objects were deleted."""
        ...

    def remove_owner(self, workspace_id: str, owner: str) -> int:
        """An erasure: delete every object of ``owner`` that no live session refers to
        (its sessions are gone), and any object of the owner left without a record. How
        many objects were deleted."""
        ...


class FileStore(Protocol):
    """The files a workspace uploaded (``/v1/files``)."""

    def put(
        self, workspace_id: str, file: CheckedFile, purpose: str, expires_at: int | None, now: int
    ) -> UploadedFile: ...

    def get(self, workspace_id: str, file_id: str, now: int) -> UploadedFile | None:
        """The file; None when unknown, deleted or expired."""
        ...

    def list(
        self, workspace_id: str, now: int, limit: int, after: str | None
    ) -> tuple[list[UploadedFile], bool]:
        """Files in id order after ``after``: a page, and whether more follow."""
        ...

    def delete(self, workspace_id: str, file_id: str) -> bool: ...

    def expired(self, now: int) -> Iterator[tuple[str, str]]:
        """(workspace, file id) of the files whose time has passed."""
        ...


class FileFetcher(Protocol):
    """Fetches an attachment's ``https`` URL once: the webhook rules (public addresses
    unless the operator allows the host, no redirects), a size cap and a timeout."""

    def fetch(self, url: str, max_bytes: int) -> tuple[bytes, str | None]:
        """The bytes and the declared Content-Type; ``ValidationFailed`` for a URL the
        rules refuse or a fetch that fails, ``PayloadTooLarge`` over ``max_bytes``."""
        ...


class OwnerKeys(Protocol):
    def owner_of(self, external_ref: str) -> str:
        """``u<keyed hash>`` of an end user: what their attachments are named by."""
        ...
