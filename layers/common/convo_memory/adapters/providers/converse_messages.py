"""A prompt's messages as Bedrock Converse takes them: the first a user's, roles
alternating, no blank text block, a client's own tool exchange as ``toolUse`` /
``toolResult`` blocks, (v5) images and documents as ``image`` / ``document`` blocks, and
a cache point after the replayed messages (a prefix the provider may cache)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from convo_memory.adapters.providers.attachment_blocks import converse_blocks
from convo_memory.domain.prompt import ChatMessage

# Bedrock requires conversations to start with a user turn. A replay window can start
# with an assistant answer; rather than drop it (the model would see less than the
# turn's reported context), it is kept behind this neutral user placeholder.
LEADING_USER_PLACEHOLDER = "(continuing an earlier conversation)"

# Bedrock rejects blank text blocks.
EMPTY_CONTENT_PLACEHOLDER = "(empty message)"

# Marks the end of a prefix the provider may cache (Converse's CachePointBlock).
CACHE_POINT: dict[str, Any] = {"cachePoint": {"type": "default"}}


def normalize_messages(
    messages: Iterable[ChatMessage], tool_blocks: bool = False
) -> list[dict[str, Any]]:
    """Converse messages: first role ``user``, roles alternating, no blank text.

    Consecutive messages of one role are merged (texts with a blank line); a leading
    assistant message is kept behind ``LEADING_USER_PLACEHOLDER``. A client's own tool
    exchange (v4) becomes ``toolUse`` / ``toolResult`` blocks with ``tool_blocks``, else
    text that says what was called and returned.
    """
    merged: list[tuple[str, list[dict[str, Any]]]] = []
    names: set[str] = set()  # (v5) document names, unique within the request
    for message in messages:
        role, blocks = _blocks_of(message, tool_blocks, names)
        if merged and merged[-1][0] == role:
            last = merged[-1][1]
            if "text" in last[-1] and "text" in blocks[0]:
                last[-1] = {"text": f"{last[-1]['text']}\n\n{blocks[0]['text']}"}
                blocks = blocks[1:]
            last.extend(blocks)
        else:
            merged.append((role, blocks))
    if merged and merged[0][0] != "user":
        merged.insert(0, ("user", [{"text": LEADING_USER_PLACEHOLDER}]))
    return [{"role": role, "content": blocks} for role, blocks in merged]


def _blocks_of(
    message: ChatMessage, tool_blocks: bool, names: set[str]
) -> tuple[str, list[dict[str, Any]]]:
    """A message's role and content blocks in Converse ((v5) its images and documents
    after its text)."""
    text = message.content if message.content.strip() else EMPTY_CONTENT_PLACEHOLDER
    if message.role == "tool":
        if not tool_blocks:
            return "user", [{"text": f"[result of tool call {message.tool_call_id}] {text}"}]
        result = {"toolUseId": message.tool_call_id, "content": [{"text": text}]}
        return "user", [{"toolResult": result}]
    if not message.tool_calls:
        return message.role, [{"text": text}, *converse_blocks(message.attachments, names)]
    if not tool_blocks:
        called = "; ".join(
            f"{r.name}({json.dumps(dict(r.input), ensure_ascii=False)}) as {r.call_id}"
            for r in message.tool_calls
        )
        return message.role, [{"text": f"{message.content}\n[called tools: {called}]".strip()}]
    blocks: list[dict[str, Any]] = [{"text": message.content}] if message.content.strip() else []
    blocks.extend(
        {"toolUse": {"toolUseId": r.call_id, "name": r.name, "input": dict(r.input)}}
        for r in message.tool_calls
    )
    return message.role, blocks


def cache_point(ttl: str | None = None) -> dict[str, Any]:
    """A cache point block; with ``ttl`` (``5m`` or ``1h``) the cached prefix lives that
    long after its last use (every cache point of a request gets the same TTL: Bedrock
    refuses a later one that is longer than an earlier one)."""
    return {"cachePoint": {**CACHE_POINT["cachePoint"], **({"ttl": ttl} if ttl else {})}}


def copy_point(point: dict[str, Any]) -> dict[str, Any]:
    return {"cachePoint": dict(point["cachePoint"])}


def cached_messages(
    messages: Sequence[ChatMessage], point: dict[str, Any] = CACHE_POINT
) -> list[dict[str, Any]]:
    """``normalize_messages`` with a cache point (``point``) after the last replayed
    message (every message but the last, the current input). The input stays a block of
    its own after the cache point when it shares that message's role."""
    replayed, current = list(messages[:-1]), list(messages[-1:])
    if not replayed:
        return normalize_messages(messages)
    converse = normalize_messages(replayed)
    converse[-1]["content"].append(copy_point(point))
    for message in normalize_messages(current):
        if message["role"] == converse[-1]["role"]:
            converse[-1]["content"].extend(message["content"])
        else:
            converse.append(message)
    return converse
