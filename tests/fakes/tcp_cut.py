"""A TCP forwarder a test controls, to cut a real service's connections (PostgreSQL, Redis)
without stopping the shared server: `cut()` is an outage, `restore()` the service back."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class TcpCut:
    """A TCP forwarder on 127.0.0.1 whose `cut()` drops every live connection and refuses new
    ones (a real network outage for the client), and whose `restore()` listens again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.05)
        self.port = listener.getsockname()[1]
        self._stop = threading.Event()
        self._listener = listener
        self._spawn(self._accept_loop, listener, self._stop)

    def cut(self) -> None:
        self._stop.set()
        with self._lock:
            listener, self._listener = self._listener, None
            live, self._sockets = self._sockets, set()
        if listener is not None:
            _hard_close(listener)
        for sock in live:
            _hard_close(sock)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            self._spawn(_pump, client, upstream)
            self._spawn(_pump, upstream, client)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _hard_close(sink)


def _hard_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
