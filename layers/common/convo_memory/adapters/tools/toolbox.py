"""The tools of one capability (``ports.Toolbox``): what the model is offered and how
each call is made, webhooks and built-ins alike, always with the session's principal."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from convo_memory.adapters.tools.builtin import BUILTIN_DEFINITIONS, run_builtin
from convo_memory.adapters.tools.sealing import SealerError, SigningSecrets
from convo_memory.adapters.tools.url_policy import UrlPolicy
from convo_memory.adapters.tools.webhook import WebhookClient, webhook_body
from convo_memory.domain.errors import StoreUnavailable
from convo_memory.domain.models import Capability, ToolSpec
from convo_memory.domain.tools import ToolCallContext, ToolDefinition, ToolOutcome
from convo_memory.ports import SecretSealer

logger = logging.getLogger(__name__)

DEFAULT_WEBHOOK_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


def tool_definitions(capability: Capability) -> tuple[ToolDefinition, ...]:
    """The capability's tools as a model is offered them: its webhooks and built-ins
    (an agent that declares none gets both built-ins; names this deployment does not
    know, left by capabilities stored before webhook tools existed, are skipped)."""
    specs = capability.tools or [ToolSpec(name=name) for name in BUILTIN_DEFINITIONS]
    definitions: list[ToolDefinition] = []
    for spec in specs:
        if spec.is_webhook:
            definitions.append(
                ToolDefinition(
                    spec.name, spec.description, spec.input_schema or DEFAULT_WEBHOOK_SCHEMA
                )
            )
        elif spec.name in BUILTIN_DEFINITIONS:
            builtin = BUILTIN_DEFINITIONS[spec.name]
            definitions.append(
                ToolDefinition(
                    builtin.name, spec.description or builtin.description, builtin.input_schema
                )
            )
    return tuple(definitions)


class CapabilityToolbox:
    def __init__(
        self, capability: Capability, webhooks: WebhookClient, secrets: SigningSecrets
    ) -> None:
        self._capability = capability
        self._webhooks = webhooks
        self._secrets = secrets
        self.definitions = tool_definitions(capability)
        self._urls = {tool.name: tool.url for tool in capability.webhook_tools if tool.url}

    def call(
        self, name: str, tool_input: Mapping[str, Any], context: ToolCallContext, timeout: float
    ) -> ToolOutcome:
        """Call tool ``name`` with the context's principal; never raises."""
        if name not in {d.name for d in self.definitions}:
            return ToolOutcome("error", f"there is no tool named {name!r}")
        url = self._urls.get(name)
        if url is None:
            try:
                result = run_builtin(name, tool_input, context.principal)
            except ValueError as exc:
                return ToolOutcome("error", str(exc))
            return ToolOutcome("ok", json.dumps(result, sort_keys=True))
        secret = self._secret(context)
        if secret is None:
            return ToolOutcome("error", "not called: the tool's signing secret is unavailable")
        body = webhook_body(
            name,
            tool_input,
            context.principal,
            context.session_id,
            context.capability_id,
            context.run_id,
        )
        return self._webhooks.call(url, body, secret, timeout)

    def _secret(self, context: ToolCallContext) -> str | None:
        ciphertext = self._capability.tool_secret_ciphertext
        if not ciphertext:
            logger.error("capability %s has webhook tools but no secret", self._capability.id)
            return None
        try:
            return self._secrets.get(context.workspace_id, self._capability.id, ciphertext)
        except (SealerError, StoreUnavailable, ValueError):
            logger.exception("could not open the signing secret of %s", self._capability.id)
            return None


class ToolAdapters:
    """Builds toolboxes for capabilities: one URL policy, one webhook client and one
    cache of decrypted signing secrets per container."""

    def __init__(self, policy: UrlPolicy, sealer: SecretSealer) -> None:
        self.policy = policy
        self.sealer = sealer
        self.webhooks = WebhookClient(policy)
        self.secrets = SigningSecrets(sealer)

    def toolbox(self, capability: Capability) -> CapabilityToolbox:
        return CapabilityToolbox(capability, self.webhooks, self.secrets)
