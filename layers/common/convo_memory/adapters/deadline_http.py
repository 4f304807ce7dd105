"""HTTP/1.1 exchanges that end by one deadline, whatever the server does.

``http.client`` (and urllib) give a socket one timeout per operation, so a server that
sends its status line and then a header byte every few seconds never trips it, and a
call lasts as long as the server likes. Here one ``Deadline`` bounds the whole exchange:
name resolution (the system resolver takes no timeout, so it runs in a worker thread
that is waited for only until the deadline), connect, the TLS handshake, sending, and
every read of the status line, the headers and the body each get only the time left,
and ``TimeoutError`` is raised once none is left.

Standard library only; shared by the webhook tools and the OpenAI-compatible provider.
One request per connection (never reused), no redirect handling: callers get the status
and decide. A ``Proxy`` (``proxy_for``: the operator's ``HTTPS_PROXY``, ``HTTP_PROXY``
and ``NO_PROXY``) is reached within the same deadline: an https endpoint through a
``CONNECT`` tunnel (the certificate still verified for the endpoint's host), an http one
by sending the request to the proxy. The webhook tools never use one: their URL policy
checks the address they connect to.
"""

from __future__ import annotations

import base64
import http.client
import io
import ipaddress
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

# The standard library's reading of NO_PROXY (undocumented, so not in the stubs).
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]

T = TypeVar("T")

_READ_CHUNK_BYTES = 64 * 1024


