"""Command lines that build the box: bubblewrap flags, or an `unshare` + mount script.

Both give the same layout: read-only /usr (and its /bin, /lib symlinks), a few /etc files,
fresh /proc, a read-only /dev with its few device nodes, tmpfs /tmp and /work (and /dev/shm
under bwrap) each capped at SCRATCH_MB, the launcher and the egress socket read-only at
/run/lantern. Nothing else is writable.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ETC_PATHS = (
    "/etc/ld.so.cache",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/mime.types",
)
TOP_LINKS = ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32")
RUN_DIR = "/run/lantern"
SCRATCH_MB = 64  # the size of each writable tmpfs in the box
DEVICES = ("null", "zero", "random", "urandom", "full")


@dataclass(frozen=True)
class SandboxLayout:
    launcher_host: str
    python: str  # the interpreter inside the box that runs the launcher
    extra_ro: tuple[str, ...]  # host trees bound read-only at the same path
    links: tuple[tuple[str, str], ...]  # (path, target) for merged-/usr symlinks
    dirs: tuple[str, ...]  # top-level dirs bound read-only when not symlinks
    etc: tuple[str, ...]

    launcher_target = f"{RUN_DIR}/launcher.py"
    proxy_dir_target = f"{RUN_DIR}/egress"
    proxy_socket_target = f"{RUN_DIR}/egress/egress.sock"

    @classmethod
    def detect(cls, launcher: Path) -> SandboxLayout:
        links, dirs = [], []
        for path in TOP_LINKS:
            if os.path.islink(path):
                links.append((path, os.readlink(path)))
            elif os.path.isdir(path):
                dirs.append(path)
        python = "/usr/bin/python3"
        extra_ro: tuple[str, ...] = ()
        if not os.path.exists(python):
            python = getattr(sys, "_base_executable", sys.executable)
            extra_ro = (sys.base_prefix,)
        etc = tuple(p for p in ETC_PATHS if os.path.exists(p))
        return cls(str(launcher), python, extra_ro, tuple(links), tuple(dirs), etc)


def bwrap_argv(
    layout: SandboxLayout, inner: list[str], proxy_dir: str | None, scratch_mb: int
) -> list[str]:
    argv = [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--disable-userns",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for path, target in layout.links:
        argv += ["--symlink", target, path]
    for path in (*layout.dirs, *layout.extra_ro, *layout.etc):
        argv += ["--ro-bind", path, path]
    argv += [
        "--proc",
        "/proc",
        "--dev",  # a tmpfs as large as host memory: capped /dev/shm inside, then read-only
        "/dev",
        "--size",
        str(scratch_mb << 20),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        str(scratch_mb << 20),
        "--tmpfs",
        "/tmp",
        "--size",
        str(scratch_mb << 20),
        "--tmpfs",
        "/work",
        "--ro-bind",
        layout.launcher_host,
        layout.launcher_target,
    ]
    if proxy_dir is not None:  # connect() needs no writable mount; files there would be host's
        argv += ["--ro-bind", proxy_dir, layout.proxy_dir_target]
    return [*argv, "--remount-ro", "/", "--chdir", "/work", "--", *inner]


_UNSHARE_SCRIPT = r"""
set -eu
TOOL_PATH=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
R=/mnt  # FHS: always there; the new root is a tmpfs over it, in this mount namespace only
mount -t tmpfs -o size=1m,mode=755 none "$R"
mkdir -p "$R/usr" "$R/proc" "$R/dev" "$R/tmp" "$R/work" "$R/.old"
mount --rbind /usr "$R/usr"
mount -o remount,bind,ro "$R/usr"
mount -t tmpfs -o size="$1"m,mode=1777 none "$R/tmp"
mount -t tmpfs -o size="$1"m,mode=1777 none "$R/work"
shift
while [ "$1" != "--" ]; do
  kind=$1; src=$2; dst=$3; shift 3
  if [ "$kind" = link ]; then ln -s "$src" "$R$dst"; continue; fi
  if [ -d "$src" ]; then mkdir -p "$R$dst"; else mkdir -p "$(dirname "$R$dst")"; touch "$R$dst"; fi
  mount --rbind "$src" "$R$dst"
  if [ "$kind" = ro ]; then mount -o remount,bind,ro "$R$dst"; fi
done
shift
for d in null zero random urandom full; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
mount -t proc proc "$R/proc"
cd "$R"
pivot_root . .old
umount -l /.old
rmdir /.old
mount -o remount,ro,bind /
LO_UP
cd /work
PATH=$TOOL_PATH
unset OLDPWD
set +e
/usr/bin/setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
exit $?
"""
_LO_UP = (  # loopback up (SIOCSIFFLAGS: UP|LOOPBACK|RUNNING) and the box's own host name
    "import fcntl,socket,struct;fcntl.ioctl(socket.socket(),0x8914,"
    "struct.pack('16sH14x',b'lo',0x49));socket.sethostname('sandbox')"
)


def unshare_argv(
    layout: SandboxLayout, inner: list[str], proxy_dir: str | None, scratch_mb: int
) -> list[str]:
    """Fallback without bwrap: util-linux `unshare` plus a mount script run as the
    namespace's root, which drops every capability before the launcher runs. The script
    stays as the namespace's pid 1 and turns a signal death into 128+n (unshare 2.38
    cannot re-raise signals)."""
    binds: list[str] = []
    for path, target in layout.links:
        binds += ["link", target, path]
    for path in (*layout.dirs, *layout.extra_ro, *layout.etc):
        binds += ["ro", path, path]
    binds += ["ro", layout.launcher_host, layout.launcher_target]
    if proxy_dir is not None:
        binds += ["ro", proxy_dir, layout.proxy_dir_target]
    script = _UNSHARE_SCRIPT.replace("LO_UP", f'{layout.python} -I -S -c "{_LO_UP}"')
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--fork",
        "--net",
        "--ipc",
        "--uts",
        "--kill-child",
        "--",
        "/bin/sh",
        "-c",
        script,
        "sandbox",
        str(scratch_mb),
        *binds,
        "--",
        *inner,
    ]
