#!/usr/bin/env python3
"""Start PROGRAM the way systemd socket activation does, or deliberately not quite.

    launch_with_fd3.py [--fds N] [--kind tcp|udp|unix|file|none]
                       [--listen-pid self|other|garbage|empty|unset] [--no-listen]
                       [--bind HOST:PORT] [--inherit-fd FD] [--fdnames NAMES]
                       [--listen-fds TEXT]
                       -- PROGRAM ARGS...

Creates N descriptors (default 1): the first is a socket of --kind (default tcp) bound to --bind
(default 127.0.0.1:0) and listen()ing unless --no-listen; any further ones are listening TCP
sockets on 127.0.0.1:0. --kind file passes /dev/null instead of a socket, --kind none passes
nothing at fd 3 (LISTEN_FDS still says N). It prints one line `BOUND HOST:PORT` (the address of
the first socket, or `BOUND -` when it has none) to stdout, then places the descriptors at fd 3,
4, ... (inheritable), sets LISTEN_FDS=N (or --listen-fds TEXT), LISTEN_FDNAMES and LISTEN_PID
(any other variable, LISTEN_FDS_FIRST_FD included, passes through as given), and exec()s PROGRAM in
place. exec keeps the PID, so `--listen-pid self` is exactly right for PROGRAM, and there is no
intermediate process to reap or to forward signals through: the caller's child *is* PROGRAM.

LISTEN_PID: self = this (and so PROGRAM's) PID; other = the parent's PID (a live, different
process); garbage = "not-a-pid"; empty = ""; unset = not set at all.

--inherit-fd FD uses the listening socket the caller passed at descriptor FD as the first
descriptor instead of making one (how tests/socket_holder.py hands one retained listener to one
program after another, as systemd does across service restarts).

Exit status 98 (before exec) means --bind could not be bound (address in use): pick another port.
Standard library only.
"""

import argparse
import fcntl
import os
import socket
import sys

EXIT_ADDRINUSE = 98
FIRST_FD = 3


def parse_hostport(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in {text!r}") from None


def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def tcp_socket(host, port, listen):
    s = socket.socket(family_of(host), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        print(f"launch_with_fd3: cannot bind {host}:{port}: {e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_ADDRINUSE)
    if listen:
        s.listen(16)
    return s


def first_descriptor(args):
    """The object (kept alive until exec) for fd 3 and the address to print, or (None, '-')."""
    if args.inherit_fd is not None:
        s = socket.socket(fileno=args.inherit_fd)
        h, p = s.getsockname()[:2]
        return s, (f"[{h}]:{p}" if ":" in h else f"{h}:{p}")
    host, port = args.bind
    if args.kind == "tcp":
        s = tcp_socket(host, port, not args.no_listen)
        h, p = s.getsockname()[:2]
        return s, (f"[{h}]:{p}" if ":" in h else f"{h}:{p}")
    if args.kind == "udp":
        s = socket.socket(family_of(host), socket.SOCK_DGRAM)
        s.bind((host, port))
        h, p = s.getsockname()[:2]
        return s, f"{h}:{p}"
    if args.kind == "unix":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        b.close()
        return a, "-"
    if args.kind == "file":
        return open(os.devnull, "rb"), "-"
    return None, "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fds", type=int, default=1)
    ap.add_argument("--kind", choices=["tcp", "udp", "unix", "file", "none"], default="tcp")
    ap.add_argument(
        "--listen-pid", choices=["self", "other", "garbage", "empty", "unset"], default="self"
    )
    ap.add_argument("--no-listen", action="store_true")
    ap.add_argument("--bind", type=parse_hostport, default=("127.0.0.1", 0))
    ap.add_argument("--inherit-fd", type=int, default=None)
    ap.add_argument("--fdnames", default=None, help="LISTEN_FDNAMES (default: strata-proxy.socket per fd)")
    ap.add_argument("--listen-fds", default=None, help="LISTEN_FDS text (default: N)")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        ap.error("PROGRAM missing (after --)")
    if args.fds < 0:
        ap.error("--fds must be >= 0")

    objects = []  # what must stay open until exec
    if args.fds >= 1:
        first, bound = first_descriptor(args)
        objects.append(first)
        for _ in range(args.fds - 1):
            objects.append(tcp_socket("127.0.0.1", 0, True))
    else:
        bound = "-"
    print(f"BOUND {bound}", flush=True)

    # Park a copy of every descriptor at 100 or above first (an original may already sit at fd 3
    # or 4), then dup2 the copies into place; dup2 makes the placed copies inheritable. The
    # originals stay referenced (so Python never closes a number we placed) and, being
    # non-inheritable, vanish at exec. With --kind none nothing is placed at fd 3: whatever may sit
    # there now is non-inheritable and so closed by exec.
    parked = [None if o is None else fcntl.fcntl(o.fileno(), fcntl.F_DUPFD_CLOEXEC, 100) for o in objects]
    for i, fd in enumerate(parked):
        if fd is not None:
            os.dup2(fd, FIRST_FD + i, inheritable=True)
            os.close(fd)

    env = dict(os.environ)
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    env["LISTEN_FDS"] = str(args.fds) if args.listen_fds is None else args.listen_fds
    names = args.fdnames if args.fdnames is not None else ":".join(["strata-proxy.socket"] * args.fds)
    env["LISTEN_FDNAMES"] = names
    pid = {
        "self": str(os.getpid()),
        "other": str(os.getppid()),
        "garbage": "not-a-pid",
        "empty": "",
        "unset": None,
    }[args.listen_pid]
    if pid is not None:
        env["LISTEN_PID"] = pid
    os.execvpe(program[0], program, env)


if __name__ == "__main__":
    main()
