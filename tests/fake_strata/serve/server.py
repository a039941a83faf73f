"""Fake Strata backend for strata-router's tests (a test double, not Strata).

Implements the backend contract in RESEARCH.md: the real
server's CLI subset, ready file, /health, /v1/models, OpenAI chat (JSON and SSE
with keep-alive comments), the /v1/cache/lookup extension, disconnect
detection and signal handling, all scripted by the profile's `fake` object.
Python 3.9+ standard library only.
"""

import argparse
import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import frames, script

DEFAULT_BODY_LIMIT = 256 << 20  # Strata's CHUNKED_BODY_MAX; STRATA_MAX_BODY_MIB overrides
POLL_S = 0.02  # how often waits look for a client EOF, a keep-alive due, or shutdown
NOT_FOUND = {"error": {"message": "not found"}}
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
LOOKUP_PATH = "/v1/cache/lookup"


class Cancelled(Exception):
    """Generation stopped: reason is client_disconnect, write_failed or shutdown."""

    def __init__(self, reason):
        Exception.__init__(self, reason)
        self.reason = reason


class Rejected(Exception):
    """A request refused before generation: answered with an invalid_request_error."""

    def __init__(self, status, message, model=None, stream=False):
        Exception.__init__(self, message)
        self.status = status
        self.message = message
        self.model = model
        self.stream = stream


