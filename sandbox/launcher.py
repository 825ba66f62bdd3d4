"""Runs INSIDE the sandbox (standard library only): rlimits, the proxy forwarder, a syscall
filter, then exec.

Usage: launcher.py [--rlimit NAME=VALUE]... [--proxy SOCKET_PATH:PORT] -- ARGV...
The forwarder relays 127.0.0.1:PORT (the sandbox's own loopback) to the egress proxy's Unix
socket; it is forked before the tool's rlimits are set and dies with the sandbox.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import selectors
import signal
import socket
import struct
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


# --- syscall filter (seccomp-bpf): defence in depth on top of the namespaces ----------------
# Denied with EPERM: debugging other processes, kernel keyrings, eBPF, userfaultfd, perf,
# mounts, namespace changes, module and kexec loading, io_uring. clone() with namespace flags
# is denied too; clone3 answers ENOSYS so the C library falls back to clone().
_DENIED = {
    "x86_64": (
        0xC000003E,
        [
            101,
            310,
            311,
            250,
            248,
            249,
            321,
            323,
            298,
            165,
            166,
            155,
            308,
            272,
            246,
            320,
            175,
            313,
            176,
            304,
            303,
            163,
            167,
            168,
            169,
            103,
            172,
            173,
            425,
            426,
            427,
        ],
        56,
        435,
    ),
    "aarch64": (
        0xC00000B7,
        [
            117,
            270,
            271,
            219,
            217,
            218,
            280,
            282,
            241,
            40,
            39,
            41,
            268,
            97,
            104,
            294,
            105,
            273,
            106,
            265,
            264,
            89,
            224,
            225,
            142,
            116,
            425,
            426,
            427,
        ],
        220,
        435,
    ),
}
_CLONE_NAMESPACES = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_ALLOW, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _filter_program(machine: str) -> bytes:
    arch, denied, clone_nr, clone3_nr = _DENIED[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    body = [_bpf(ld, 4), _bpf(jeq, arch, 1, 0), _bpf(ret, _EPERM), _bpf(ld, 0)]
    if machine == "x86_64":  # the x32 ABI reuses numbers with bit 30 set
        body += [_bpf(jge, 0x40000000, 0, 1), _bpf(ret, _EPERM)]
    for number in denied:
        body += [_bpf(jeq, number, 0, 1), _bpf(ret, _EPERM)]
    body += [_bpf(jeq, clone3_nr, 0, 1), _bpf(ret, _ENOSYS)]
    body += [_bpf(jeq, clone_nr, 0, 3), _bpf(ld, 16), _bpf(jset, _CLONE_NAMESPACES, 0, 1)]
    body += [_bpf(ret, _EPERM), _bpf(ret, _ALLOW)]
    return b"".join(body)


def _install_filter() -> None:
    machine = platform.machine()
    if machine not in _DENIED:
        return  # other architectures rely on the namespaces alone
    program = _filter_program(machine)
    buffer = ctypes.create_string_buffer(program, len(program))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    prog = _Prog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        sys.stderr.write(
            f"lantern-launcher: cannot install the syscall filter ({ctypes.get_errno()})\n"
        )
        os._exit(126)  # PR_SET_NO_NEW_PRIVS then PR_SET_SECCOMP/FILTER: fail closed


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
    _install_filter()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"lantern-launcher: cannot execute {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
