"""A server on 127.0.0.1 that answers every request with its status line and then one
header line at a time, never finishing the head: what a hostile tool or model endpoint
does to hold a call open when each read only has a per-read timeout. With
``handshake=True`` it does the same to a TLS handshake: a record header announcing a
16 KiB handshake record, then one byte of it at a time.

It trickles for at most ``duration`` seconds per connection and stops (bounded: within
one ``interval``) as soon as the test ends (``stop()`` / the ``with`` block).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class HeaderTrickler:
    def __init__(
        self, interval: float = 0.5, duration: float = 40.0, *, handshake: bool = False
    ) -> None:
        self.interval = interval
        self.handshake = handshake
        self.duration = duration
        self.connections = 0
        self.pieces_sent = 0
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``: what an operator would allow."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> HeaderTrickler:
        accepting = threading.Thread(target=self._accept, daemon=True)
        accepting.start()
        self._threads.append(accepting)
        return self

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for thread in self._threads:
            thread.join(self.interval + 2)

    def __enter__(self) -> HeaderTrickler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            self.connections += 1
            serving = threading.Thread(target=self._trickle, args=(connection,), daemon=True)
            serving.start()
            self._threads.append(serving)

    def _trickle(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            with contextlib.suppress(OSError):
                connection.recv(65536)  # the request or ClientHello; not read further
                connection.sendall(
                    b"\x16\x03\x03\x40\x00" if self.handshake else b"HTTP/1.1 200 OK\r\n"
                )
                for sent in range(int(self.duration / self.interval)):
                    if self._stop.wait(self.interval):
                        return
                    connection.sendall(self._piece(sent))
                    self.pieces_sent += 1

    def _piece(self, sent: int) -> bytes:
        return b"\x02" if self.handshake else f"X-Trickle-{sent}: still coming\r\n".encode()
