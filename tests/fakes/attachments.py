"""In-memory attachments and uploads (``ports.AttachmentStore``, ``ports.FileStore``),
counted by the sessions that refer to them as the S3 adapter counts them; an owner's
keyed name and a URL fetcher that never reaches a network."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from convo_memory.domain.attachments import (
    CheckedFile,
    FileRef,
    UploadedFile,
    inline_file_id,
    is_upload_id,
    parse_inline_id,
    ref_of,
)
from convo_memory.domain.errors import ValidationFailed


@dataclass
class StoredObject:
    ref: FileRef
    data: bytes
    refs: set[str] = field(default_factory=set)


class FakeAttachmentStore:
    """Objects by (workspace, owner, digest); each session's references. ``puts`` counts
    objects written (a deduplicated keep writes none)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], StoredObject] = {}
        self.references: dict[str, set[tuple[str, str, str]]] = {}
        self.uploads: dict[tuple[str, str], tuple[UploadedFile, bytes]] = {}
        self.puts = 0
        self._generations = itertools.count(1)

    def keep(self, workspace_id: str, owner: str, session_id: str, file: CheckedFile) -> FileRef:
        key = (workspace_id, owner, file.digest)
        self.references.setdefault(session_id, set()).add(key)
        found = self.objects.get(key)
        if found is None:
            self.puts += 1
            stored = f"{next(self._generations):08x}"
            ref = ref_of(file, inline_file_id(owner, file.digest), stored)
            found = self.objects[key] = StoredObject(ref, file.data)
        found.refs.add(session_id)
        return found.ref.model_copy(update={"filename": file.filename})

    def find(self, workspace_id: str, owner: str, digest: str) -> FileRef | None:
        found = self.objects.get((workspace_id, owner, digest))
        return found.ref if found is not None else None

    def refer(self, workspace_id: str, owner: str, session_id: str, digest: str) -> FileRef | None:
        found = self.objects.get((workspace_id, owner, digest))
        if found is None:
            return None
        self.references.setdefault(session_id, set()).add((workspace_id, owner, digest))
        found.refs.add(session_id)
        return found.ref

    def read(self, workspace_id: str, ref: FileRef) -> bytes | None:
        if is_upload_id(ref.file_id):
            upload = self.uploads.get((workspace_id, ref.file_id))
            return upload[1] if upload is not None else None
        owner, digest = parse_inline_id(ref.file_id) or ("", "")
        found = self.objects.get((workspace_id, owner, digest))
        return found.data if found is not None else None

    def link(self, workspace_id: str, ref: FileRef, seconds: int) -> str:
        return f"https://bucket.example/{workspace_id}/{ref.file_id}?expires={seconds}"

    def share(self, parent_id: str, fork_id: str) -> int:
        keys = set(self.references.get(parent_id, set()))
        for key in keys:
            if key in self.objects:
                self.objects[key].refs.add(fork_id)
        self.references.setdefault(fork_id, set()).update(keys)
        return len(keys)

    def release(self, session_id: str) -> int:
        deleted = 0
        for key in self.references.pop(session_id, set()):
            found = self.objects.get(key)
            if found is None:
                continue
            found.refs.discard(session_id)
            if not found.refs:
                del self.objects[key]
                deleted += 1
        return deleted

    def remove_owner(self, workspace_id: str, owner: str) -> int:
        gone = [key for key in self.objects if key[:2] == (workspace_id, owner)]
        for key in gone:
            del self.objects[key]
        return len(gone)


class FakeFileStore:
    """Uploads, kept in the attachment store's ``uploads`` (so a turn can read them)."""

    def __init__(self, attachments: FakeAttachmentStore) -> None:
        self._attachments = attachments
        self._ids = itertools.count(1)

    def put(
        self, workspace_id: str, file: CheckedFile, purpose: str, expires_at: int | None, now: int
    ) -> UploadedFile:
        file_id = f"file-{next(self._ids):024x}"
        uploaded = UploadedFile(
            file_id, file.filename, len(file.data), file.type.mime, purpose, now, expires_at
        )
        self._attachments.uploads[(workspace_id, file_id)] = (uploaded, file.data)
        return uploaded

    def get(self, workspace_id: str, file_id: str, now: int) -> UploadedFile | None:
        found = self._attachments.uploads.get((workspace_id, file_id))
        if found is None or (found[0].expires_at is not None and found[0].expires_at <= now):
            return None
        return found[0]

    def list(
        self, workspace_id: str, now: int, limit: int, after: str | None
    ) -> tuple[list[UploadedFile], bool]:
        live = sorted(
            (u for (ws, _), (u, _) in self._attachments.uploads.items() if ws == workspace_id),
            key=lambda u: u.file_id,
        )
        live = [u for u in live if (after is None or u.file_id > after)]
        return live[:limit], len(live) > limit

    def delete(self, workspace_id: str, file_id: str) -> bool:
        return self._attachments.uploads.pop((workspace_id, file_id), None) is not None

    def expired(self, now: int) -> Iterator[tuple[str, str]]:
        for (ws, file_id), (uploaded, _) in list(self._attachments.uploads.items()):
            if uploaded.expires_at is not None and uploaded.expires_at <= now:
                yield ws, file_id


class FakeOwnerKeys:
    def owner_of(self, external_ref: str) -> str:
        return "u" + hashlib.sha256(external_ref.encode()).hexdigest()[:24]


class FakeFetcher:
    """URLs answer from ``pages`` (url -> (bytes, content type)); others are refused as
    the URL policy refuses a private address."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[bytes, str | None]] = {}
        self.fetched: list[str] = []

    def fetch(self, url: str, max_bytes: int) -> tuple[bytes, str | None]:
        self.fetched.append(url)
        if url not in self.pages:
            raise ValidationFailed("the URL may not be fetched: this host is not allowed")
        return self.pages[url]
