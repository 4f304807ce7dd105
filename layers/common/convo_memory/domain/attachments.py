"""(v5) Images and documents in a conversation, kept by reference.

A door reads each attached part into an ``AttachmentInput``: bytes sent in the request
(``InlineFile``: a ``data:`` URL, ``file_data``), a file the workspace uploaded or an
earlier attachment's id (``FileById``), or an ``https`` URL to fetch once
(``FileAtUrl``). ``check_file`` says what bytes are (``file_types``) and refuses what the
service does not take (413 and 422 naming the field); ``check_counts`` bounds a message.
A stored attachment is a ``FileRef``: what the native routes show (``{type, fileId,
filename, bytes, mimeType}``) and what a turn's record keeps (``encode_refs``, well under
300 bytes each), never the bytes, which live in the stack's bucket.

Ids: an upload is ``file-<24 hex>``; an inline attachment is ``file-<owner>-<digest>``,
its owner (``u<keyed hash of the end user>`` or ``c<session id>`` for a conversation
without one) and a digest of its bytes, so the same bytes of one owner are one file.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from convo_memory.domain.errors import PayloadTooLarge, ValidationFailed
from convo_memory.domain.file_types import (
    ACCEPTED,
    BY_CODE,
    FileType,
    Kind,
    agrees,
    image_size,
    sniffed,
    type_of_mime,
    type_of_name,
)

# Limits (the contract's): per message, per file, and what one prompt carries (Bedrock's
# per-request limits, and a bound on what a turn loads).
MAX_IMAGES_PER_MESSAGE = 20
MAX_DOCUMENTS_PER_MESSAGE = 5
MAX_IMAGE_BYTES = 3_750_000
MAX_IMAGE_SIDE = 8_000
MAX_DOCUMENT_BYTES = 4_000_000
MAX_PROMPT_IMAGES = 20
MAX_PROMPT_DOCUMENTS = 5
MAX_PROMPT_ATTACHMENT_BYTES = 20_000_000
# Lambda takes 6 MB (6,291,456 bytes) of request as it arrives: a request that carries
# attachments may be that large (about 4.4 MB of base64 data); others keep the gate's cap.
LAMBDA_REQUEST_BYTES = 6 * 1024 * 1024
# A file through POST /v1/files: Lambda's request after API Gateway's base64 of the body.
MAX_UPLOAD_BYTES = 4_000_000
# A stored file name is cut to this many UTF-8 bytes (a turn's record stays small).
MAX_FILENAME_BYTES = 120
UPLOAD_ID = re.compile(r"file-[0-9a-f]{24}")
INLINE_ID = re.compile(r"file-([uc][A-Za-z0-9_]{1,40})-([0-9a-f]{32})")
DIGEST_CHARS = 32

PartKind = Literal["image", "file"]
# Content types that say no more than "bytes": the name or the bytes decide.
UNDECLARED = frozenset({None, "", "application/octet-stream", "binary/octet-stream"})


# -- what a door reads --------------------------------------------------------------------


@dataclass(frozen=True)
class InlineFile:
    """Bytes sent in the request, with the type and name it declared (either may be
    None); ``where`` names the part (``messages.0.content.1``); ``part``: an image part
    (``image_url``, ``input_image``) or a file part."""

    data: bytes
    declared: str | None
    filename: str | None
    where: str
    part: PartKind = "file"


@dataclass(frozen=True)
class FileById:
    """A file of the workspace named by its id (an upload, or an earlier attachment's)."""

    file_id: str
    where: str
    part: PartKind = "file"


@dataclass(frozen=True)
class FileAtUrl:
    """An ``https`` URL to fetch once, under the webhook rules."""

    url: str
    where: str
    part: PartKind = "file"
    filename: str | None = None


AttachmentInput = InlineFile | FileById | FileAtUrl


@dataclass(frozen=True)
class CheckedFile:
    """Bytes whose type the service takes and agrees with: ready to store or send."""

    type: FileType
    data: bytes
    filename: str
    where: str

    @property
    def kind(self) -> Kind:
        return self.type.kind

    @property
    def digest(self) -> str:
        """What names these bytes within their owner (128 bits of SHA-256, hex)."""
        return hashlib.sha256(self.data).hexdigest()[:DIGEST_CHARS]


# -- what is kept and shown -----------------------------------------------------------------


class FileRef(BaseModel):
    """An attachment as a message keeps it: ``{type, fileId, filename, bytes,
    mimeType}``. ``stored`` locates the bytes of an inline attachment (the generation
    of its object; "" for an upload), never shown."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    type: Kind
    file_id: str
    filename: str
    bytes: int
    mime_type: str
    stored: str = Field(default="", exclude=True)

    @property
    def code(self) -> str:
        return type_code_of(self.mime_type)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


@dataclass(frozen=True)
class SentFile:
    """An attachment a prompt carries: its reference and, once loaded, its bytes (or a
    short-lived URL to them, for a connection that takes images by URL)."""

    ref: FileRef
    data: bytes | None = None
    url: str | None = None

    @property
    def ready(self) -> bool:
        return self.data is not None or self.url is not None


@dataclass(frozen=True)
class UploadedFile:
    """A file the workspace uploaded (``file-<24 hex>``), as ``/v1/files`` shows it:
    its size, when it was made and when it expires (Unix seconds; None: never)."""

    file_id: str
    filename: str
    bytes: int
    mime_type: str
    purpose: str
    created_at: int
    expires_at: int | None = None


class AttachmentPolicy(BaseModel):
    """(v5) Which attachments a capability's turns take: ``images``, ``documents``
    (both by default); a refused kind is ``422`` naming the part."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    images: bool = True
    documents: bool = True

    def takes(self, kind: Kind) -> bool:
        return self.images if kind == "image" else self.documents


def type_code_of(mime: str) -> str:
    found = type_of_mime(mime)
    return found.code if found is not None else "txt"


def ref_of(checked: CheckedFile, file_id: str, stored: str = "") -> FileRef:
    """The reference a message keeps to ``checked``, stored as ``file_id``."""
    return FileRef(
        type=checked.kind,
        file_id=file_id,
        filename=checked.filename,
        bytes=len(checked.data),
        mime_type=checked.type.mime,
        stored=stored,
    )


def encode_refs(refs: tuple[FileRef, ...] | list[FileRef]) -> str:
    """A turn record's attachments as compact JSON (``[id, stored, code, bytes, name]``
    each: under 300 bytes, the name being at most ``MAX_FILENAME_BYTES``)."""
    rows = [[r.file_id, r.stored, r.code, r.bytes, r.filename] for r in refs]
    return json.dumps(rows, separators=(",", ":"), ensure_ascii=False)


def decode_refs(text: str) -> list[FileRef]:
    """The attachments ``encode_refs`` wrote."""
    refs = []
    for file_id, stored, code, size, name in json.loads(text):
        file_type = BY_CODE[code]
        refs.append(
            FileRef(
                type=file_type.kind,
                file_id=file_id,
                filename=name,
                bytes=size,
                mime_type=file_type.mime,
                stored=stored,
            )
        )
    return refs


# -- ids and owners -------------------------------------------------------------------------


def inline_file_id(owner: str, digest: str) -> str:
    return f"file-{owner}-{digest}"


def parse_inline_id(file_id: str) -> tuple[str, str] | None:
    """The owner and digest an inline attachment's id names (None: not one)."""
    found = INLINE_ID.fullmatch(file_id)
    return (found.group(1), found.group(2)) if found else None


def is_upload_id(file_id: str) -> bool:
    return UPLOAD_ID.fullmatch(file_id) is not None


def conversation_owner(session_id: str) -> str:
    """The owner of a conversation without an end user: itself (shared with its forks)."""
    return f"c{session_id}"


# -- checks ---------------------------------------------------------------------------------


def check_file(given: InlineFile) -> CheckedFile:
    """``given``'s bytes as a file the service takes: a type it knows (declared, or by
    the name's extension, else by the magic bytes), bytes that agree with it, within
    its limits; else 413 or 422 naming the part. Nothing is stored before this."""
    where, data = given.where, given.data
    stated = None if given.declared in UNDECLARED else given.declared
    declared = type_of_mime(stated) or (None if stated else type_of_name(given.filename))
    if stated and declared is None:
        raise _invalid(where, f"has a type this service does not take ({ACCEPTED})")
    file_type = declared or _sniffed_type(data, where)
    if not agrees(file_type, data):
        raise _invalid(where, f"is not {file_type.code.upper()}: its bytes say otherwise")
    if given.part == "image" and file_type.kind != "image":
        raise _invalid(where, "must be an image (PNG, JPEG, GIF or WebP)")
    _check_size(file_type, data, where)
    return CheckedFile(file_type, data, clean_filename(given.filename, file_type), where)


def _sniffed_type(data: bytes, where: str) -> FileType:
    code = sniffed(data)
    if code is None:
        raise _invalid(where, f"has no type this service recognises ({ACCEPTED}); name it")
    return BY_CODE[code]


def _check_size(file_type: FileType, data: bytes, where: str) -> None:
    if not data:
        raise _invalid(where, "is empty")
    limit = MAX_IMAGE_BYTES if file_type.kind == "image" else MAX_DOCUMENT_BYTES
    if len(data) > limit:
        article = "an" if file_type.kind == "image" else "a"
        raise PayloadTooLarge(
            f"{where}: the {file_type.kind} is {len(data):,} bytes; {article} "
            f"{file_type.kind} may be at most {limit:,} bytes",
            param=where,
        )
    if file_type.kind == "image":
        size = image_size(file_type.code, data)
        if size is None:
            raise _invalid(where, f"is not a readable {file_type.code.upper()} image")
        if max(size) > MAX_IMAGE_SIDE:
            raise _invalid(where, f"is {size[0]}x{size[1]} pixels; at most {MAX_IMAGE_SIDE} a side")


def check_counts(kinds: list[tuple[Kind, str]]) -> None:
    """At most 20 images and 5 documents in one message (``kinds``: each attachment's
    kind and where it is, in order); 422 naming the first one over."""
    seen = {"image": 0, "document": 0}
    limits = {"image": MAX_IMAGES_PER_MESSAGE, "document": MAX_DOCUMENTS_PER_MESSAGE}
    for kind, where in kinds:
        seen[kind] += 1
        if seen[kind] > limits[kind]:
            raise _invalid(
                where, f"is one {kind} too many: a message carries at most {limits[kind]}"
            )


def check_policy(policy: AttachmentPolicy | None, kinds: list[tuple[Kind, str]]) -> None:
    """A capability whose ``attachments`` setting refuses a kind: 422 naming the part."""
    if policy is None:
        return
    for kind, where in kinds:
        if not policy.takes(kind):
            field = "images" if kind == "image" else "documents"
            raise _invalid(
                where, f"is refused: this capability takes no {field} (its attachments.{field})"
            )


def _invalid(where: str, what: str) -> ValidationFailed:
    return ValidationFailed(
        f"{where} {what}",
        details=[{"loc": where.split("."), "msg": what, "type": "value_error"}],
        param=where,
    )


# -- names and placeholders -----------------------------------------------------------------

_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]+")


