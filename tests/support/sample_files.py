"""Small, real files of every type the service takes (v5), made in memory: what the
attachment tests send. Each is the smallest that its type's reader accepts."""

from __future__ import annotations

import base64
import io
import struct
import zipfile
import zlib


def png(width: int = 2, height: int = 2, seed: int = 0) -> bytes:
    """A PNG of ``width`` x ``height`` red pixels (``seed`` changes its bytes)."""
    rows = b"".join(b"\x00" + bytes([255, seed % 256, 0]) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def padded_png(total_bytes: int) -> bytes:
    """A small PNG padded to ``total_bytes`` with an ancillary chunk (a big image file)."""
    small = png()
    filler = total_bytes - len(small) - 12
    body = b"x" * max(0, filler)
    extra = (
        struct.pack(">I", len(body))
        + b"tEXt"
        + body
        + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    )
    return small[:-12] + extra + small[-12:]


def gif(width: int = 3, height: int = 1) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def jpeg(width: int = 4, height: int = 5) -> bytes:
    """A JPEG header with an APP0 segment and a baseline start-of-frame."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def webp(width: int = 6, height: int = 7) -> bytes:
    """A lossless (VP8L) WebP header."""
    bits = (width - 1) | ((height - 1) << 14)
    payload = b"\x2f" + bits.to_bytes(4, "little")
    chunk = b"VP8L" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def pdf(text: str = "Terms") -> bytes:
    return f"%PDF-1.4\n1 0 obj << /Title ({text}) >> endobj\ntrailer << >>\n%%EOF\n".encode()


def office(kind: str) -> bytes:
    """A DOCX (``docx``) or an XLSX (``xlsx``) container: its content types and main part."""
    part = {"docx": "word/document.xml", "xlsx": "xl/workbook.xml"}[kind]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr(part, "<document/>")
    return buffer.getvalue()


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
