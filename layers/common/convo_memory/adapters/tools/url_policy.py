"""Where a webhook tool may be called: ``https`` URLs whose host resolves only to public
addresses, unless the operator allows the host (``ToolAllowedHosts``; then plain
``http`` and any address are fine).

The check runs when a capability is created and again on every call, and a call then
connects to the very address that was checked: a host whose DNS answer changes between
the check and the call (DNS rebinding) cannot steer the call elsewhere.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

# (host, port) -> the addresses the host resolves to (IP literals as text).
Resolver = Callable[[str, int], Sequence[str]]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class ToolUrlRefused(ValueError):
    """The URL may not be called; the message says why."""


@dataclass(frozen=True)
class AllowedHost:
    """An operator-allowed ``host`` (any port) or ``host:port``."""

    host: str
    port: int | None = None

    def admits(self, host: str, port: int) -> bool:
        return self.host == host and (self.port is None or self.port == port)


@dataclass(frozen=True)
class ToolTarget:
    """A checked URL: connect to ``address`` (on ``port``), speak to ``host``."""

    scheme: str
    host: str
    port: int
    path: str
    address: str
    allowed_host: bool


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


def is_public_address(address: str) -> bool:
    """Whether ``address`` is a globally routable unicast address: never private,
    loopback, link-local (the instance metadata service), multicast, reserved,
    unspecified or shared; IPv4 embedded in IPv6 (mapped, 6to4, NAT64) is judged as the
    IPv4 address it carries, and Teredo is refused."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return is_public_address(str(ip.ipv4_mapped))
        if ip.sixtofour is not None:
            return is_public_address(str(ip.sixtofour))
        if ip.teredo is not None:
            return False
        if ip in _NAT64:
            return is_public_address(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    return bool(
        ip.is_global
        and not (
            ip.is_private
            or ip.is_loopback
            or ip.is_link_local
            or ip.is_multicast
            or ip.is_reserved
            or ip.is_unspecified
        )
    )


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver), in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


class UrlPolicy:
    """The deployment's rule for webhook URLs (implements ``ports.ToolUrlPolicy``)."""

    def __init__(
        self, allowed_hosts: Iterable[AllowedHost] = (), resolve: Resolver | None = None
    ) -> None:
        self.allowed_hosts = tuple(allowed_hosts)
        self._resolve = resolve or resolve_host

    def problem(self, url: str) -> str | None:
        """Why ``url`` may not be called, or None."""
        try:
            self.target(url)
        except ToolUrlRefused as refused:
            return str(refused)
        return None

    def target(self, url: str) -> ToolTarget:
        """Check ``url`` now and say where to connect; raises ``ToolUrlRefused``."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ToolUrlRefused("the URL is not valid") from None
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            raise ToolUrlRefused("the URL must be https with a host")
        if parts.username is not None or parts.password is not None:
            raise ToolUrlRefused("the URL must not carry credentials")
        port = port or (443 if parts.scheme == "https" else 80)
        allowed = any(entry.admits(host, port) for entry in self.allowed_hosts)
        if parts.scheme != "https" and not allowed:
            raise ToolUrlRefused(
                "tool URLs must use https (plain http only for hosts the operator allows)"
            )
        addresses = self._addresses(host, port)
        if not allowed:
            private = [a for a in addresses if not is_public_address(a)]
            if private:
                raise ToolUrlRefused(
                    f"{host} resolves to a non-public address ({private[0]}); tools must be "
                    "reachable on the public internet unless the operator allows the host"
                )
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        return ToolTarget(parts.scheme, host, port, path, addresses[0], allowed)

    def _addresses(self, host: str, port: int) -> list[str]:
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        try:
            addresses = list(self._resolve(host, port))
        except (OSError, UnicodeError):
            addresses = []
        if not addresses:
            raise ToolUrlRefused(f"the host {host} could not be resolved")
        return addresses
