"""(v5) ``multipart/form-data``: the input gate's one exception to JSON (``POST
/v1/files``, as OpenAI's SDKs upload). Pure: the standard library's MIME parser reads
the form; fields are bounded, the file is the one part with a file name."""

from __future__ import annotations

from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP

from convo_memory.domain.errors import InvalidJson, ValidationFailed

MAX_FIELD_CHARS = 1024
MAX_PARTS = 16


@dataclass(frozen=True)
class FormFile:
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(frozen=True)
class Form:
    """A form's text fields by name, and its file (None: none sent)."""

    fields: dict[str, str] = field(default_factory=dict)
    file: FormFile | None = None


def read_form(content_type: str | None, body: bytes) -> Form:
    """The form a ``multipart/form-data`` body holds; ``400 invalid_json`` for another
    body (the contract's code for a body that cannot be read), ``422`` for a field over
    its bound or two files."""
    if not content_type or not content_type.lower().startswith("multipart/form-data"):
        raise InvalidJson("the request body must be multipart/form-data (a file upload)")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise InvalidJson("the request body is not a multipart form")
    fields: dict[str, str] = {}
    file: FormFile | None = None
    for count, part in enumerate(message.iter_parts()):
        if count >= MAX_PARTS:
            raise ValidationFailed(f"a form of at most {MAX_PARTS} parts")
        name = part.get_param("name", header="content-disposition")
        filename = part.get_filename()
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if filename is not None or name == "file":
            if file is not None:
                raise ValidationFailed("file: one file an upload", param="file")
            # A part without a Content-Type declares none (MIME's default says text/plain).
            declared = part.get_content_type() if part.get("content-type") else None
            file = FormFile(filename, declared, data)
        elif isinstance(name, str):
            text = data.decode("utf-8", errors="replace")
            if len(text) > MAX_FIELD_CHARS:
                raise ValidationFailed(f"{name}: at most {MAX_FIELD_CHARS} characters", param=name)
            fields[name] = text
    return Form(fields, file)
