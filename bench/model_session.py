"""One session on a generative capability whose model is a fake OpenAI-compatible
server on 127.0.0.1, in an in-process stack with summary jobs run at once: the set-up
of the figures that read every prompt the model received (8 and 15)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.support.inprocess_api import InProcessApi

MODEL = "bench-model-1"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY")


@contextmanager
def model_session(
    workspace_name: str,
    respond: Callable[[Any], str],
    *,
    usage_for: Callable[[Any], dict[str, Any]] | None = None,
    replay: dict[str, Any] | None = None,
) -> Iterator[tuple[FakeOpenAIServer, InProcessApi, str, str]]:
    """The fake model (answering with ``respond``, reporting ``usage_for``), the stack,
    the workspace's token and the session's id."""
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    for name in PROXY_VARIABLES:  # the fake model is reached directly
        os.environ.pop(name, None)
    with FakeOpenAIServer() as server:
        server.respond, server.usage_for = respond, usage_for
        connections = {"bench": {"type": "openai", "baseUrl": server.base_url, "models": ["*"]}}
        env = {
            "PROVIDER_CONNECTIONS": json.dumps(connections),
            "SUMMARY_COALESCE_SECONDS": "0",
            "SUMMARY_DELAY_SECONDS": "0",
        }
        with inprocess_stack(env) as api:
            _, token = new_workspace(api, workspace_name)
            capability: dict[str, Any] = {
                "name": "bench support",
                "kind": "generative",
                "provider": {"connection": "bench", "modelId": MODEL},
            }
            if replay is not None:
                capability["replay"] = replay
            created = api.call("POST", "/v1/capabilities", token=token, json_body=capability)
            if created.status != 201:
                raise RuntimeError(f"could not create the capability: {created.body}")
            session = api.call(
                "POST",
                "/v1/sessions",
                token=token,
                json_body={"capabilityId": created.body["id"], "externalRef": "bench"},
            )
            yield server, api, token, session.body["id"]
