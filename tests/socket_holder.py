#!/usr/bin/env python3
"""Hold one listening socket, the way systemd's socket unit does, and start programs on it.

    socket_holder.py --bind HOST:PORT

Binds and listens (backlog 128), prints `BOUND HOST:PORT`, then reads one JSON command per line
on stdin and answers one line each on stdout:

    {"start": ["PROGRAM", "ARG", ...], "stdout": PATH, "stderr": PATH}
        -> STARTED PID
        Starts PROGRAM through launch_with_fd3.py --inherit-fd, so it gets this socket at fd 3
        with LISTEN_PID (its own PID, exec keeps it) and LISTEN_FDS=1, like a socket-activated
        service. The holder keeps its own copy open, so connections that arrive while no
        program accepts wait in the backlog for the next one.
    {"wait": PID, "timeout": SECONDS}
        -> EXITED PID CODE   (CODE is negative for a signal)   or   TIMEOUT PID
    {"kill": PID, "signal": N}
        -> KILLED PID

At end of input (or SIGTERM) every child still running is SIGKILLed and reaped, then the holder
exits. Standard library only.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_with_fd3.py")


def parse_hostport(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bind", type=parse_hostport, required=True)
    args = ap.parse_args()
    host, port = args.bind
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as e:
        print(f"socket_holder: cannot bind {host}:{port}: {e}", file=sys.stderr, flush=True)
        sys.exit(98)
    listener.listen(128)
    h, p = listener.getsockname()[:2]
    print(f"BOUND {h}:{p}", flush=True)
    children = {}

    def stop(*_):
        for child in children.values():
            if child.poll() is None:
                child.kill()
        for child in children.values():
            child.wait()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    fd = listener.fileno()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        command = json.loads(line)
        if "start" in command:
            with open(command["stdout"], "ab") as out, open(command["stderr"], "ab") as err:
                child = subprocess.Popen(
                    [sys.executable, LAUNCHER, "--inherit-fd", str(fd), "--"] + command["start"],
                    pass_fds=(fd,),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                )
            children[child.pid] = child
            print(f"STARTED {child.pid}", flush=True)
        elif "wait" in command:
            child = children[command["wait"]]
            try:
                code = child.wait(timeout=command.get("timeout", 20))
                print(f"EXITED {child.pid} {code}", flush=True)
            except subprocess.TimeoutExpired:
                print(f"TIMEOUT {child.pid}", flush=True)
        elif "kill" in command:
            os.kill(command["kill"], command.get("signal", signal.SIGKILL))
            print(f"KILLED {command['kill']}", flush=True)
    stop()


if __name__ == "__main__":
    main()