class Deadline:
    """When an exchange must be over (``time.monotonic`` seconds), and optionally how long
    any one operation may wait (``idle``): a stream may run long but never go quiet."""

    def __init__(
        self,
        seconds: float,
        *,
        idle: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.ends = clock() + seconds
        self.idle = idle

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.ends - self._clock()

    def postpone(self, seconds: float, *, idle: float | None = None) -> None:
        """Move the deadline ``seconds`` later and set ``idle`` (a stream's body, read
        by the turn's deadline, after its head was read by the provider's timeout)."""
        self.ends += seconds
        self.idle = idle

    def timeout(self) -> float:
        """How long the next operation may wait; ``TimeoutError`` when no time is left."""
        left = self.left()
        if left <= 0:
            raise TimeoutError("the deadline has passed")
        return left if self.idle is None else min(left, self.idle)


class ResponseBodyTooLarge(Exception):
    """A response body is larger than the caller's limit."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: where it listens, and its ``Proxy-Authorization`` (from the
    proxy URL's user and password, never logged)."""

    host: str
    port: int
    authorization: str | None = None

    def __repr__(self) -> str:  # never show the credentials
        return f"Proxy({self.host!r}, {self.port})"


def proxy_for(url: str) -> Proxy | None:
    """The proxy the environment names for ``url``: ``HTTPS_PROXY`` for an https URL,
    ``HTTP_PROXY`` for an http one (either case), unless ``NO_PROXY`` lists its host; a
    loopback host never goes through one. Only ``http://`` proxies (``ValueError`` for
    another scheme, which the operator must fix)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies_environment()
    chosen = proxies.get(parts.scheme)
    if not chosen or _loopback(host) or proxy_bypass_environment(host, proxies):
        return None
    proxy = urllib.parse.urlsplit(chosen if "://" in chosen else f"http://{chosen}")
    if proxy.scheme != "http" or not proxy.hostname:
        raise ValueError(f"{parts.scheme}_proxy must be an http:// proxy URL")
    authorization = None
    if proxy.username is not None:
        user = urllib.parse.unquote(proxy.username)
        password = urllib.parse.unquote(proxy.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}"
    return Proxy(proxy.hostname, proxy.port or 80, authorization)


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def within(deadline: Deadline, work: Callable[[], T], what: str = "the call") -> T:
    """``work()``, waited for until the deadline: for a blocking call that takes no
    timeout. It runs in a daemon thread, which is left to finish on its own when the
    deadline passes first (``TimeoutError``); its exception is raised here."""
    wait = deadline.timeout()
    outcome: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # handed to the waiting thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="deadline-worker", daemon=True).start()
    if not done.wait(wait):
        raise TimeoutError(f"{what} took longer than the deadline allowed")
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result


def system_resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver, no time bound), in order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


def resolve(
    host: str,
    port: int,
    deadline: Deadline,
    resolver: Callable[[str, int], Sequence[str]] | None = None,
) -> list[str]:
    """The addresses of ``host`` (an IP literal as it is), resolved within the deadline
    (by ``resolver``, else the system's)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    lookup = resolver or system_resolve
    return list(within(deadline, lambda: lookup(host, port), "name resolution"))


def connect(addresses: Sequence[str], port: int, deadline: Deadline) -> socket.socket:
    """A TCP connection to the first of ``addresses`` (IP literals) that accepts, each
    attempt within the time left."""
    failure: OSError = OSError("no address to connect to")
    for address in addresses:
        timeout = deadline.timeout()
        try:
            # Numeric only: never a second, unbounded, name lookup.
            family, kind, proto, _, sockaddr = socket.getaddrinfo(
                address, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )[0]
        except (OSError, UnicodeError) as exc:
            failure = OSError(f"not an IP address: {type(exc).__name__}")
            continue
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        return sock
    raise failure


class _DeadlineSocket:
    """The socket ``http.client`` sees: every send and read waits only for the time left.

    Closed like a real socket with a file open on it: the connection closes it when it
    hands a response over, and the socket itself goes when the response is closed too.
    """

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._deadline = deadline
        self._open_readers = 0
        self._closed = False

    def sendall(self, data: bytes) -> None:
        # One bound for the whole send (SSLSocket.sendall would reset it per write).
        with memoryview(data) as view, view.cast("B") as remaining:
            while remaining:
                self._sock.settimeout(self._deadline.timeout())
                sent = self._sock.send(remaining)
                remaining = remaining[sent:]

    def recv_into(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.timeout())
        return self._sock.recv_into(buffer)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError("only binary reads are supported")
        self._open_readers += 1
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        self._closed = True
        self._release()

    def reader_closed(self) -> None:
        self._open_readers -= 1
        self._release()

    def _release(self) -> None:
        if self._closed and self._open_readers <= 0:
            self._sock.close()


class _DeadlineReader(io.RawIOBase):
    def __init__(self, owner: _DeadlineSocket) -> None:
        super().__init__()
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._owner.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._owner.reader_closed()
        super().close()


class DeadlineConnection(http.client.HTTPConnection):
    """One HTTP(S) connection whose every step ends by ``deadline``. With ``addresses``
    it connects only to those (the ones a URL policy checked); else it resolves the host
    within the deadline. With ``tls`` the connection is HTTPS (the certificate is
    verified for ``host``, not for the address)."""

    def __init__(
        self,
        host: str,
        port: int,
        deadline: Deadline,
        *,
        addresses: Sequence[str] | None = None,
        tls: ssl.SSLContext | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        super().__init__(host, port)
        self.deadline = deadline
        self._addresses = list(addresses) if addresses else None
        self._tls = tls
        self._proxy = proxy
        self.default_port = 443 if tls is not None else 80  # for the Host header

    def connect(self) -> None:
        proxy = self._proxy
        if proxy is not None:
            found = resolve(proxy.host, proxy.port, self.deadline)
            sock = connect(found, proxy.port, self.deadline)
        else:
            addresses = self._addresses or resolve(self.host, self.port, self.deadline)
            sock = connect(addresses, self.port, self.deadline)
        try:
            if proxy is not None and self._tls is not None:
                _open_tunnel(_DeadlineSocket(sock, self.deadline), self.host, self.port, proxy)
            if self._tls is not None:
                # The handshake is one operation: its timeout bounds all of it.
                sock.settimeout(self.deadline.timeout())
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = _DeadlineSocket(sock, self.deadline)


def _open_tunnel(sock: _DeadlineSocket, host: str, port: int, proxy: Proxy) -> None:
    """``CONNECT host:port`` through ``proxy`` on ``sock``, its answer read by the
    deadline; ``OSError`` unless the proxy opens the tunnel (2xx)."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
    # Nothing follows the proxy's answer until the client speaks: no read runs ahead.
    answer = http.client.HTTPResponse(sock, method="CONNECT")  # type: ignore[arg-type]
    try:
        answer.begin()
    finally:
        answer.close()
    if not 200 <= answer.status < 300:
        raise OSError(f"the proxy did not open a tunnel (HTTP {answer.status})")


class Exchange:
    """A request sent and its response's head read; the body is read from here. Closing
    it (or leaving its ``with`` block) closes the connection."""

    def __init__(self, connection: DeadlineConnection, response: http.client.HTTPResponse):
        self.connection = connection
        self.response = response
        self.status = response.status

    def read1(self, size: int = _READ_CHUNK_BYTES) -> bytes:
        return self.response.read1(size)

    def readline(self, limit: int = -1) -> bytes:
        return self.response.readline(limit)

    def read_up_to(self, limit: int) -> bytes:
        """The whole body; ``ResponseBodyTooLarge`` as soon as it is over ``limit`` bytes."""
        chunks: list[bytes] = []
        size = 0
        while chunk := self.response.read1(_READ_CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                raise ResponseBodyTooLarge()
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        try:
            self.response.close()
        finally:
            self.connection.close()

    def __enter__(self) -> Exchange:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def send(
    method: str,
    host: str,
    port: int,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    deadline: Deadline,
    *,
    addresses: Sequence[str] | None = None,
    tls: ssl.SSLContext | None = None,
    proxy: Proxy | None = None,
) -> Exchange:
    """Send one request and read its response's head, all within ``deadline`` (through
    ``proxy`` when given).

    Raises ``TimeoutError`` when the deadline passes, else ``OSError`` or
    ``http.client.HTTPException`` for what went wrong on the way."""
    connection = DeadlineConnection(host, port, deadline, addresses=addresses, tls=tls, proxy=proxy)
    headers = {**headers, "Connection": "close"}
    if proxy is not None and tls is None:
        # Plain http goes to the proxy itself: the request names the whole URL.
        path = f"http://{host}:{port}{path}"
        if proxy.authorization:
            headers["Proxy-Authorization"] = proxy.authorization
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
    except BaseException:
        connection.close()
        raise
    return Exchange(connection, response)
