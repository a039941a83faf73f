"""Profile loading, the fake's scripting keys, the JSON-lines event log, and the
stand-in engine process.

A profile is the JSON file passed with --config. The fake reads the Strata keys
`model_name`, `lazy_load`, `idle_unload_s` and `conversation_cache_min_tokens`,
plus its own `fake` object of scripting keys (see README.md). Per-request keys may
also be given in a `fake` object inside a chat request body, overriding the profile.

`python -m serve.script --profile PROFILE ...` is the fake's engine: the child the
server starts at load, as the real server starts its native engine (see
`engine_main`). It lives in this module so that the fake's file list stays as it is.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

DEFAULT_MODEL_NAME = "qwen3.8-flash-next"
DEFAULT_CACHE_MIN_TOKENS = 1024

START_FAILURES = (
    "exit",
    "hang",
    "wrong_model_name",
    "wrong_pid",
    "wrong_port",
    "health_wrong_model",
    "health_not_loaded",
    "exit_after_ready",
)
MID_STREAM = ("error", "die")

# Start behaviour: only in the profile's `fake` object. name -> (default, kind)
PROFILE_KEYS = {
    "log": (None, "abspath"),
    "load_ms": (0, "ms"),
    "read_weights": (None, "abspath"),
    "health_override_file": (None, "abspath"),
    "start_failure": (None, START_FAILURES),
    "exit_code": (3, "exit_code"),
    "ignore_sigterm": (False, "bool"),
    "spawn_grandchild": (False, "bool"),
    "cache_lookup": (True, "bool"),
    "cache_lookup_delay_ms": (0, "ms"),
    "cache_lookup_reply": (None, ("malformed", "missing_id")),
}

# Per request: defaults from the profile's `fake`, overrides from the request's `fake`.
REQUEST_KEYS = {
    "tokens": (5, "count"),
    "reasoning_tokens": (0, "count"),
    "tool_call": (False, "bool"),
    "token_delay_ms": (0, "ms"),
    "header_delay_ms": (0, "ms"),
    "prefill_ms": (0, "ms"),
    "prompt_progress": (0, "count"),
    "error_status": (None, "status"),
    "error_message": (None, "str"),
    "mid_stream": (None, MID_STREAM),
    "mid_stream_after": (2, "count"),
    "prompt_tokens": (None, "count"),
    "cached_tokens": (0, "count"),
    "timings": (True, "bool"),
    "finish_reason": (None, "str"),
    "content_bytes": (None, "positive_count"),
    "fixed_ids": (False, "bool"),
    "response_model": (None, "str"),
}


class ScriptError(Exception):
    """A scripting key has an unknown name or a wrong value."""


class ProfileError(Exception):
    """The profile cannot be used; `code` is the process exit status."""

    def __init__(self, message, code):
        Exception.__init__(self, message)
        self.code = code


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def check_value(where, key, value, default, kind):
    """Raise ScriptError unless `value` fits `kind`. None is allowed where the default is None."""
    if value is None and default is None:
        return
    bad = None
    if kind == "bool":
        if not isinstance(value, bool):
            bad = "must be true or false"
    elif kind == "count":
        if not _is_int(value) or value < 0:
            bad = "must be an integer >= 0"
    elif kind == "positive_count":
        if not _is_int(value) or value < 1:
            bad = "must be an integer >= 1"
    elif kind == "ms":
        if not _is_number(value) or value < 0:
            bad = "must be a number of milliseconds >= 0"
    elif kind == "positive_ms":
        if not _is_number(value) or value <= 0:
            bad = "must be a number of milliseconds > 0"
    elif kind == "exit_code":
        if not _is_int(value) or not 0 <= value <= 255:
            bad = "must be an integer from 0 to 255"
    elif kind == "status":
        if not _is_int(value) or not 400 <= value <= 599:
            bad = "must be null or an HTTP status from 400 to 599"
    elif kind == "str":
        if not isinstance(value, str):
            bad = "must be null or a string"
    elif kind == "abspath":
        if not isinstance(value, str) or not os.path.isabs(value):
            bad = "must be null or an absolute path"
    elif isinstance(kind, tuple):
        if value not in kind:
            bad = "must be null or one of " + ", ".join(kind)
    else:  # pragma: no cover - table error
        raise AssertionError(kind)
    if bad:
        raise ScriptError("%s.%s %s" % (where, key, bad))


class Profile(object):
    """The parsed --config file."""

    def __init__(self, path):
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read().decode("utf-8"))
        except (OSError, ValueError) as e:
            raise ProfileError("cannot read profile %s: %s" % (path, e), 1)
        if not isinstance(data, dict):
            raise ProfileError("profile %s: not a JSON object" % path, 1)
        name = data.get("model_name", DEFAULT_MODEL_NAME)
        if not isinstance(name, str) or not name:
            raise ProfileError("profile %s: model_name must be a non-empty string" % path, 1)
        self.model_name = name
        self.path = os.path.abspath(path)
        self.lazy_load = data.get("lazy_load") is True
        # Strata's own idle unload, used when --idle-unload is not given (as float(x or 0)).
        idle = data.get("idle_unload_s") or 0
        if not _is_number(idle) or idle < 0:
            raise ProfileError("profile %s: idle_unload_s must be a number of seconds >= 0" % path, 1)
        self.idle_unload_s = float(idle)
        min_tokens = data.get("conversation_cache_min_tokens", DEFAULT_CACHE_MIN_TOKENS)
        if not _is_int(min_tokens) or min_tokens < 0:
            raise ProfileError(
                "profile %s: conversation_cache_min_tokens must be an integer >= 0" % path, 2
            )
        self.cache_min_tokens = min_tokens
        fake = data.get("fake", {})
        if fake is None:
            fake = {}
        if not isinstance(fake, dict):
            raise ProfileError("profile %s: fake must be an object" % path, 2)
        self.start = dict((k, d) for k, (d, _) in PROFILE_KEYS.items())
        self.request_defaults = dict((k, d) for k, (d, _) in REQUEST_KEYS.items())
        for key, value in fake.items():
            if key in PROFILE_KEYS:
                default, kind = PROFILE_KEYS[key]
                target = self.start
            elif key in REQUEST_KEYS:
                default, kind = REQUEST_KEYS[key]
                target = self.request_defaults
            else:
                raise ProfileError("profile %s: unknown scripting key fake.%s" % (path, key), 2)
            try:
                check_value("fake", key, value, default, kind)
            except ScriptError as e:
                raise ProfileError("profile %s: %s" % (path, e), 2)
            target[key] = value

    def request_params(self, override):
        """Profile defaults updated by a request's `fake` object; raises ScriptError."""
        params = dict(self.request_defaults)
        if override is None:
            return params
        if not isinstance(override, dict):
            raise ScriptError("fake must be an object")
        for key, value in override.items():
            if key in PROFILE_KEYS:
                raise ScriptError("fake.%s can only be set in the profile" % key)
            if key not in REQUEST_KEYS:
                raise ScriptError("unknown scripting key fake.%s" % key)
            default, kind = REQUEST_KEYS[key]
            check_value("fake", key, value, default, kind)
            params[key] = value
        return params


