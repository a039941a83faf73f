"""Fake Strata backend for strata-router's tests (a test double, not Strata).

Implements the backend contract in RESEARCH.md: the real server's CLI subset, ready
file, /health, /v1/models, OpenAI chat (JSON and SSE), the /v1/cache/lookup extension,
disconnect detection and signal handling, all scripted by the profile's `fake`
object. Like the real server it keeps one engine process (the stand-in in
serve/script.py) in its process group, runs one generation at a time through it, and
tells it QUIT on a clean stop. Python 3.9+ standard library only.
"""

import argparse
import collections
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
import traceback
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import frames, script

POLL_S = 0.02  # how often waits look for a client EOF, the engine's end, or shutdown
# The real server's heartbeat: a `: keep-alive` comment after this long without a line from
# the engine (a T or PP line) while a stream is generating.
ENGINE_HEARTBEAT_S = 10.0
# The real server gives its engine this long after QUIT, then after SIGTERM, then SIGKILLs it.
ENGINE_QUIT_WAIT_S = 20.0
NOT_FOUND = {"error": {"message": "not found"}}
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
LOOKUP_PATH = "/v1/cache/lookup"
# What Strata's chat template raises for a request without messages (an empty or absent body,
# which is what a chunked request body becomes: Strata reads Content-Length bytes only).
NO_MESSAGES = "No messages provided."
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


class EngineDied(Exception):
    """The engine process ended under a request (Strata's message, as it words it)."""

    def __init__(self, code):
        Exception.__init__(self, "the engine stopped unexpectedly (exit code %s)" % code)
        self.code = code

    def client_message(self):
        return "%s; the next request restarts it" % self


# ---- the engine ------------------------------------------------------------------------------


class EngineProcess(object):
    """One run of the stand-in engine: its pipes, READY, and its end."""

    def __init__(self, proc, owner):
        self.proc = proc
        self.pid = proc.pid
        self.owner = owner
        self.ready = threading.Event()
        self.ended = threading.Event()
        self.quit_sent = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        """Reads the engine's stdout: READY, then nothing until EOF (its end)."""
        try:
            for line in self.proc.stdout:
                if line.startswith(b"READY"):
                    fields = line.split()
                    try:
                        self.owner.ctx = int(fields[1])
                    except (IndexError, ValueError):
                        pass
                    self.ready.set()
        except (OSError, ValueError):
            pass
        self.ended.set()
        code = self.proc.wait()
        if self.ready.is_set() and not self.quit_sent:
            self.owner.log.event("engine_died", engine_pid=self.pid, code=code)

    def alive(self):
        return self.ready.is_set() and not self.ended.is_set()

    def exit_code(self):
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def quit(self):
        """QUIT, then SIGTERM, then SIGKILL, each given ENGINE_QUIT_WAIT_S (the real
        server's close())."""
        self.quit_sent = True
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"QUIT\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=ENGINE_QUIT_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=ENGINE_QUIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.ended.wait(2.0)


class Engine(object):
    """The server's engine slot: started at load, again by the next request after it died or
    was unloaded, QUIT on a clean stop and on an idle unload."""

    def __init__(self, profile, log):
        self.profile = profile
        self.log = log
        self.lock = threading.Lock()
        self.current = None
        self.ctx = 0  # max_context: 0 while (re)starting, the last READY's otherwise
        self.unloaded = False
        self.starts = 0

    def argv(self):
        start = self.profile.start
        argv = [sys.executable, "-m", "serve.script", "--profile", self.profile.path,
                "--load-ms", repr(float(start["load_ms"]))]
        if start["log"]:
            argv += ["--log", start["log"]]
        if start["read_weights"]:
            argv += ["--read-weights", start["read_weights"]]
        if start["start_failure"] in ("exit", "hang"):
            argv += ["--start-failure", start["start_failure"],
                     "--exit-code", str(start["exit_code"])]
        return argv

    def start(self):
        """Spawns the engine (same process group, stdin/stdout pipes, stderr inherited)."""
        with self.lock:
            self.ctx = 0
            self.unloaded = False
            proc = subprocess.Popen(self.argv(), cwd=PACKAGE_ROOT, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, close_fds=True)
            self.current = EngineProcess(proc, self)
            restart = self.starts > 0
            self.starts += 1
        self.log.event("engine_start", engine_pid=proc.pid, restart=restart)
        return self.current

    def alive(self):
        current = self.current
        return current is not None and current.alive()

    def close(self):
        """QUIT the engine and wait for it (no-op when none runs)."""
        with self.lock:
            current = self.current
        if current is not None:
            current.quit()

    def unload(self):
        self.close()
        self.unloaded = True


