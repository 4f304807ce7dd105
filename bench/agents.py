"""Figure 7: one agent turn that calls three webhook tools, on the in-process stack.

The embedded agent (deterministic) on a capability with three webhook tools, served by a
local tool server on 127.0.0.1 (signed calls, as on AWS), through the real handlers and
moto tables. Measured on a warm container: model calls and tool calls of the turn,
DynamoDB requests and capacity units (``bench.capacity``), KMS requests; then the next
turn's prompt, as the model receives it: the digest characters it replays (inside the
data fence) and their share of the prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("track_parcel", "carrier_status", "delivery_window")
QUESTION = "Please track_parcel for order 12345, check carrier_status and the delivery_window."
FOLLOW_UP = "So when exactly will it arrive?"
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def tool_output(name: str) -> dict[str, Any]:
    """A realistic, verbose tool answer (about 900 characters of JSON)."""
    events = [
        {"at": f"2025-06-1{i}T0{i}:15:00Z", "where": f"hub {i}", "note": "scanned " * 6}
        for i in range(5)
    ]
    return {"output": {"tool": name, "status": "in transit", "eta": "2025-06-14", "events": events}}


class _RecordingProvider:
    """Wraps the capability's provider and keeps every prompt it is given."""

    def __init__(self, inner: Any, prompts: list[Any]) -> None:
        self._inner = inner
        self._prompts = prompts

    def step(self, prompt: Any, rounds: Any, *args: Any, **kwargs: Any) -> Any:
        if not rounds:
            self._prompts.append(prompt)
        return self._inner.step(prompt, rounds, *args, **kwargs)

    def complete(self, prompt: Any) -> Any:
        return self._inner.complete(prompt)

    def stream(self, prompt: Any) -> Any:
        return self._inner.stream(prompt)


def fenced_digest_chars(prompt: Any) -> int:
    """Characters inside the prompt's real tool-result fences (a digest travels in the
    message after its answer)."""
    nonce = re.escape(prompt.fence_nonce)
    fence = re.compile(rf'<data-{nonce} kind="tool-results"[^>\n]*>\n(.*?)\n</data-{nonce}>', re.S)
    texts = [prompt.system, *(message.content for message in prompt.messages)]
    return sum(len(body) for text in texts for body in fence.findall(text))


def prompt_chars(prompt: Any) -> int:
    return len(prompt.system) + sum(len(message.content) for message in prompt.messages)


def agent_turn_figure(progress: Callable[[str], None]) -> dict[str, Any]:
    """Figure 7 (see the module docstring)."""
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from convo_memory.services.admin import create_workspace
    from tests.fakes.webhook_server import Reply, WebhookServer
    from tests.support.inprocess_api import inprocess_stack

    progress("a 3-tool agent turn")
    with WebhookServer() as hook, inprocess_stack({"TOOL_ALLOWED_HOSTS": hook.host}) as api:
        for name in TOOLS:
            hook.answers[f"/{name}"] = Reply(200, tool_output(name))
        token = create_workspace(api.container.adapters.stores.tokens, "bench").token
        body = {
            "name": "bench agent",
            "kind": "agent",
            "tools": [
                {"name": n, "description": n, "inputSchema": SCHEMA, "url": hook.url(f"/{n}")}
                for n in TOOLS
            ],
        }
        created = api.call("POST", "/v1/capabilities", token=token, json_body=body).body
        hook.secret = created["toolSigningSecret"]
        capability = created["id"]

        prompts: list[Any] = []
        registry = api.container.infrastructure.registry
        build = registry.provider
        registry.provider = lambda *a, **kw: _RecordingProvider(build(*a, **kw), prompts)  # type: ignore[method-assign]

        def session() -> str:
            response = api.call(
                "POST",
                "/v1/sessions",
                token=token,
                json_body={"capabilityId": capability, "externalRef": "bench"},
            )
            return str(response.body["id"])

        def turn(session_id: str, text: str) -> Any:
            response = api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": text},
            )
            if response.status != 200:
                raise RuntimeError(f"agent turn failed: {response.status} {response.body}")
            return response.body

        turn(session(), QUESTION)  # warm: capability cached, signing secret decrypted
        kms: list[str] = []
        api.container.infrastructure.clients["kms"].meta.events.register(
            "after-call.kms", lambda model, **_: kms.append(model.name)
        )
        side = boto3.client("dynamodb", region_name="us-east-1")
        meter = CapacityMeter(
            api.container.infrastructure.clients["dynamodb"],
            side,
            table_specs(ROOT / "template.yaml", api.resources.tables),
        )
        session_id = session()
        hook.calls.clear()
        meter.reset()
        answered = turn(session_id, QUESTION)
        units = meter.reset()
        run = api.call("GET", f"/v1/runs/{answered['runId']}", token=token).body
        tool_chars = sum(len(json.dumps(tool_output(n)["output"])) for n in TOOLS)

        prompts.clear()
        turn(session_id, FOLLOW_UP)
        next_prompt = prompts[0]
        digest = fenced_digest_chars(next_prompt)
        total = prompt_chars(next_prompt)
    return {
        "tools": len(TOOLS),
        "modelCalls": run["modelCalls"],
        "toolCalls": len(hook.calls),
        "signaturesValid": all(call.signature_valid for call in hook.calls),
        "stopReason": run["stopReason"],
        "dynamodb": units.to_dict(),
        "kmsRequests": len(kms),
        "toolOutputChars": tool_chars,
        "digestMaxChars": api.container.settings.digest_max_chars,
        "digestChars": digest,
        "nextPromptChars": total,
        "digestShare": digest / total if total else None,
    }
