"""Runs INSIDE the sandbox (standard library only): rlimits, the proxy forwarder, then exec.

Usage: launcher.py [--rlimit NAME=VALUE]... [--proxy SOCKET_PATH:PORT] -- ARGV...
The forwarder relays 127.0.0.1:PORT (the sandbox's own loopback) to the egress proxy's Unix
socket; it is forked before the tool's rlimits are set and dies with the sandbox.
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import socket
import sys


def _relay_forever(listener: socket.socket, socket_path: str) -> None:
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    peers: dict[socket.socket, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                client, _ = listener.accept()
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    upstream.connect(socket_path)
                except OSError:
                    client.close()
                    upstream.close()
                    continue
                peers[client], peers[upstream] = upstream, client
                selector.register(client, selectors.EVENT_READ, None)
                selector.register(upstream, selectors.EVENT_READ, None)
                continue
            _pump(sock, peers, selector)


def _pump(sock: socket.socket, peers: dict, selector: selectors.BaseSelector) -> None:
    peer = peers[sock]
    try:
        data = sock.recv(65536)
        if data:
            peer.sendall(data)
            return
        peer.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    selector.unregister(sock)
    del peers[sock]
    if peer not in peers:
        sock.close()
        peer.close()


def _start_forwarder(spec: str) -> None:
    socket_path, _, port = spec.rpartition(":")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(64)
    if os.fork() == 0:
        os.setsid()
        try:
            _relay_forever(listener, socket_path)
        finally:
            os._exit(0)
    listener.close()


def main(args: list[str]) -> None:
    split = args.index("--")
    options, argv = args[:split], args[split + 1 :]
    limits = []
    for flag, value in zip(options[::2], options[1::2], strict=True):
        if flag == "--proxy":
            _start_forwarder(value)
        elif flag == "--rlimit":
            name, _, number = value.partition("=")
            # CPU: SIGXCPU at the soft limit (reported as such), SIGKILL one second later.
            hard = int(number) + 1 if name == "RLIMIT_CPU" else int(number)
            limits.append((getattr(resource, name), int(number), hard))
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))
    for ignored_by_python in (signal.SIGPIPE, signal.SIGXFSZ):  # exec keeps SIG_IGN: undo it
        signal.signal(ignored_by_python, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"lantern-launcher: cannot execute {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