class State(object):
    """Everything the request handlers share."""

    def __init__(self, args, profile, log):
        self.args = args
        self.profile = profile
        self.name = profile.model_name
        self.log = log
        self.lock = threading.Lock()
        self.in_flight = 0
        self.handling = 0
        self.stopping = False
        self.body_limit = DEFAULT_BODY_LIMIT
        mib = os.environ.get("STRATA_MAX_BODY_MIB")
        if mib:
            try:
                self.body_limit = int(mib) << 20
            except ValueError:
                pass

    def begin(self):
        """A chat request starts generating (busy for cache lookups) and handling."""
        with self.lock:
            self.in_flight += 1
            self.handling += 1
            return self.in_flight

    def end_generation(self):
        """The last byte was written (or the request was cancelled): no longer busy."""
        with self.lock:
            self.in_flight -= 1

    def end_handling(self):
        """The request's log events are written; shutdown may exit now."""
        with self.lock:
            self.handling -= 1

    def busy(self):
        with self.lock:
            return self.in_flight > 0

    def handlers_active(self):
        with self.lock:
            return self.handling > 0

    def health_override(self):
        """What the `health_override_file` says now (its stripped text), or None."""
        path = self.profile.start["health_override_file"]
        if not path:
            return None
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return None

    def health(self):
        failure = self.profile.start["start_failure"]
        override = self.health_override()
        wrong = failure == "health_wrong_model" or override == "wrong_model"
        return {
            "status": "ok",
            "max_context": frames.MAX_CONTEXT,
            "model": self.name + "-wrong" if wrong else self.name,
            "images": False,
            "api_key": False,
            "loaded": failure != "health_not_loaded" and override != "not_loaded",
            "service": "strata",
        }

    def models(self):
        loaded = self.profile.start["start_failure"] != "health_not_loaded"
        return {
            "object": "list",
            "data": [
                {
                    "id": self.name,
                    "object": "model",
                    "status": {"value": "loaded" if loaded else "unloaded"},
                    "meta": {"n_ctx": frames.MAX_CONTEXT},
                    "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                }
            ],
        }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "strata-fake/1"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass

    def version_string(self):
        return self.server_version

    @property
    def state(self):
        return self.server.state

    # ---- low-level output -------------------------------------------------

    def send_json(self, status, obj):
        data = frames.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status, etype, message):
        self.send_json(status, frames.error_body(etype, message))

    def write_raw(self, data):
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            raise Cancelled("write_failed")
        self.last_write = time.monotonic()

    def write_frame(self, obj):
        self.write_raw(frames.data_frame(obj))
        self.frames += 1

    # ---- disconnect detection and waits -------------------------------------

    def client_gone(self, timeout):
        """Wait up to `timeout` s for the socket to become readable; True on EOF (select + MSG_PEEK)."""
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], timeout)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        try:
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        if data:  # stray bytes from the client, not EOF; do not spin on them
            time.sleep(timeout)
            return False
        return True

    def pause(self, seconds, keepalive_s=None):
        """Sleep `seconds`, watching for client EOF and shutdown; when keepalive_s is set (SSE
        headers sent), write a keep-alive comment whenever keepalive_s passed since the last write."""
        deadline = time.monotonic() + seconds
        while True:
            if self.state.stopping:
                raise Cancelled("shutdown")
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                if self.client_gone(0):
                    raise Cancelled("client_disconnect")
                return
            step = min(remaining, POLL_S)
            if keepalive_s is not None:
                due = self.last_write + keepalive_s
                if now >= due:
                    self.write_raw(frames.KEEPALIVE)
                    self.keepalives += 1
                    continue
                step = min(step, due - now)
            if self.client_gone(step):
                raise Cancelled("client_disconnect")

    # ---- request bodies -----------------------------------------------------

    def read_body(self):
        """The request body (b"" without Content-Length). Raises Rejected for a bad length or a
        body over the limit (checked before reading), Cancelled when the client leaves early."""
        limit = self.state.body_limit
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked(limit)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
            if n < 0:
                raise ValueError(length)
        except ValueError:
            raise Rejected(400, "invalid Content-Length")
        if n > limit:
            raise Rejected(413, "request body too large")
        body = self.rfile.read(n)
        if len(body) < n:
            raise Cancelled("client_disconnect")
        return body

    def read_chunked(self, limit):
        parts = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            if not line:
                raise Cancelled("client_disconnect")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise Rejected(400, "invalid chunked body")
            if size == 0:
                while True:  # trailers up to the empty line
                    trailer = self.rfile.readline(8192)
                    if trailer in (b"\r\n", b"\n", b""):
                        break
                return b"".join(parts)
            total += size
            if total > limit:
                raise Rejected(413, "request body too large")
            chunk = self.rfile.read(size)
            if len(chunk) < size:
                raise Cancelled("client_disconnect")
            parts.append(chunk)
            self.rfile.readline(1024)  # CRLF after the chunk

    # ---- routing ------------------------------------------------------------

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/api/health"):
            # A wedged HTTP side: no answer while the override file says so.
            while self.state.health_override() == "hang":
                time.sleep(POLL_S)
            status, body = 200, self.state.health()
        elif path in ("/v1/models", "/models"):
            status, body = 200, self.state.models()
        else:
            status, body = 404, NOT_FOUND
        self.state.log.event("get", path=path, status=status)
        try:
            self.send_json(status, body)
        except OSError:
            pass

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        self.frames = 0
        self.keepalives = 0
        self.last_write = time.monotonic()
        body = None
        try:
            try:
                body = self.read_body()
            except Cancelled:
                return
            if path in CHAT_PATHS:
                self.handle_chat(path, body)
            elif path == LOOKUP_PATH:
                self.handle_lookup(path, body)
            else:
                self.send_json(404, NOT_FOUND)
        except Rejected as r:
            if path in CHAT_PATHS:
                self.state.log.event(
                    "request", path=path, model=r.model, stream=r.stream,
                    body_bytes=None if body is None else len(body), fake={}, in_flight=None,
                    rejected=r.message)
                self.state.log.event("response_done", path=path, stream=r.stream,
                                     status=r.status, frames=0)
            try:
                self.send_error_json(r.status, "invalid_request_error", r.message)
            except OSError:
                pass
        except OSError:
            pass  # the client went away while we answered; never crash on a broken pipe

    # ---- chat ---------------------------------------------------------------

    def handle_chat(self, path, body):
        st = self.state
        try:
            req = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise Rejected(400, "invalid JSON body")
        if not isinstance(req, dict):
            raise Rejected(400, "request body must be a JSON object")
        requested = req.get("model")
        if not isinstance(requested, str):
            requested = None
        stream = req.get("stream") is True
        fake_override = req.get("fake")
        try:
            params = st.profile.request_params(fake_override)
        except script.ScriptError as e:
            raise Rejected(400, str(e), model=requested, stream=stream)
        model = params["response_model"] or (requested if requested == st.name else st.name)
        prompt = params["prompt_tokens"]
        if prompt is None:
            prompt = len(body) // 4
        cached = min(params["cached_tokens"], prompt)
        in_flight = st.begin()
        try:
            st.log.event("request", path=path, model=requested, stream=stream,
                         body_bytes=len(body), fake=fake_override or {}, in_flight=in_flight)
            done = cancelled = None
            try:
                self.pause(params["header_delay_ms"] / 1000.0)
                if params["error_status"] is not None:
                    status = params["error_status"]
                    message = params["error_message"] or "fake error %d" % status
                    self.send_error_json(status, frames.error_type_for(status), message)
                    done = {"status": status, "frames": 0}
                else:
                    completion = frames.Completion(model, params["fixed_ids"])
                    if stream:
                        done = self.run_stream(params, completion, prompt, cached)
                    else:
                        done = self.run_json(params, completion, prompt, cached)
            except Cancelled as c:
                cancelled = c.reason
            except OSError:
                cancelled = "write_failed"
            finally:
                st.end_generation()
            if cancelled is not None:
                st.log.event("cancel", path=path, reason=cancelled, stream=stream,
                             frames=self.frames)
            else:
                st.log.event("response_done", path=path, stream=stream, **done)
        finally:
            st.end_handling()

    def finish_reason(self, params):
        if params["finish_reason"] is not None:
            return params["finish_reason"]
        return "tool_calls" if params["tool_call"] else "stop"

    def die(self):
        self.state.log.event("exit", code=5, reason="mid_stream die")
        os._exit(5)

    def mid_stream_due(self, params, content_sent, at_end):
        return params["mid_stream"] is not None and (
            at_end or content_sent >= params["mid_stream_after"]
        )

    def run_stream(self, params, completion, prompt, cached):
        """Returns the fields of the response_done event."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Accel-Buffering", "no")
            self.send_header("Connection", "close")
            self.end_headers()
        except OSError:
            raise Cancelled("write_failed")
        self.last_write = time.monotonic()
        keepalive_s = params["keepalive_ms"] / 1000.0
        delay_s = params["token_delay_ms"] / 1000.0
        self.write_frame(completion.chunk({"role": "assistant", "content": ""}))
        generated = 0
        content_sent = 0
        for kind, value in frames.plan(params):
            if kind == "content" and self.mid_stream_due(params, content_sent, False):
                return self.stream_failure(params)
            self.pause(delay_s, keepalive_s)
            self.write_frame(completion.chunk(completion.delta_for(kind, value)))
            if kind in ("reasoning", "content"):
                generated += 1
            if kind == "content":
                content_sent += 1
        if self.mid_stream_due(params, content_sent, True):
            return self.stream_failure(params)
        extra = {"usage": frames.usage(prompt, generated, cached)}
        if params["timings"]:
            extra["timings"] = frames.timings(prompt, generated, cached, params["token_delay_ms"])
        finish = self.finish_reason(params)
        self.write_frame(completion.chunk({}, finish, **extra))
        self.write_raw(frames.DONE)
        self.frames += 1
        return {"status": 200, "frames": self.frames, "keepalives": self.keepalives,
                "finish_reason": finish, "prompt_tokens": prompt,
                "completion_tokens": generated, "cached_tokens": cached}

    def stream_failure(self, params):
        if params["mid_stream"] == "die":
            self.die()
        self.write_frame(frames.error_body("server_error", "engine died"))
        self.write_raw(frames.DONE)
        self.frames += 1
        return {"status": 200, "frames": self.frames, "keepalives": self.keepalives,
                "mid_stream": "error"}

    def run_json(self, params, completion, prompt, cached):
        """Returns the fields of the response_done event."""
        delay_s = params["token_delay_ms"] / 1000.0
        reasoning, content = [], []
        content_sent = 0
        for kind, value in frames.plan(params):
            if kind == "content" and self.mid_stream_due(params, content_sent, False):
                return self.json_failure(params)
            self.pause(delay_s)
            if kind == "reasoning":
                reasoning.append(value)
            elif kind == "content":
                content.append(value)
                content_sent += 1
        if self.mid_stream_due(params, content_sent, True):
            return self.json_failure(params)
        generated = len(reasoning) + len(content)
        text = "".join(content)
        if not text and params["tool_call"]:
            text = None
        finish = self.finish_reason(params)
        extra = {"usage": frames.usage(prompt, generated, cached)}
        if params["timings"]:
            extra["timings"] = frames.timings(prompt, generated, cached, params["token_delay_ms"])
        message = completion.message(text, "".join(reasoning), params["tool_call"])
        self.send_json(200, completion.response(message, finish, **extra))
        return {"status": 200, "frames": 0, "finish_reason": finish, "prompt_tokens": prompt,
                "completion_tokens": generated, "cached_tokens": cached}

    def json_failure(self, params):
        if params["mid_stream"] == "die":
            self.die()
        self.send_error_json(503, "server_error", "engine died")
        return {"status": 503, "frames": 0, "mid_stream": "error"}

    # ---- cache lookup extension ----------------------------------------------

    def handle_lookup(self, path, body):
        """The event is logged before the answer is sent, so it is in the log by the time
        the client has the answer."""
        status, doc, count = self.lookup(body)
        self.state.log.event("cache_lookup", status=status, count=count)
        if doc is not None:
            self.send_json(status, doc)

    def lookup(self, body):
        """Returns (status, JSON document or None when the client left, number of requests)."""
        st = self.state

        def invalid(message, count):
            return 400, frames.error_body("invalid_request_error", message), count

        if not st.profile.start["cache_lookup"]:
            return 404, NOT_FOUND, 0
        try:
            req = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return invalid("invalid JSON body", 0)
        items = req.get("requests") if isinstance(req, dict) else None
        if not isinstance(items, list):
            return invalid("requests must be a list", 0)
        results = []
        for item in items:
            if (not isinstance(item, dict) or not isinstance(item.get("id"), str)
                    or not isinstance(item.get("body"), dict)):
                return invalid("each request needs a string id and an object body", len(items))
            try:
                params = st.profile.request_params(item["body"].get("fake"))
            except script.ScriptError as e:
                return invalid(str(e), len(items))
            tokens = params["prompt_tokens"]
            if tokens is None:
                tokens = len(json.dumps(item["body"])) // 4
            results.append({"id": item["id"], "input_tokens": tokens,
                            "cached_tokens": min(params["cached_tokens"], tokens)})
        try:
            self.pause(st.profile.start["cache_lookup_delay_ms"] / 1000.0)
        except Cancelled:
            return 499, None, len(items)
        if st.busy():
            return 409, frames.error_body("model_busy", "busy"), len(items)
        reply = st.profile.start["cache_lookup_reply"]
        if reply == "malformed":
            return 200, {"min_tokens": "many", "results": "none"}, len(items)
        if reply == "missing_id":
            results = results[1:]
        return 200, {"min_tokens": st.profile.cache_min_tokens, "results": results}, len(items)


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        ThreadingHTTPServer.handle_error(self, request, client_address)


class FakeHTTPServer6(FakeHTTPServer):
    address_family = socket.AF_INET6


# ---- process lifecycle --------------------------------------------------------


# FAKE_STRATA_UPSTREAM_CLI=1: the command line of the public serve/server.py, which has no
# --ready-file: argparse then exits 2 on it (with its usage line on stderr), and --help does not
# list it. For the router's "health" readiness mode and its recognition of a stock Strata.
UPSTREAM_CLI_ENV = "FAKE_STRATA_UPSTREAM_CLI"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m serve.server",
        description="Fake Strata backend: a test double for strata-router, not Strata.",
    )
    p.add_argument("--engine", choices=("strata", "mock"), default="mock")
    p.add_argument("--config", required=True, metavar="PATH")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8095)
    p.add_argument("--idle-unload", type=float, default=None, metavar="SECONDS")
    if os.environ.get(UPSTREAM_CLI_ENV) != "1":
        p.add_argument("--ready-file", default=None, metavar="PATH")
    args = p.parse_args(argv)
    if not hasattr(args, "ready_file"):
        args.ready_file = None
    return args


def port_problem(host, port):
    """Strata's quick bind-and-close check: an error string, or None when the port is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return "port %d is already in use" % port
        return "cannot bind %s:%d: %s" % (host, port, e)
    finally:
        s.close()


