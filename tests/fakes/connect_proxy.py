"""A small HTTP proxy on 127.0.0.1 (free port), as an operator's egress proxy would be:
``CONNECT host:port`` opens a tunnel (bytes pumped both ways), and a request naming a
whole ``http://`` URL is forwarded. Host names are looked up in ``hosts`` (the test's
own names, e.g. ``model.test`` -> ``127.0.0.1``), so the client never resolves them.

It records each request's line and headers (``seen``). ``refuse`` answers every request
with that status instead (``407`` asks for credentials); ``stall`` reads the request and
then says nothing until the test ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class ProxiedRequest:
    line: str
    headers: dict[str, str]


@dataclass
class ConnectProxy:
    hosts: dict[str, str] = field(default_factory=dict)
    refuse: int | None = None
    stall: bool = False
    seen: list[ProxiedRequest] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _listener: socket.socket | None = None

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def url(self, credentials: str = "") -> str:
        """The proxy's URL, as ``HTTPS_PROXY`` names it (``user:password@`` optional)."""
        return f"http://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    def __enter__(self) -> ConnectProxy:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self._listener.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, contextlib.suppress(OSError):
            client.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                piece = client.recv(65536)
                if not piece:
                    return
                head += piece
            raw, _, rest = head.partition(b"\r\n\r\n")
            line, *header_lines = raw.decode("latin-1").split("\r\n")
            headers = dict(h.split(": ", 1) for h in header_lines if ": " in h)
            self.seen.append(ProxiedRequest(line, headers))
            if self.stall:
                self._stop.wait()
                return
            if self.refuse is not None:
                client.sendall(
                    f"HTTP/1.1 {self.refuse} Refused\r\nContent-Length: 0\r\n\r\n".encode()
                )
                return
            method, target, _ = line.split(" ", 2)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = self._open(host, int(port))
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:  # a whole URL: forward the request as it came, to its host
                authority = target.split("/")[2]
                host, _, port = authority.rpartition(":")
                upstream = self._open(host, int(port or 80))
                path = "/" + target.split("/", 3)[3]
                upstream.sendall(
                    f"{method} {path} HTTP/1.1\r\n".encode()
                    + raw.split(b"\r\n", 1)[1]
                    + b"\r\n\r\n"
                    + rest
                )
            with upstream:
                self._pump(client, upstream)

    def _open(self, host: str, port: int) -> socket.socket:
        return socket.create_connection((self.hosts.get(host, host), port), timeout=10)

    def _pump(self, one: socket.socket, other: socket.socket) -> None:
        def copy(source: socket.socket, target: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    target.sendall(data)
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=copy, args=(other, one), daemon=True)
        back.start()
        copy(one, other)
        back.join(10)
