"""What the embedded models make of an app's schemas and of a fork (v5), apart from how
they decide to call tools (``embedded``):

- an app tool's arguments conform to its ``parameters`` schema, with the input's words
  where a string fits (an agent's own webhook tools still get ``{"query": <input>}``);
- under structured output (``response_format``, or the Responses door's
  ``text.format``) the answer is JSON: under ``json_schema`` a value of the schema, under
  ``json_object`` an object whose ``answer`` is the plain answer (the input verbatim);
- in a fork every answer opens by naming the fork ("Another take (branch ...)"), so a
  regenerated answer differs from its parent's while answers outside forks stay as
  they were;
- (v5) an answer says what images and documents it was sent (``attachments_note``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from convo_memory.domain.file_types import image_size
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.schema_instances import schema_instance
from convo_memory.domain.tools import ToolDefinition


def tool_arguments(tool: ToolDefinition, text: str) -> dict[str, Any]:
    """The arguments the embedded models call ``tool`` with for the input ``text``."""
    if tool.kind != "app":
        return {"query": text}
    made = schema_instance(dict(tool.input_schema), text)
    return made if isinstance(made, dict) else {}


def answer_schema(response_format: Mapping[str, Any]) -> Any:
    """The JSON Schema a structured answer follows: the chat door's
    ``{"type": "json_schema", "json_schema": {"schema": ...}}`` or the Responses door's
    flat ``{"type": "json_schema", "schema": ...}``; None for ``json_object`` (any
    object)."""
    if response_format.get("type") != "json_schema":
        return None
    nested = response_format.get("json_schema")
    if isinstance(nested, Mapping) and "schema" in nested:
        return nested["schema"]
    return response_format.get("schema")


def shaped_answer(prompt: Prompt, plain: str, text: str) -> str:
    """The answer as the prompt asks for it: ``plain`` (the model's own answer), or JSON
    under structured output (made from the input ``text``); in a fork, marked as
    another take."""
    response_format = prompt.options.response_format
    if response_format is not None and response_format.get("type") in (
        "json_object",
        "json_schema",
    ):
        schema = answer_schema(response_format)
        if schema is None:
            return json.dumps({"answer": another_take(prompt, plain)}, ensure_ascii=False)
        return json.dumps(schema_instance(schema, text), ensure_ascii=False)
    return another_take(prompt, plain)


def another_take(prompt: Prompt, plain: str) -> str:
    """``plain``, opened in a fork by the fork's name: a regenerated answer is then a
    different one, the same for the same fork every time."""
    if not prompt.branch:
        return plain
    tag = hashlib.sha256(prompt.branch.encode("utf-8")).hexdigest()[:6]
    return f"Another take (branch {tag}): {plain}"


def attachments_note(prompt: Prompt) -> str:
    """(v5) What the model was sent of images and documents: each attachment of the
    input (its name, type, size and, for an image, its pixels), and how many came with
    earlier messages; "" when none."""
    if not prompt.messages:
        return ""
    latest = [_described(sent.ref, sent.data) for sent in prompt.messages[-1].attachments]
    earlier = sum(len(m.attachments) for m in prompt.messages[:-1])
    parts = []
    if latest:
        parts.append(f"I see {', '.join(latest)} with your message.")
    if earlier:
        parts.append(f"I also see {earlier} attachment(s) from earlier messages.")
    return " ".join(parts)


def _described(ref: Any, data: bytes | None) -> str:
    size = image_size(ref.code, data) if ref.type == "image" and data else None
    pixels = f", {size[0]}x{size[1]} pixels" if size else ""
    return f"{ref.type} {ref.filename} ({ref.code.upper()}{pixels}, {ref.bytes} bytes)"
