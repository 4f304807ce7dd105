"""What every resource's wire models share: the answers' base shape, the error
body, the streaming door's events, and the rule that an input says something."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from convo_memory.domain.tools import ToolStatus

MAX_METADATA_BYTES = 8 * 1024
MAX_METADATA_DEPTH = 8


@cache
def not_only_whitespace() -> str:
    """A pattern found in any text that holds a character ``str.strip`` keeps (an input
    of whitespace only is refused as empty), written for ECMA-262 and Python alike.
    Every Unicode whitespace character is in the Basic Multilingual Plane."""
    spaces = (code for code in range(0x10000) if chr(code).isspace())
    return "[^" + "".join(f"\\u{code:04x}" for code in spaces) + "]"


class Answer(BaseModel):
    """An answer's shape: camelCase, and (unlike a request) open to fields added later."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ErrorDetail(Answer):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    details: list[Any] | None = None
    request_id: str | None = Field(default=None, description="On 5xx: quote it to support.")


class ErrorBody(Answer):
    """Every error: ``{"error": {"code", "message"}}`` (``details`` on a validation
    error, ``requestId`` on a 5xx)."""

    error: ErrorDetail


class StreamDelta(Answer):
    text: str = Field(description="The next piece of the answer, in order.")


class StreamTool(Answer):
    name: str = Field(description="The tool the agent called.")
    status: ToolStatus


def said_schema(schema: dict[str, Any]) -> None:
    # The serving path refuses an empty input (422) and a long one (413).
    schema.update(
        minLength=1,
        pattern=not_only_whitespace(),
        description="What the end user said: not empty nor only whitespace. Over the "
        "deployment's MaxInputChars (default 32,000) characters or 200 KiB of UTF-8: 413.",
    )


def object_schema(schema: dict[str, Any]) -> None:
    schema.pop("anyOf")
    schema.pop("default", None)
    schema.update(type="object", additionalProperties=True)


def check_metadata(metadata: dict[str, Any]) -> None:
    import json

    # Depth first: it also bounds the work of serializing below.
    if json_depth(metadata) > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata is at most {MAX_METADATA_DEPTH} levels deep")
    compact = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)
    if len(compact.encode("utf-8", "surrogatepass")) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is at most {MAX_METADATA_BYTES} bytes of compact JSON")


def json_depth(value: Any) -> int:
    """Levels of nested objects and arrays (``{}`` is 1), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest
