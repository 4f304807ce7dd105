"""Comparing prompts across sessions (each session has a fence nonce of its own), and
with what a turn's prompt record says it was sent."""

from __future__ import annotations

from convo_memory.domain.models import Summary, ToolDigest
from convo_memory.domain.prompt import ChatMessage, Prompt, build_prompt
from convo_memory.domain.prompt_record import SentPrompt


def nonce_blind(prompt: Prompt) -> tuple[str, tuple[ChatMessage, ...]]:
    """A prompt's system text and messages with its session's fence nonce named NONCE:
    two sessions' prompts that differ by nothing else are then equal."""

    def blind(text: str) -> str:
        return text.replace(prompt.fence_nonce, "NONCE") if prompt.fence_nonce else text

    return blind(prompt.system), tuple(
        ChatMessage(m.role, blind(m.content)) for m in prompt.messages
    )


def rebuilt_prompt(sent: SentPrompt, nonce: str) -> Prompt:
    """The prompt a ``SentPrompt`` stands for, fenced with the session's ``nonce``: what
    the provider received, when none of its parts has expired since."""
    return build_prompt(
        instructions=sent.instructions,
        summary=sent.summary if isinstance(sent.summary, Summary) else None,
        digests=[d for d in sent.tool_digests if isinstance(d, ToolDigest)],
        replayed=sent.messages,
        user_input=sent.input,
        nonce=nonce,
        recall=sent.recall.text if sent.recall else None,
    )
