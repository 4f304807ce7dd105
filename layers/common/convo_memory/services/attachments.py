"""(v5) A turn's images and documents, from the request to the model.

Three steps around the serving path (``services.turns``):

1. ``checked`` before anything is opened or stored: every attached part read into bytes
   the service takes (``domain.attachments.check_file``; a URL fetched once, a file id
   looked up), the message's counts, and, when the request names its capability, what
   its ``attachments`` setting and its model's connection take (422 naming the part);
2. ``kept`` once the turn's session is known: each attachment stored for the session's
   owner (its end user's keyed hash, or the conversation itself) and counted for the
   session; the turn's record keeps the references (a stateless turn stores nothing);
3. ``attached`` on the prompt: the attachments of the window and the input, newest
   first within a prompt's limits (``domain.attachment_plan``), loaded (or linked, for
   a connection that takes images by URL); the rest are fenced placeholders.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from convo_memory.domain.attachment_plan import AttachmentForm, SentFile, planned, with_placeholders
from convo_memory.domain.attachments import (
    MAX_DOCUMENT_BYTES,
    CheckedFile,
    FileAtUrl,
    FileById,
    FileRef,
    InlineFile,
    check_counts,
    check_file,
    check_policy,
    conversation_owner,
    is_upload_id,
    parse_inline_id,
    ref_of,
)
from convo_memory.domain.errors import (
    FileNotFound,
    ServiceError,
    StoreUnavailable,
    Unavailable,
    ValidationFailed,
)
from convo_memory.domain.file_types import BY_MIME, Kind, type_of_mime

if TYPE_CHECKING:
    from convo_memory.domain.attachments import AttachmentInput
    from convo_memory.domain.models import Capability, Session
    from convo_memory.domain.prompt import ChatMessage, Prompt
    from convo_memory.ports import AttachmentStore, FileFetcher, FileStore, OwnerKeys
    from convo_memory.services.catalog import CapabilityCatalog

logger = logging.getLogger(__name__)
# A presigned URL a model provider reads an image by lives this long.
LINK_SECONDS = 300
LOAD_THREADS = 4


@dataclass(frozen=True)
class Candidate:
    """One attachment of a turn's input, checked: new bytes (``file``) or a file the
    workspace already has (``ref``, with its owner and digest when inline)."""

    where: str
    kind: Kind
    file: CheckedFile | None = None
    ref: FileRef | None = None

    @property
    def code(self) -> str:
        if self.file is not None:
            return self.file.type.code
        assert self.ref is not None
        return self.ref.code


@dataclass(frozen=True)
class TurnFiles:
    """A turn's attachments: checked (``candidates``), then kept (``refs``); the bytes
    the request brought, by file id, so the prompt does not read them back."""

    candidates: tuple[Candidate, ...] = ()
    refs: tuple[FileRef, ...] = ()
    loaded: dict[str, bytes] = field(default_factory=dict)
    capability_checked: bool = False


NO_FILES = TurnFiles()


class AttachmentService:
    def __init__(
        self,
        catalog: CapabilityCatalog,
        form_for: Callable[[Capability], AttachmentForm],
        store: AttachmentStore | None,
        files: FileStore | None,
        fetcher: FileFetcher | None,
        owners: OwnerKeys | None,
        clock: Callable[[], float],
    ) -> None:
        self._catalog = catalog
        self._form_for = form_for
        self._store = store
        self._files = files
        self._fetcher = fetcher
        self._owners = owners
        self._clock = clock

    # -- 1. checked ------------------------------------------------------------------

    def checked(
        self, workspace_id: str, capability_id: str | None, inputs: Sequence[AttachmentInput]
    ) -> TurnFiles:
        """The input's attachments read and checked (413/422 naming the part; 404 for a
        file id that names none of the workspace's files), nothing stored."""
        if not inputs:
            return NO_FILES
        candidates = tuple(self._candidate(workspace_id, given) for given in inputs)
        check_counts([(c.kind, c.where) for c in candidates])
        files = TurnFiles(candidates)
        capability = self._catalog.get(workspace_id, capability_id) if capability_id else None
        if capability is not None and capability.conversational:
            files = self.for_capability(files, capability)
        return files

    def for_capability(self, files: TurnFiles, capability: Capability) -> TurnFiles:
        """What the capability's ``attachments`` setting and its model take (422)."""
        if files.capability_checked or not files.candidates:
            return files
        kinds = [(c.kind, c.where) for c in files.candidates]
        check_policy(capability.attachments, kinds)
        form = self._form_for(capability)
        for candidate in files.candidates:
            if candidate.kind == "document" and not form.takes(candidate.code):
                raise ValidationFailed(
                    f"{candidate.where} is a {candidate.code.upper()} document, which this "
                    "capability's model connection does not take (it takes PDF, and text "
                    "documents as their text)",
                    details=[{"loc": candidate.where.split("."), "msg": "not taken"}],
                    param=candidate.where,
                )
        return replace(files, capability_checked=True)

    def _candidate(self, workspace_id: str, given: AttachmentInput) -> Candidate:
        if isinstance(given, InlineFile):
            checked = check_file(given)
            return Candidate(given.where, checked.kind, file=checked)
        if isinstance(given, FileAtUrl):
            data, declared = self._fetch(given)
            inline = InlineFile(data, _known(declared), given.filename, given.where, given.part)
            checked = check_file(inline)
            return Candidate(given.where, checked.kind, file=checked)
        ref = self._existing(workspace_id, given)
        if given.part == "image" and ref.type != "image":
            raise ValidationFailed(
                f"{given.where} names a file that is not an image", param=given.where
            )
        return Candidate(given.where, ref.type, ref=ref)

    def _fetch(self, given: FileAtUrl) -> tuple[bytes, str | None]:
        if self._fetcher is None:
            raise ValidationFailed(f"{given.where}: this deployment fetches no URLs")
        try:
            return self._fetcher.fetch(given.url, MAX_DOCUMENT_BYTES)
        except ServiceError as refused:
            refused.message = f"{given.where}: {refused.message}"
            refused.param = given.where
            refused.args = (refused.message,)
            raise

    def _existing(self, workspace_id: str, given: FileById) -> FileRef:
        """The file a ``file_id`` names: an upload, or an earlier inline attachment."""
        not_found = FileNotFound(f"file {given.file_id!r} not found", param=given.where)
        if is_upload_id(given.file_id) and self._files is not None:
            uploaded = self._files.get(workspace_id, given.file_id, int(self._clock()))
            if uploaded is None:
                raise not_found
            file_type = BY_MIME[uploaded.mime_type]
            return FileRef(
                type=file_type.kind,
                file_id=uploaded.file_id,
                filename=uploaded.filename,
                bytes=uploaded.bytes,
                mime_type=uploaded.mime_type,
            )
        inline = parse_inline_id(given.file_id)
        if inline is None or self._store is None:
            raise not_found
        found = self._store.find(workspace_id, *inline)
        if found is None:
            raise not_found
        return found

    # -- 2. kept ---------------------------------------------------------------------

    def kept(self, workspace_id: str, files: TurnFiles, session: Session) -> TurnFiles:
        """Store the turn's attachments for the session's owner, counted for the session."""
        if not files.candidates:
            return files
        if self._store is None:
            raise ValidationFailed("this deployment stores no attachments (it has no bucket)")
        owner = self.owner_of(session)
        refs, loaded = [], dict(files.loaded)
        for candidate in files.candidates:
            ref = self._keep(workspace_id, owner, session.id, candidate)
            if candidate.file is not None:
                loaded[ref.file_id] = candidate.file.data
            refs.append(ref)
        return replace(files, refs=tuple(refs), loaded=loaded)

    def _keep(
        self, workspace_id: str, owner: str, session_id: str, candidate: Candidate
    ) -> FileRef:
        assert self._store is not None
        if candidate.file is not None:
            return self._store.keep(workspace_id, owner, session_id, candidate.file)
        ref = candidate.ref
        assert ref is not None
        inline = parse_inline_id(ref.file_id)
        if inline is None:
            return ref  # an upload: the workspace's, referred to as it is
        if inline[0] == owner:
            again = self._store.refer(workspace_id, owner, session_id, inline[1])
            if again is not None:
                return again
        # Another owner's attachment (or one gone meanwhile): stored anew for this owner.
        data = self._store.read(workspace_id, ref)
        if data is None:
            raise FileNotFound(f"file {ref.file_id!r} not found", param=candidate.where)
        checked = check_file(InlineFile(data, ref.mime_type, ref.filename, candidate.where))
        return self._store.keep(workspace_id, owner, session_id, checked)

    def owner_of(self, session: Session) -> str:
        """Whose a session's attachments are: its end user's, else its own."""
        if session.external_ref is None or self._owners is None:
            return conversation_owner(session.id)
        try:
            return self._owners.owner_of(session.external_ref)
        except Exception as exc:  # the deployment's secret could not be read
            logger.warning("no attachment owner key: %s", type(exc).__name__)
            raise Unavailable("attachments are briefly unavailable") from None

    def passed(self, files: TurnFiles) -> TurnFiles:
        """A stateless turn's attachments: sent as given, nothing stored."""
        refs, loaded = [], dict(files.loaded)
        for index, candidate in enumerate(files.candidates):
            if candidate.file is not None:
                ref = ref_of(candidate.file, f"inline-{index}")
                loaded[ref.file_id] = candidate.file.data
            else:
                assert candidate.ref is not None
                ref = candidate.ref
            refs.append(ref)
        return replace(files, refs=tuple(refs), loaded=loaded)

    # -- what goes with a session, and with an end user ------------------------------

    def release(self, session_id: str) -> int:
        """The session is gone (deleted, purged, erased, swept): what it referred to is
        no longer its; an attachment no session refers to is deleted."""
        return self._store.release(session_id) if self._store is not None else 0

    def share(self, parent_id: str, fork_id: str) -> int:
        """A new fork refers to what its parent refers to (its inherited messages keep
        their attachments after the parent goes)."""
        return self._store.share(parent_id, fork_id) if self._store is not None else 0

    def expire(self, now: float) -> int:
        """Delete the uploads whose ``expires_after`` has passed (the retention run)."""
        if self._files is None:
            return 0
        expired = list(self._files.expired(int(now)))
        for workspace_id, file_id in expired:
            self._files.delete(workspace_id, file_id)
        return len(expired)

    def remove_end_user(self, workspace_id: str, external_ref: str) -> int:
        """An erasure's end: no object of that end user that no live session refers to
        is left (its sessions are gone by now)."""
        if self._store is None or self._owners is None:
            return 0
        return self._store.remove_owner(workspace_id, self._owners.owner_of(external_ref))

    # -- 3. attached -----------------------------------------------------------------

    def attached(
        self, workspace_id: str, capability: Capability, prompt: Prompt, files: TurnFiles
    ) -> Prompt:
        """``prompt`` with the attachments it carries loaded (or linked), within its
        limits; what cannot be read (an upload deleted since) becomes a placeholder."""
        prompt = planned(prompt)
        wanted = [s.ref for m in prompt.messages for s in m.attachments if not s.ready]
        if not wanted:
            return prompt
        form = self._form_for(capability)
        ready = self._load(workspace_id, wanted, files.loaded, form)
        messages = tuple(_ready(m, ready, prompt.fence_nonce) for m in prompt.messages)
        return replace(prompt, messages=messages)

    def _load(
        self,
        workspace_id: str,
        refs: list[FileRef],
        loaded: dict[str, bytes],
        form: AttachmentForm,
    ) -> dict[str, SentFile]:
        """Each wanted attachment's bytes (or URL); missing ones are left out."""
        unique = {ref.file_id: ref for ref in refs}

        def one(ref: FileRef) -> SentFile | None:
            stored = is_upload_id(ref.file_id) or parse_inline_id(ref.file_id) is not None
            if form.by_url and ref.type == "image" and stored and self._store is not None:
                return SentFile(ref, url=self._store.link(workspace_id, ref, LINK_SECONDS))
            if ref.file_id in loaded:
                return SentFile(ref, data=loaded[ref.file_id])
            if self._store is None:
                return None
            try:
                data = self._store.read(workspace_id, ref)
            except StoreUnavailable:
                logger.warning("an attachment could not be read; sent as a placeholder")
                return None
            return SentFile(ref, data=data) if data is not None else None

        todo = list(unique.values())
        if len(todo) == 1:
            results = [one(todo[0])]
        else:
            with ThreadPoolExecutor(min(LOAD_THREADS, len(todo))) as pool:
                results = list(pool.map(one, todo))
        return {ref.file_id: sent for ref, sent in zip(todo, results, strict=True) if sent}


def _ready(message: ChatMessage, ready: dict[str, SentFile], nonce: str) -> ChatMessage:
    if not message.attachments:
        return message
    sent = tuple(s if s.ready else ready[s.ref.file_id] for s in message.attachments
                 if s.ready or s.ref.file_id in ready)  # fmt: skip
    gone = [s.ref for s in message.attachments if not s.ready and s.ref.file_id not in ready]
    return with_placeholders(replace(message, attachments=sent), gone, nonce, "no longer available")


def _known(declared: str | None) -> str | None:
    """A fetched URL's Content-Type when it names a type the service takes (servers
    often say ``application/octet-stream``: the bytes decide then)."""
    return declared if type_of_mime(declared) is not None else None
