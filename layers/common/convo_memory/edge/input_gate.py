"""The input gate: every request passes here before anything is stored or any model called.

One set of rules for every door (applied in one order by ``convo_memory.edge.turn_edge.gate``,
for the HttpApi routes and the streaming door alike), so that the same bad input gets
the same status and the same error body wherever it arrives:

- the body is UTF-8 JSON whose top level is an object, else ``400 invalid_json``; a byte
  order mark or a UTF-16/32 body is not UTF-8 JSON (RFC 8259 says JSON exchanged between
  systems is UTF-8 without a BOM), so it is ``400`` too, on every door;
- ``NaN``, ``Infinity``, numbers outside the IEEE double range and nesting deeper than
  ``MAX_DEPTH`` are ``400 invalid_json``;
- a string with an unpaired surrogate, anywhere (keys too), is ``422 validation_error``:
  such a string cannot be encoded as UTF-8, so it could be neither stored nor returned;
- a body over ``MAX_BODY_BYTES`` is ``413 payload_too_large``; (v5) one that carries
  attachments may be up to what Lambda carries (``MAX_ATTACHMENT_BODY_BYTES``), and
  ``POST /v1/files`` takes ``multipart/form-data`` instead of JSON (``edge.multipart``);
- ``Idempotency-Key`` is 1-255 printable ASCII characters (an empty one is ``422``);
- a path id that none of our ids could be is a ``404`` of its kind, answered without a
  store call (a DynamoDB key over 2 KB would be a 500);
- query values are bounded and checked like body strings.

Pure: the standard library and the domain only. The rules a value follows wherever it
is read (ids, seqs, depth, Unicode, a schema's refusal) are the domain's
(``convo_memory.domain.request_rules``); field rules (``externalRef``, ``principal``,
``metadata``) are in the request models (``convo_memory.api``), which
``request_rules.parse_model`` applies.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from convo_memory.domain.errors import (
    InvalidJson,
    PayloadTooLarge,
    ValidationFailed,
)
from convo_memory.domain.request_rules import (
    MAX_DEPTH,
    MAX_EXTERNAL_REF_CHARS,
    check_path_id,
    inspect_value,
)
from convo_memory.domain.text_rules import has_lone_surrogate

MAX_BODY_BYTES = 1024 * 1024
# (v5) What Lambda takes as it arrives (6 MB): a body that carries attachments, an upload.
MAX_ATTACHMENT_BODY_BYTES = 6 * 1024 * 1024
# Where a body carries attachments: the native doors' list, the chat door's and the
# Responses door's content parts of these types.
ATTACHMENT_PARTS = frozenset({"image_url", "file", "input_image", "input_file"})
MAX_QUERY_VALUE_CHARS = 2048
MAX_QUERY_NAME_CHARS = 64

IDEMPOTENCY_KEY = re.compile(r"[\x20-\x7e]{1,255}")
_UTF8_BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------- body


def read_json_object(
    raw: bytes | str | None, *, base64_encoded: bool = False, max_bytes: int = MAX_BODY_BYTES
) -> dict[str, Any]:
    """The request body as a JSON object, or the contract's 400/413/422. A body over
    ``max_bytes`` is read only when it carries attachments (up to what Lambda takes)."""
    data = _body_bytes(raw, base64_encoded)
    if len(data) > max(max_bytes, MAX_ATTACHMENT_BODY_BYTES):  # Lambda's request limit
        raise PayloadTooLarge(f"the request body is larger than {MAX_ATTACHMENT_BODY_BYTES} bytes")
    if not data:
        raise InvalidJson("the request body must be a JSON object")
    if data.startswith(_UTF8_BOM):
        raise InvalidJson("the request body must be UTF-8 JSON without a byte order mark")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidJson("the request body is not UTF-8") from None
    try:
        body = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_double_range_int,
        )
    except RecursionError:
        raise InvalidJson(f"the request body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and ints longer than Python reads
        raise InvalidJson(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidJson("the request body must be a JSON object")
    if len(data) > max_bytes and not carries_attachments(body):
        raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    inspect_value(body)
    return body


def carries_attachments(body: Mapping[str, Any]) -> bool:
    """(v5) Whether a body carries images or files: ``attachments``, or a content part
    of ``ATTACHMENT_PARTS`` in ``messages`` or ``input``."""
    if body.get("attachments"):
        return True
    for key in ("messages", "input"):
        entries = body.get(key)
        for entry in entries if isinstance(entries, list) else ():
            content = entry.get("content") if isinstance(entry, dict) else None
            for part in content if isinstance(content, list) else ():
                if isinstance(part, dict) and part.get("type") in ATTACHMENT_PARTS:
                    return True
    return False


def _body_bytes(raw: bytes | str | None, base64_encoded: bool) -> bytes:
    if raw is None:
        return b""
    if base64_encoded:
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidJson("the request body is not valid base64") from None
    if isinstance(raw, bytes):
        return raw
    try:
        return raw.encode("utf-8")
    except UnicodeEncodeError:  # a raw lone surrogate: these bytes were not UTF-8
        raise InvalidJson("the request body is not UTF-8") from None


def _refuse_constant(name: str) -> Any:
    raise InvalidJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson(f"the number {text[:40]} is outside the IEEE double range")
    return value


def _double_range_int(text: str) -> int:
    value = int(text)
    if abs(value) > sys.float_info.max:
        raise InvalidJson(f"the number {text[:40]}... is outside the IEEE double range")
    return value


# --------------------------------------------------------------------------- headers, ids, query


def idempotency_key(headers: Mapping[str, str]) -> str | None:
    """The ``Idempotency-Key`` header (looked up case-insensitively), ``None`` when absent,
    ``422`` when present but not 1-255 printable ASCII characters (empty included)."""
    key = next((v for k, v in headers.items() if k.lower() == "idempotency-key"), None)
    if key is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise ValidationFailed(
            "Idempotency-Key must be 1-255 printable ASCII characters", param="Idempotency-Key"
        )
    return key


def check_query(params: Mapping[str, str] | None) -> None:
    """Query names and values bounded, and valid Unicode, like body strings."""
    for name, value in (params or {}).items():
        if len(name) > MAX_QUERY_NAME_CHARS or len(value) > MAX_QUERY_VALUE_CHARS:
            raise ValidationFailed(
                f"query parameters are at most {MAX_QUERY_NAME_CHARS}-character names "
                f"with values of at most {MAX_QUERY_VALUE_CHARS} characters"
            )
        if has_lone_surrogate(name) or has_lone_surrogate(value):
            raise ValidationFailed("a query parameter holds an unpaired surrogate")


def external_ref(value: str | None) -> str:
    """A required ``externalRef`` (query or body): 1-256 characters."""
    if not value:
        raise ValidationFailed("externalRef is required: sessions are listed per end user")
    if len(value) > MAX_EXTERNAL_REF_CHARS:
        raise ValidationFailed(f"externalRef is at most {MAX_EXTERNAL_REF_CHARS} characters")
    return value


# --------------------------------------------------------------------------- the gate, in order

METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True)
class GatedRequest:
    """A request the input gate let through: the token's workspace (None on a route
    without the authorizer), its ``Idempotency-Key``, its body (None without one), and
    its route (``METHOD /path``: what an Idempotency-Key is scoped to)."""

    workspace_id: str | None
    idempotency_key: str | None
    body: dict[str, Any] | None
    route: str


def gate(
    *,
    method: str,
    route: str,
    headers: Mapping[str, str],
    query: Mapping[str, str] | None,
    body: bytes | str | None,
    workspace_id: str | None = None,
    path_ids: Mapping[str, str] | None = None,
    base64_encoded: bool = False,
    multipart: bool = False,
) -> GatedRequest:
    """The input gate, in every door's order, once the door has found the token's
    workspace (401 first; None on a route without the authorizer): path ids, headers,
    query and body. ``route`` is the request's ``METHOD /path`` as the door names it;
    ``multipart``: (v5) its body is a form (an upload), bounded, read by its route."""
    for name, value in (path_ids or {}).items():
        check_path_id(name, str(value))
    key = idempotency_key(headers)
    check_query(query)
    payload = None
    if multipart:
        if len(_body_bytes(body, base64_encoded)) > MAX_ATTACHMENT_BODY_BYTES:
            raise PayloadTooLarge(
                f"the request body is larger than {MAX_ATTACHMENT_BODY_BYTES} bytes"
            )
    elif method.upper() in METHODS_WITH_BODY:
        payload = read_json_object(body, base64_encoded=base64_encoded)
    return GatedRequest(workspace_id, key, payload, route)