class Fifo(object):
    """The engine's one generation at a time, in arrival order (the real server's FIFO)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.waiting = collections.deque()
        self.held = False

    def try_acquire(self):
        with self.cond:
            if self.held or self.waiting:
                return False
            self.held = True
            return True

    def enter(self):
        ticket = object()
        with self.cond:
            self.waiting.append(ticket)
        return ticket

    def wait(self, ticket, timeout):
        """True once `ticket` holds the engine; False after `timeout`."""
        with self.cond:
            if not (not self.held and self.waiting[0] is ticket):
                self.cond.wait(timeout)
            if not self.held and self.waiting[0] is ticket:
                self.waiting.popleft()
                self.held = True
                return True
            return False

    def leave(self, ticket):
        with self.cond:
            self.waiting.remove(ticket)
            self.cond.notify_all()

    def release(self):
        with self.cond:
            self.held = False
            self.cond.notify_all()

    def busy(self):
        with self.cond:
            return self.held or bool(self.waiting)


class State(object):
    """Everything the request handlers share."""

    def __init__(self, args, profile, log, engine):
        self.args = args
        self.profile = profile
        self.name = profile.model_name
        self.log = log
        self.engine = engine
        self.fifo = Fifo()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.handling = 0
        self.turns = 0  # how many times a request got the engine
        self.stopping = False
        self.started_at = time.time()
        self.last_request_at = None
        if args.idle_unload is not None:
            self.idle_unload_s = float(args.idle_unload)
        else:
            self.idle_unload_s = profile.idle_unload_s

    def begin(self):
        """A chat request arrived (busy for cache lookups until the engine is done with it)."""
        with self.lock:
            self.in_flight += 1
            self.handling += 1
            self.last_request_at = time.time()
            return self.in_flight

    def end_generation(self):
        """The engine is done with a request (or it was cancelled): no longer busy for it."""
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

    def loaded(self, override=None):
        return (self.engine.alive()
                and self.profile.start["start_failure"] != "health_not_loaded"
                and override != "not_loaded")

    def health(self):
        failure = self.profile.start["start_failure"]
        override = self.health_override()
        wrong = failure == "health_wrong_model" or override == "wrong_model"
        return {
            "status": "ok",
            "max_context": self.engine.ctx,
            "model": self.name + "-wrong" if wrong else self.name,
            "images": False,
            "api_key": False,
            "loaded": self.loaded(override),
            "service": "strata",
        }

    def models(self):
        """Listed while loaded; after an unload (or with an idle unload set) listed as
        `unloaded`; with a dead engine not listed at all."""
        model = {
            "id": self.name,
            "object": "model",
            "status": {"value": "loaded"},
            "meta": {"n_ctx": self.engine.ctx},
            "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
        }
        loaded = self.loaded(self.health_override())
        if not loaded and (self.idle_unload_s or self.engine.unloaded):
            model["status"] = {"value": "unloaded"}
            loaded = True
        return {"object": "list", "data": [model] if loaded else []}

    def try_idle_unload(self):
        """The real server's idle unload: only when no request runs or waits and none came
        for idle_unload_s."""
        if not self.fifo.try_acquire():
            return
        try:
            if self.stopping or not self.engine.alive():
                return
            if time.time() - (self.last_request_at or self.started_at) < self.idle_unload_s:
                return
            pid = self.engine.current.pid
            self.engine.unload()
            self.log.event("idle_unload", engine_pid=pid, idle_unload_s=self.idle_unload_s)
        finally:
            self.fifo.release()

    def idle_unload_loop(self):
        while not self.stopping:
            time.sleep(max(1.0, min(30.0, self.idle_unload_s / 4)))
            self.try_idle_unload()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the connection closes after every response

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass

    @property
    def state(self):
        return self.server.state

    # ---- low-level output -------------------------------------------------

    def send_json(self, status, obj):
        data = frames.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
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

    def write_frame(self, obj):
        self.write_raw(frames.data_frame(obj))
        self.frames += 1

    def write_comment(self):
        self.write_raw(frames.KEEPALIVE)
        self.keepalives += 1

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

    def pause(self, seconds):
        """Sleep `seconds` outside the engine (header delay, lookup delay), watching for client
        EOF and shutdown."""
        deadline = time.monotonic() + seconds
        while True:
            if self.state.stopping:
                raise Cancelled("shutdown")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if self.client_gone(0):
                    raise Cancelled("client_disconnect")
                return
            if self.client_gone(min(remaining, POLL_S)):
                raise Cancelled("client_disconnect")

    def engine_pause(self, seconds, proc, stream):
        """`seconds` of engine time in a generation: watches the client and the engine's end;
        a stream gets a `: keep-alive` comment after each ENGINE_HEARTBEAT_S without an
        engine line."""
        deadline = time.monotonic() + seconds
        while True:
            if proc.ended.is_set():
                raise EngineDied(proc.exit_code())
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                if self.client_gone(0):
                    raise Cancelled("client_disconnect")
                return
            step = min(remaining, POLL_S)
            if stream:
                due = self.engine_heard + ENGINE_HEARTBEAT_S
                if now >= due:
                    self.write_comment()
                    self.engine_heard = now
                    continue
                step = min(step, due - now)
            if self.client_gone(step):
                raise Cancelled("client_disconnect")

    def heard_engine(self):
        self.engine_heard = time.monotonic()

    # ---- the engine ---------------------------------------------------------

    def take_engine(self):
        """Waits (writing nothing) until this request holds the engine; a dead or unloaded
        engine is started again first, as in Strata. Returns the engine process."""
        st = self.state
        began = time.monotonic()
        ticket = st.fifo.enter()
        try:
            while not st.fifo.wait(ticket, POLL_S):
                if st.stopping:
                    raise Cancelled("shutdown")
                if self.client_gone(0):
                    raise Cancelled("client_disconnect")
        except BaseException:
            st.fifo.leave(ticket)
            raise
        self.holding = True
        self.engine_wait_ms = round((time.monotonic() - began) * 1000.0, 3)
        with st.lock:
            st.turns += 1
            self.engine_turn = st.turns
        return self.ensure_engine()

    def ensure_engine(self):
        """Called holding the engine: the running engine, or a new one once it said READY."""
        st = self.state
        if st.engine.alive():
            return st.engine.current
        if st.stopping:
            raise Cancelled("shutdown")
        proc = st.engine.start()
        while not proc.ready.wait(POLL_S):
            if proc.ended.is_set():
                raise Cancelled("shutdown" if st.stopping else "engine_start_failed")
            if st.stopping:
                raise Cancelled("shutdown")
        return proc

    def release_engine(self):
        if self.holding:
            self.holding = False
            self.state.last_request_at = time.time()
            self.state.fifo.release()
        self.generation_over()

    def generation_over(self):
        """The engine is done with this request: cache lookups stop answering busy for it.
        Called at the engine's release, before the last bytes are written, so a client that
        has the whole answer never finds the backend still busy with it (as with Strata,
        whose engine is idle once its `done` line is read)."""
        if self.generating:
            self.generating = False
            self.state.end_generation()

    # ---- request bodies -----------------------------------------------------

    def read_body(self):
        """The request body: Content-Length bytes, else nothing at all (Strata reads no
        chunked body). Raises Rejected for a bad length, Cancelled when the client leaves
        early."""
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
            if n < 0:
                raise ValueError(length)
        except ValueError:
            raise Rejected(400, "invalid Content-Length")
        body = self.rfile.read(n)
        if len(body) < n:
            raise Cancelled("client_disconnect")
        return body

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
        self.holding = False
        self.generating = False
        self.engine_wait_ms = None
        self.engine_turn = None
        self.engine_heard = time.monotonic()
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

    def parse_chat(self, body):
        """(request object, requested model, stream, params); raises Rejected."""
        st = self.state
        try:
            req = json.loads((body or b"{}").decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise Rejected(400, str(e))
        if not isinstance(req, dict):
            raise Rejected(400, "send a JSON object")
        requested = req.get("model")
        if not isinstance(requested, str):
            requested = None
        stream = req.get("stream") is True
        try:
            params = st.profile.request_params(req.get("fake"))
        except script.ScriptError as e:
            raise Rejected(400, str(e), model=requested, stream=stream)
        messages = req.get("messages")
        if isinstance(messages, str):
            try:
                messages = json.loads(messages)
            except ValueError:
                raise Rejected(400, "messages must be a list of objects (a string was sent "
                               "that is not JSON)", model=requested, stream=stream)
        if messages is None:
            messages = []
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise Rejected(400, "messages must be a list of objects", model=requested,
                           stream=stream)
        if not messages:
            raise Rejected(400, NO_MESSAGES, model=requested, stream=stream)
        return req, requested, stream, params

    def handle_chat(self, path, body):
        st = self.state
        req, requested, stream, params = self.parse_chat(body)
        model = params["response_model"] or (requested if requested == st.name else st.name)
        prompt = params["prompt_tokens"]
        if prompt is None:
            prompt = len(body) // 4
        cached = min(params["cached_tokens"], prompt)
        in_flight = st.begin()
        self.generating = True
        try:
            st.log.event("request", path=path, model=requested, stream=stream,
                         body_bytes=len(body), fake=req.get("fake") or {}, in_flight=in_flight)
            done = cancelled = died = None
            try:
                self.pause(params["header_delay_ms"] / 1000.0)
                if params["error_status"] is not None:
                    status = params["error_status"]
                    message = params["error_message"] or "fake error %d" % status
                    self.send_error_json(status, frames.error_type_for(status), message)
                    done = {"status": status, "frames": 0}
                else:
                    completion = frames.Completion(model, params["fixed_ids"])
                    run = self.run_stream if stream else self.run_json
                    done = run(params, completion, prompt, cached)
            except Cancelled as c:
                cancelled = c.reason
            except EngineDied as e:
                died = e
            except OSError:
                cancelled = "write_failed"
            finally:
                self.release_engine()
            if died is not None:
                done = self.engine_died(died, stream)
                if st.stopping:
                    cancelled = "shutdown"
            self.generation_over()
            if cancelled is not None:
                st.log.event("cancel", path=path, reason=cancelled, stream=stream,
                             frames=self.frames, engine_wait_ms=self.engine_wait_ms,
                             engine_turn=self.engine_turn)
            else:
                st.log.event("response_done", path=path, stream=stream,
                             engine_wait_ms=self.engine_wait_ms, engine_turn=self.engine_turn,
                             **done)
        finally:
            st.end_handling()

    def engine_died(self, died, stream):
        """Strata's answer when its engine ends under a request: in a stream an error frame and
        [DONE], else a 503. Returns the response_done fields."""
        message = died.client_message()
        try:
            if stream:
                self.write_raw(frames.engine_error_frames(message))
                self.frames += 2
                return {"status": 200, "frames": self.frames, "keepalives": self.keepalives,
                        "mid_stream": "engine_died"}
            self.send_error_json(503, "server_error", message)
        except (Cancelled, OSError):
            pass
        return {"status": 503, "frames": 0, "mid_stream": "engine_died"}

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

    def generate(self, params, stream):
        """The engine's part of a request, holding the engine: the prompt read (`prefill_ms`,
        with `prompt_progress` PP lines, each a keep-alive comment in a stream), then the
        deltas, `token_delay_ms` apart. Yields (kind, value) deltas and ("failure", None)
        where a scripted mid-stream failure is due."""
        st = self.state
        proc = self.ensure_engine() if self.holding else self.take_engine()
        st.last_request_at = time.time()
        self.heard_engine()
        prefill_s = params["prefill_ms"] / 1000.0
        chunks = params["prompt_progress"]
        if chunks:
            for _ in range(chunks):
                self.engine_pause(prefill_s / chunks, proc, stream)
                self.heard_engine()
                if stream:
                    self.write_comment()
        else:
            self.engine_pause(prefill_s, proc, stream)
        delay_s = params["token_delay_ms"] / 1000.0
        content_sent = 0
        for kind, value in frames.plan(params):
            if kind == "content" and self.mid_stream_due(params, content_sent, False):
                yield ("failure", None)
                return
            self.engine_pause(delay_s, proc, stream)
            self.heard_engine()
            yield (kind, value)
            if kind == "content":
                content_sent += 1
        if proc.ended.is_set():
            raise EngineDied(proc.exit_code())
        if self.mid_stream_due(params, content_sent, True):
            yield ("failure", None)

    def send_stream_head(self):
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Accel-Buffering", "no")
            self.end_headers()
        except OSError:
            raise Cancelled("write_failed")

    def run_stream(self, params, completion, prompt, cached):
        """Returns the fields of the response_done event."""
        st = self.state
        if not st.engine.alive():
            # Strata loads a dead or unloaded engine before it answers anything.
            self.take_engine()
        # The head and the role frame go out before the request waits for the engine.
        self.send_stream_head()
        self.write_frame(completion.chunk({"role": "assistant", "content": ""}))
        generated = 0
        for kind, value in self.generate(params, True):
            if kind == "failure":
                return self.stream_failure(params)
            self.write_frame(completion.chunk(completion.delta_for(kind, value)))
            if kind in ("reasoning", "content"):
                generated += 1
        self.release_engine()
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
        self.release_engine()
        self.write_frame(frames.error_body("server_error", "engine died"))
        self.write_raw(frames.DONE)
        self.frames += 1
        return {"status": 200, "frames": self.frames, "keepalives": self.keepalives,
                "mid_stream": "error"}

    def run_json(self, params, completion, prompt, cached):
        """Returns the fields of the response_done event."""
        reasoning, content = [], []
        for kind, value in self.generate(params, False):
            if kind == "failure":
                return self.json_failure(params)
            if kind == "reasoning":
                reasoning.append(value)
            elif kind == "content":
                content.append(value)
        self.release_engine()
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
        self.release_engine()
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


def write_ready_file(path, contents, before_publish):
    """Atomic: a temp file in the same directory, then rename over `path`. `before_publish`
    runs just before the rename (the `ready` event is logged there, so whoever sees the file
    finds the event, even if it kills the process at once)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ready-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(contents))
            f.flush()
            os.fsync(f.fileno())
        before_publish()
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
    # The router discards a backend's stderr, so an uncaught exception (exit 1) would leave no
    # trace a failing test could show: it goes to the event log too.
    def crashed(kind, value, tb):
        log.event("crash", error="".join(traceback.format_exception(kind, value, tb)))
        sys.__excepthook__(kind, value, tb)

    def thread_crashed(args):
        log.event("crash", thread=args.thread.name if args.thread else None,
                  error="".join(traceback.format_exception(
                      args.exc_type, args.exc_value, args.exc_traceback)))
        threading.__excepthook__(args)

    sys.excepthook = crashed
    threading.excepthook = thread_crashed
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

    engine = Engine(profile, log)

    def stop_now(httpd=None, state=None):
        """Strata's stop: no new connections, QUIT to the engine (a stream in flight then ends
        with an error frame and [DONE]), a moment for the handlers, exit 0."""
        log.event("stop", signal=signals.stop_signal)
        if state is not None:
            state.stopping = True
        if httpd is not None:
            httpd.shutdown()
        engine.close()
        if state is not None:
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

    def die_loading():
        """Strata installs its SIGTERM handler only once it serves: a stop signal while the
        engine loads ends the server by that signal (its engine then sees EOF)."""
        log.event("stop", signal=signals.stop_signal, loading=True)
        signum = getattr(signal, signals.stop_signal)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(5)
        finish(log, 1, reason="the stop signal did not end the process")

    # The load is the engine's: the HTTP port stays closed until it says READY.
    proc = engine.start()
    while not proc.ready.wait(0.01):
        if poll_signals():
            die_loading()
        if proc.ended.is_set() and not proc.ready.is_set():
            code = proc.exit_code()
            if start["start_failure"] == "exit":
                finish(log, start["exit_code"], reason="start_failure exit")
            sys.stderr.write("error: the engine exited before it was ready (exit code %s)\n"
                             % code)
            finish(log, 1, reason="the engine exited before it was ready")

    failure = start["start_failure"]
    state = State(args, profile, log, engine)
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
    def log_ready():
        log.event("ready", ready_file=args.ready_file, contents=ready)

    if args.ready_file:
        write_ready_file(args.ready_file, ready, log_ready)
    else:
        log_ready()
    url = "http://%s:%d" % (host, args.port)
    sys.stdout.write("ready: %s/v1  (OpenAI: %s/v1/chat/completions, context %d tokens)\n"
                     % (url, url, engine.ctx))
    sys.stdout.flush()
    if state.idle_unload_s > 0:
        threading.Thread(target=state.idle_unload_loop, daemon=True).start()

    exit_at = time.monotonic() + 0.2 if failure == "exit_after_ready" else None
    while True:
        if poll_signals():
            stop_now(httpd, state)
        if exit_at is not None and time.monotonic() >= exit_at:
            finish(log, 4, reason="start_failure exit_after_ready")
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