class EventLog(object):
    """Appends one JSON object per line; each line is one os.write on an O_APPEND fd,
    so several processes can share the file. A None path disables logging."""

    def __init__(self, path):
        self._lock = threading.RLock()  # the engine logs from a signal handler
        self._fd = None
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def event(self, name, **fields):
        if self._fd is None:
            return
        record = {"event": name, "ts": time.time(), "pid": os.getpid()}
        record.update(fields)
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            while data:
                n = os.write(self._fd, data)
                data = data[n:]


# ---- the stand-in engine ---------------------------------------------------------------------
#
# The real server keeps one native engine process resident and talks to it over its stdin and
# stdout. This stand-in does what the router can observe of one: it is a second process in the
# server's process group, it does the load (`load_ms`, `read_weights`, the start failures
# `exit` and `hang`) and then says `READY <ctx> stop` on stdout, and it ends on `QUIT`, on EOF
# of its stdin (its server is gone), or on a signal, logging `engine_exit` with how it ended.
# Generation is modelled by the server; the engine only has to be alive for it.

ENGINE_CONTEXT = 32768


def engine_main(argv=None):
    p = argparse.ArgumentParser(prog="python -m serve.script",
                                description="The fake Strata's stand-in engine (started by the server).")
    p.add_argument("--profile", required=True, help="the server's profile (identification only)")
    p.add_argument("--log", default=None)
    p.add_argument("--load-ms", type=float, default=0.0)
    p.add_argument("--read-weights", default=None)
    p.add_argument("--start-failure", choices=("exit", "hang"), default=None)
    p.add_argument("--exit-code", type=int, default=3)
    args = p.parse_args(argv)
    log = EventLog(args.log)
    server_pid = os.getppid()
    ending = threading.Lock()

    def finish(how, code, by_signal=None):
        """Logs `engine_exit` once and ends the process (by `by_signal` when given, so the
        server sees the signal as its exit status, as with a real engine)."""
        if not ending.acquire(False):
            return
        log.event("engine_exit", how=how, code=-by_signal if by_signal else code,
                  server_pid=server_pid)
        try:
            sys.stderr.flush()
        except Exception:
            pass
        if by_signal:
            signal.signal(by_signal, signal.SIG_DFL)
            os.kill(os.getpid(), by_signal)
            time.sleep(5)
        os._exit(code)

    def on_signal(signum, frame):
        finish(signal.Signals(signum).name.lower(), 0, by_signal=signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def read_commands():
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()
            if not line:
                finish("eof", 0)
                return
            if line.strip() == b"QUIT":
                finish("quit", 0)
                return
            # Anything else (the real engine's GEN, STOP, ...) is not modelled.

    threading.Thread(target=read_commands, daemon=True).start()

    # The load: the server's HTTP port stays closed until READY.
    deadline = time.monotonic() + args.load_ms / 1000.0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(0.01, left))
    if args.read_weights:
        began = time.monotonic()
        read = 0
        try:
            with open(args.read_weights, "rb", buffering=0) as weights:
                while True:
                    chunk = weights.read(8 << 20)
                    if not chunk:
                        break
                    read += len(chunk)
        except OSError as e:
            sys.stderr.write("error: cannot read the weights: %s\n" % e)
            finish("start_failure", 1)
        log.event("weights_read", bytes=read, seconds=time.monotonic() - began)
    if args.start_failure == "exit":
        sys.stderr.write("error: scripted start failure\n")
        finish("start_failure", args.exit_code)
    if args.start_failure != "hang":
        out = sys.stdout
        out.write("READY %d stop\n" % ENGINE_CONTEXT)
        out.flush()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(engine_main())
