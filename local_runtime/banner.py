"""The start-up banner: where things are, the dev token, and a walkthrough to paste."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

READY = "Ready."


@dataclass(frozen=True)
class BannerInfo:
    api_url: str
    lambda_url: str
    aws_endpoint: str
    aws_emulated: bool
    dev_token: str
    dev_token_generated: bool
    workspaces: Sequence[str] = ("dev",)
    capabilities: Sequence[str] = ()
    skipped: Sequence[str] = field(default_factory=list)
    connections: Sequence[str] = ("embedded",)
    tool_hosts: Sequence[str] = ()


def render_banner(info: BannerInfo) -> str:
    """The banner text; ``Ready.`` is its last line."""
    token_note = (
        "generated; set CONVO_DEV_TOKEN to keep one across restarts"
        if info.dev_token_generated
        else "from CONVO_DEV_TOKEN"
    )
    aws = (
        f"{info.aws_endpoint} (moto, in-process; data lasts until exit)"
        if info.aws_emulated
        else f"{info.aws_endpoint} (AWS_ENDPOINT_URL)"
    )
    lines = [
        "convo-memory local runtime",
        f"  API          {info.api_url}",
        f"  Lambda API   {info.lambda_url}  (FunctionName = logical id in template.yaml)",
        f"  AWS          {aws}",
        f"  Dev token    {info.dev_token}  ({token_note})",
        f"  Workspaces   {', '.join(info.workspaces)}",
    ]
    if info.capabilities:
        lines.append(f"  Capabilities {', '.join(info.capabilities)} (in each workspace)")
    lines.append(f"  Providers    {', '.join(info.connections)} (CONVO_PROVIDER_CONNECTIONS)")
    if info.tool_hosts:
        lines.append(f"  Tool hosts   {', '.join(info.tool_hosts)} (CONVO_TOOL_ALLOWED_HOSTS)")
    for name in info.skipped:
        lines.append(f"  Not running  {name}")
    lines.extend(["", "Try it (bash/zsh):", *_walkthrough(info), ""])
    lines.append("Ctrl-C stops everything.")
    lines.append(READY)
    return "\n".join(lines)


def _walkthrough(info: BannerInfo) -> list[str]:
    auth = '-H "Authorization: Bearer $TOKEN"'
    js = "-H 'content-type: application/json'"
    capture_id = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"id\"])'"
    commands = [
        f"export BASE={shlex.quote(info.api_url)}",
        f"export TOKEN={shlex.quote(info.dev_token)}",
        f'SESSION=$(curl -s -X POST "$BASE/v1/sessions" {auth} {js} \\',
        '  -d \'{"capabilityId": "cap-generative", "externalRef": "user-42"}\' \\',
        f"  | {capture_id})",
        'echo "session $SESSION"',
        f'curl -s -X POST "$BASE/v1/capabilities/cap-generative/predict" {auth} {js} \\',
        '  -d "{\\"input\\": \\"Hi, my name is Ada.\\", \\"sessionId\\": \\"$SESSION\\"}"; echo',
        f'curl -s -X POST "$BASE/v1/capabilities/cap-generative/predict" {auth} {js} \\',
        '  -d "{\\"input\\": \\"What is my name?\\", \\"sessionId\\": \\"$SESSION\\"}"; echo',
        f'curl -s "$BASE/v1/sessions/$SESSION/messages" {auth}; echo',
        f'curl -s "$BASE/v1/sessions/$SESSION/context" {auth}; echo',
        f"curl -s -X POST {shlex.quote(info.lambda_url)}"
        "/2015-03-31/functions/AuthorizerFunction/invocations \\",
        '  -d "{\\"type\\": \\"REQUEST\\", \\"headers\\": '
        '{\\"authorization\\": \\"Bearer $TOKEN\\"}}"; echo',
    ]
    return [f"  {command}" for command in commands]
