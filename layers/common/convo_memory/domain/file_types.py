"""(v5) What an attached file is, from its bytes: the types the service takes, their
magic bytes (PNG, JPEG, GIF, WebP, PDF; DOCX and XLSX by their ZIP container), valid
UTF-8 for the text types (CSV, TXT, MD, HTML), and an image's size in pixels read from
its header. Pure: the standard library only, and nothing decoded beyond a header (a
ZIP's directory is listed, never inflated, so a bomb costs nothing).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

Kind = Literal["image", "document"]


@dataclass(frozen=True)
class FileType:
    """One type the service takes: its short code (what a turn's record keeps), MIME
    type, kind and usual file name extension."""

    code: str
    mime: str
    kind: Kind
    extension: str

    @property
    def is_text(self) -> bool:
        """A text type: its bytes are UTF-8, and it can be sent as text."""
        return self.code in TEXT_CODES


TYPES: tuple[FileType, ...] = (
    FileType("png", "image/png", "image", "png"),
    FileType("jpeg", "image/jpeg", "image", "jpg"),
    FileType("gif", "image/gif", "image", "gif"),
    FileType("webp", "image/webp", "image", "webp"),
    FileType("pdf", "application/pdf", "document", "pdf"),
    FileType("csv", "text/csv", "document", "csv"),
    FileType("txt", "text/plain", "document", "txt"),
    FileType("md", "text/markdown", "document", "md"),
    FileType("html", "text/html", "document", "html"),
    FileType(
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "document",
        "docx",
    ),
    FileType(
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "document",
        "xlsx",
    ),
)
TEXT_CODES = frozenset({"csv", "txt", "md", "html"})
BY_CODE = {t.code: t for t in TYPES}
BY_MIME = {t.mime: t for t in TYPES}
# Other names clients use for the same types.
BY_MIME |= {"image/jpg": BY_CODE["jpeg"], "text/x-markdown": BY_CODE["md"]}
BY_EXTENSION = {t.extension: t for t in TYPES} | {
    "jpeg": BY_CODE["jpeg"],
    "markdown": BY_CODE["md"],
    "htm": BY_CODE["html"],
}
ACCEPTED = "PNG, JPEG, GIF, WebP; PDF, CSV, TXT, MD, HTML, DOCX, XLSX"

# The ZIP entry that makes a container a Word document, a workbook.
_OFFICE_PART = {"docx": "word/document.xml", "xlsx": "xl/workbook.xml"}


def type_of_mime(mime: str | None) -> FileType | None:
    """The type a declared MIME type names (parameters such as ``charset`` ignored)."""
    if not mime:
        return None
    return BY_MIME.get(mime.split(";", 1)[0].strip().lower())


def type_of_name(filename: str | None) -> FileType | None:
    """The type a file name's extension names."""
    if not filename or "." not in filename:
        return None
    return BY_EXTENSION.get(filename.rsplit(".", 1)[1].strip().lower())


def sniffed(data: bytes) -> str | None:
    """The code of the binary type ``data``'s magic bytes name (None: none of them;
    the text types have no magic bytes)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data.startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        return _office_container(data)
    return None


def _office_container(data: bytes) -> str | None:
    """``docx`` or ``xlsx`` for a ZIP that holds its part (the names only are read)."""
    import io
    import zipfile

    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return None
    if "[Content_Types].xml" not in names:
        return None
    return next((code for code, part in _OFFICE_PART.items() if part in names), None)


def agrees(file_type: FileType, data: bytes) -> bool:
    """Whether ``data`` is what ``file_type`` says: its magic bytes for a binary type,
    valid UTF-8 (and no NUL) for a text type."""
    if file_type.is_text:
        if b"\x00" in data:
            return False
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return sniffed(data) is None
    return sniffed(data) == file_type.code


def image_size(code: str, data: bytes) -> tuple[int, int] | None:
    """An image's width and height in pixels, from its header (None: unreadable)."""
    try:
        if code == "png":
            width, height = struct.unpack(">II", data[16:24])
            return width, height
        if code == "gif":
            width, height = struct.unpack("<HH", data[6:10])
            return width, height
        if code == "webp":
            return _webp_size(data)
        if code == "jpeg":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


# JPEG start-of-frame markers (every SOFn but the DHT, JPG and DAC markers among them).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The size in a JPEG's first start-of-frame segment (segments walked by length)."""
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None
