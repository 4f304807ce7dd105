"""Content filters: check an answer before the consumer receives it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from convo_memory.domain.generation import FilterVerdict
from convo_memory.domain.text_rules import has_lone_surrogate
from convo_memory.ports import ContentFilter

if TYPE_CHECKING:
    from convo_memory.adapters.aws_clients import BedrockClientFactory
    from convo_memory.domain.models import ContentFilterConfig

logger = logging.getLogger(__name__)


class EmbeddedContentFilter:
    """Blocks answers that contain a blocked term or match a blocked pattern.

    Terms match case-insensitively (Unicode casefold) as plain substrings, not whole
    words: "secret" also blocks "secrets" and "topsecret". A filter that errs towards
    withholding is the safer default; a capability that needs word boundaries can say
    so with a pattern such as ``\\bsecret\\b``. Terms are searched as plain strings (no
    regular expression), patterns run on RE2 exactly as given (add ``(?i)`` for
    case-insensitivity), compiled once: both take time linear in the answer's length,
    so no pattern can make one answer take exponential time.
    """

    def __init__(self, blocked_terms: Iterable[str] = (), blocked_patterns: Iterable[str] = ()):
        from convo_memory.domain.models import compile_blocked_pattern

        # A blank term would match every answer; it is ignored.
        self._terms = tuple(
            (term, term.casefold()) for term in blocked_terms if term and term.strip()
        )
        self._patterns: list[Any] = []
        self._unusable: list[str] = []
        for pattern in blocked_patterns:
            try:
                self._patterns.append(compile_blocked_pattern(pattern))
            except ValueError:
                # Only a capability stored before patterns were RE2 can get here. Fail
                # closed, like an unavailable guardrail: skipping it would let through
                # what the tenant asked to block.
                logger.warning("blocked pattern is not valid RE2; withholding answers")
                self._unusable.append(pattern)

    def check(self, text: str) -> FilterVerdict:
        if self._unusable:
            return FilterVerdict(False, f"blocked pattern /{self._unusable[0]}/ is not valid RE2")
        if has_lone_surrogate(text):  # RE2 matches UTF-8; such text could not be sent anyway
            text = text.encode("utf-8", "replace").decode("utf-8")
        folded = text.casefold()
        for term, folded_term in self._terms:
            if folded_term in folded:
                return FilterVerdict(False, f"blocked term {term!r}")
        for pattern in self._patterns:
            if pattern.search(text):
                return FilterVerdict(False, f"blocked pattern /{pattern.pattern}/")
        return FilterVerdict(True)


class BedrockGuardrailFilter:
    """Runs the answer through a Bedrock guardrail (``ApplyGuardrail``, source OUTPUT)."""

    def __init__(
        self,
        client: Any | None = None,
        guardrail_id: str = "",
        version: str = "",
        *,
        client_factory: Callable[[], Any] | None = None,
    ) -> None:
        if client is None and client_factory is None:
            raise ValueError("BedrockGuardrailFilter needs a client or a client_factory")
        self._client = client
        self._client_factory = client_factory
        self.guardrail_id = guardrail_id
        self.version = version

    @property
    def client(self) -> Any:
        if self._client is None:
            assert self._client_factory is not None
            self._client = self._client_factory()
        return self._client

    def check(self, text: str) -> FilterVerdict:
        if not text.strip():
            return FilterVerdict(True)  # nothing to assess; ApplyGuardrail rejects blank text
        try:
            response = self.client.apply_guardrail(
                guardrailIdentifier=self.guardrail_id,
                guardrailVersion=self.version,
                source="OUTPUT",
                content=[{"text": {"text": text}}],
            )
            action = response.get("action")
        except Exception as exc:
            # Fail closed: when the guardrail cannot say the answer is safe, the answer
            # is withheld. Serving unchecked text would make the filter optional exactly
            # when the guardrail is throttled or misconfigured.
            error = getattr(exc, "response", None)
            code = (error.get("Error", {}).get("Code") if isinstance(error, dict) else None) or (
                type(exc).__name__
            )
            logger.warning("guardrail check failed; withholding the answer (%s)", code)
            return FilterVerdict(False, f"guardrail unavailable ({code})")
        if action == "NONE":
            return FilterVerdict(True)
        if action == "GUARDRAIL_INTERVENED":
            return FilterVerdict(False, "guardrail intervened")
        logger.warning("guardrail returned unexpected action %r; withholding", action)
        return FilterVerdict(False, f"guardrail returned unexpected action {action!r}")


def build_content_filter(
    config: ContentFilterConfig | None,
    *,
    bedrock_clients: BedrockClientFactory | None = None,
    timeout_seconds: float | None = None,
) -> ContentFilter | None:
    """The capability's content filter, or ``None`` when it has none. A guardrail runs
    in the function's region with the deployment's provider timeout."""
    if config is None:
        return None
    if config.type == "embedded":
        return EmbeddedContentFilter(config.blocked_terms, config.blocked_patterns)
    if config.type == "bedrock-guardrail":
        from convo_memory.adapters.aws_clients import client_factory_for

        return BedrockGuardrailFilter(
            guardrail_id=config.guardrail_id or "",
            version=config.guardrail_version or "",
            client_factory=client_factory_for(bedrock_clients, None, timeout_seconds),
        )
    raise ValueError(f"unknown content filter type {config.type!r}")
