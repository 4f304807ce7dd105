"""The hosts an operator allows webhook tools to use whatever their address and scheme
(``ToolAllowedHosts``): parsed once at start-up, so a malformed entry fails the start."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class AllowedHost:
    """An operator-allowed ``host`` (any port) or ``host:port``."""

    host: str
    port: int | None = None

    def admits(self, host: str, port: int) -> bool:
        return self.host == host and (self.port is None or self.port == port)


def parse_allowed_hosts(entries: Iterable[str]) -> tuple[AllowedHost, ...]:
    """``host`` or ``host:port`` entries (``[v6]`` or ``[v6]:port`` for IPv6); blanks
    are skipped. Raises ``ValueError`` naming a malformed entry."""
    hosts: list[AllowedHost] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        try:
            parts = urlsplit(f"//{entry}")
            port = parts.port
        except ValueError:
            raise ValueError(f"{entry!r} is not host or host:port") from None
        host = parts.hostname
        if (
            not host
            or parts.path
            or parts.query
            or parts.username is not None
            or any(c.isspace() for c in entry)
        ):
            raise ValueError(f"{entry!r} is not host or host:port")
        hosts.append(AllowedHost(host.lower(), port))
    return tuple(hosts)