def write_ready_file(path, contents):
    """Atomic: a temp file in the same directory, then rename over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ready-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(contents))
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Signals(object):
    """Signal handlers only record; the main thread acts (no locks taken in handlers)."""

    def __init__(self, ignore_sigterm):
        self.stop_signal = None
        self.ignored = 0
        self.ignore_sigterm = ignore_sigterm
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum, frame):
        if signum == signal.SIGTERM and self.ignore_sigterm:
            self.ignored += 1
        elif self.stop_signal is None:
            self.stop_signal = signal.Signals(signum).name


def finish(log, code, **fields):
    log.event("exit", code=code, **fields)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)


def main(argv=None):
    args = parse_args(argv)
    host = args.host or "127.0.0.1"
    try:
        profile = script.Profile(args.config)
    except script.ProfileError as e:
        sys.stderr.write("error: %s\n" % e)
        return e.code
    start = profile.start
    signals = Signals(start["ignore_sigterm"])  # before `start` is logged: tests key on it
    log = script.EventLog(start["log"])
    log.event(
        "start",
        argv=list(sys.argv),
        cwd=os.getcwd(),
        env_keys=sorted(os.environ),
        engine=args.engine,
        host=host,
        port=args.port,
        idle_unload=args.idle_unload,
        ready_file=args.ready_file,
        model_name=profile.model_name,
        profile=os.path.abspath(args.config),
    )
    if profile.lazy_load:
        sys.stderr.write(
            "error: profile sets lazy_load: true; the router must never launch such a profile\n"
        )
        finish(log, 2, reason="lazy_load")
    problem = port_problem(host, args.port)
    if problem:
        sys.stderr.write("error: %s\n" % problem)
        finish(log, 2, reason=problem)

    seen_ignored = [0]

    def poll_signals():
        """True once a stop signal arrived; logs ignored SIGTERMs."""
        while seen_ignored[0] < signals.ignored:
            seen_ignored[0] += 1
            log.event("signal_ignored", signal="SIGTERM")
        return signals.stop_signal is not None

    def stop_now(httpd=None, state=None):
        log.event("stop", signal=signals.stop_signal)
        if state is not None:
            state.stopping = True
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            deadline = time.monotonic() + 2.0
            while state.handlers_active() and time.monotonic() < deadline:
                time.sleep(0.01)
        finish(log, 0)

    if start["spawn_grandchild"]:
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        log.event("grandchild", child_pid=child.pid)

    # Simulated model load: the HTTP port stays closed.
    load_deadline = time.monotonic() + start["load_ms"] / 1000.0
    while time.monotonic() < load_deadline:
        if poll_signals():
            stop_now()
        time.sleep(min(0.01, max(0.0, load_deadline - time.monotonic())))

    # Like a real engine, read the whole weights file before serving (what
    # the router's prefetch can have put in the page cache).
    if start["read_weights"]:
        began = time.monotonic()
        read = 0
        try:
            with open(start["read_weights"], "rb", buffering=0) as weights:
                while True:
                    if poll_signals():
                        stop_now()
                    chunk = weights.read(8 << 20)
                    if not chunk:
                        break
                    read += len(chunk)
        except OSError as e:
            sys.stderr.write("error: cannot read the weights: %s\n" % e)
            finish(log, 1, reason="read_weights failed")
        log.event("weights_read", bytes=read, seconds=time.monotonic() - began)

    failure = start["start_failure"]
    if failure == "exit":
        sys.stderr.write("error: scripted start failure\n")
        finish(log, start["exit_code"], reason="start_failure exit")
    if failure == "hang":
        while not poll_signals():
            time.sleep(0.02)
        stop_now()

    state = State(args, profile, log)
    server_class = FakeHTTPServer6 if ":" in host else FakeHTTPServer
    try:
        httpd = server_class((host, args.port), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            message = "port %d is already in use" % args.port
        else:
            message = "cannot bind %s:%d: %s" % (host, args.port, e)
        sys.stderr.write("error: %s\n" % message)
        finish(log, 2, reason=message)
    httpd.state = state
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()

    ready = {"pid": os.getpid(), "model_name": profile.model_name, "port": args.port}
    if failure == "wrong_model_name":
        ready["model_name"] = profile.model_name + "-wrong"
    elif failure == "wrong_pid":
        ready["pid"] = os.getpid() + 1000000
    elif failure == "wrong_port":
        ready["port"] = args.port + 1
    if args.ready_file:
        write_ready_file(args.ready_file, ready)
    log.event("ready", ready_file=args.ready_file, contents=ready)
    url = "http://%s:%d" % (host, args.port)
    sys.stdout.write("ready: %s/v1  (OpenAI: %s/v1/chat/completions, context %d tokens)\n"
                     % (url, url, frames.MAX_CONTEXT))
    sys.stdout.flush()

    exit_at = time.monotonic() + 0.2 if failure == "exit_after_ready" else None
    while True:
        if poll_signals():
            stop_now(httpd, state)
        if exit_at is not None and time.monotonic() >= exit_at:
            finish(log, 4, reason="start_failure exit_after_ready")
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
