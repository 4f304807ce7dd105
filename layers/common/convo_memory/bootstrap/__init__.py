"""The composition root: the one place adapters are built and wired into services.

Two typed steps, as in cosmicpython's ``bootstrap.py``: ``build_adapters(settings,
clients)`` makes every adapter (``bootstrap.adapters``: the services' ports, and the
concrete pieces the edge and the operator use beside them), and ``build_services(
adapters, infrastructure, settings, clock)`` wires the services over the ports with the
deployment's policies (``bootstrap.services``, ``bootstrap.policies``). Nothing else
constructs a collaborator: a service is handed everything it uses. It runs once per
execution environment over the process's one ``AwsClients``
(``convo_memory.execution_environment``), lazily: importing a handler stays cheap, and
clients are reused across warm invocations. The unit tests hand ``build_services`` fake
``Adapters`` (``tests/fakes/app.py``): the services are wired the same way either way.
"""

from __future__ import annotations

from convo_memory.bootstrap.adapters import Adapters, Infrastructure, build_adapters
from convo_memory.bootstrap.services import Container, build_services

__all__ = ["Adapters", "Container", "Infrastructure", "build_adapters", "build_services"]
