"""Where a webhook tool may be called: ``https`` URLs whose host resolves only to public
addresses, unless the operator allows the host (``ToolAllowedHosts``; then plain
``http`` and any address are fine).

The check runs when a capability is created and again on every call, and a call then
connects to the very address that was checked: a host whose DNS answer changes between
the check and the call (DNS rebinding) cannot steer the call elsewhere.

A refusal never says what a name resolved to, and a name that does not resolve (or not
in time) is refused in the same words as one that resolves to a private address: the
policy is no DNS oracle for the network behind the service.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from convo_memory.adapters.deadline_http import Deadline, resolve, system_resolve
from convo_memory.domain.allowed_hosts import AllowedHost, parse_allowed_hosts

__all__ = [
    "NOT_ALLOWED",
    "AllowedHost",
    "ToolTarget",
    "ToolUrlRefused",
    "UrlPolicy",
    "parse_allowed_hosts",
]

# (host, port) -> the addresses the host resolves to (IP literals as text).
Resolver = Callable[[str, int], Sequence[str]]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# How long a check made outside a call (a capability's creation) waits for the resolver.
RESOLVE_SECONDS = 5.0
NOT_ALLOWED = (
    "this host is not allowed: tool URLs must resolve only to public internet addresses "
    "unless the operator allows the host"
)


class ToolUrlRefused(ValueError):
    """The URL may not be called; the message says why."""


@dataclass(frozen=True)
class ToolTarget:
    """A checked URL: connect to ``address`` (on ``port``), speak to ``host``."""

    scheme: str
    host: str
    port: int
    path: str
    address: str
    allowed_host: bool


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


class UrlPolicy:
    """The deployment's rule for webhook URLs (implements ``ports.ToolUrlPolicy``)."""

    def __init__(
        self, allowed_hosts: Iterable[AllowedHost] = (), resolve: Resolver | None = None
    ) -> None:
        self.allowed_hosts = tuple(allowed_hosts)
        self._resolve = resolve or system_resolve

    def problem(self, url: str) -> str | None:
        """Why ``url`` may not be called, or None."""
        try:
            self.target(url)
        except ToolUrlRefused as refused:
            return str(refused)
        return None

    def target(self, url: str, deadline: Deadline | None = None) -> ToolTarget:
        """Check ``url`` now and say where to connect; raises ``ToolUrlRefused``.

        With a call's ``deadline``, resolving the host that takes past it raises
        ``TimeoutError``; without one (a creation check) a slow resolver is given
        ``RESOLVE_SECONDS`` and then counts as a name that does not resolve."""
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
        addresses = self._addresses(host, port, deadline)
        if not allowed and (not addresses or not all(map(is_public_address, addresses))):
            raise ToolUrlRefused(NOT_ALLOWED)
        if not addresses:  # an allowed host: the operator's own name, no oracle to fear
            raise ToolUrlRefused("the allowed host could not be resolved")
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        return ToolTarget(parts.scheme, host, port, path, addresses[0], allowed)

    def _addresses(self, host: str, port: int, deadline: Deadline | None) -> list[str]:
        """The host's addresses; none when it does not resolve."""
        try:
            return resolve(host, port, deadline or Deadline(RESOLVE_SECONDS), self._resolve)
        except TimeoutError:
            if deadline is not None:
                raise  # the call's own time ran out: a timeout, not a refusal
            return []
        except (OSError, UnicodeError):
            return []
