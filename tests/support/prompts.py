"""Comparing prompts across sessions: each session has a fence nonce of its own."""

from __future__ import annotations

from convo_memory.domain.prompt import ChatMessage, Prompt


def nonce_blind(prompt: Prompt) -> tuple[str, tuple[ChatMessage, ...]]:
    """A prompt's system text and messages with its session's fence nonce named NONCE:
    two sessions' prompts that differ by nothing else are then equal."""

    def blind(text: str) -> str:
        return text.replace(prompt.fence_nonce, "NONCE") if prompt.fence_nonce else text

    return blind(prompt.system), tuple(
        ChatMessage(m.role, blind(m.content)) for m in prompt.messages
    )