def clean_filename(filename: str | None, file_type: FileType) -> str:
    """A name to keep: the last path segment, without control characters, at most
    ``MAX_FILENAME_BYTES`` bytes; none given: ``<kind>.<extension>``."""
    name = _UNSAFE.sub(" ", (filename or "").replace("\\", "/").rsplit("/", 1)[-1]).strip()
    if not name:
        return f"{file_type.kind}.{file_type.extension}"
    encoded = unicodedata.normalize("NFC", name).encode("utf-8")[:MAX_FILENAME_BYTES]
    return encoded.decode("utf-8", errors="ignore")


def placeholder(ref: FileRef, why: str = "") -> str:
    """What the model sees instead of an attachment it is not sent:
    ``[image: cat.png, 1234 bytes]`` (with why, when it says more)."""
    note = f", {why}" if why else ""
    return f"[{ref.type}: {ref.filename}, {ref.bytes} bytes{note}]"


def with_attachment_notes(message: Any) -> str:
    """A message's text with a placeholder for each of its attachments (what a summary
    of it can say of them: their kind, name and size, never their bytes)."""
    refs = getattr(message, "attachments", None) or []
    notes = "\n".join(placeholder(ref) for ref in refs)
    return f"{message.content}\n{notes}" if notes else str(message.content)


_BEDROCK_NAME = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")


def bedrock_document_name(filename: str, taken: set[str]) -> str:
    """A document's name as Bedrock Converse takes it: alphanumerics, single spaces,
    hyphens, parentheses and square brackets; unique within the request (``taken``)."""
    stem = filename.rsplit(".", 1)[0] if "." in filename else filename
    name = " ".join(_BEDROCK_NAME.sub(" ", stem).split())[:100] or "document"
    unique, number = name, 2
    while unique in taken:
        unique, number = f"{name} ({number})", number + 1
    taken.add(unique)
    return unique
