"""A behavioural stand-in for CLIProxyAPI in front of the router (stdlib only).

No CLIProxyAPI binary can be run here, so this encodes what research/cliproxyapi.md documents
from its source (v7.2.140), for the one upstream shape the router is: an
`openai-compatibility` provider whose `base-url` is the router's `/v1`. It is not a
reimplementation; it does only what the router's behaviour depends on:

- forces `stream_options.include_usage: true` into streaming requests;
- drops `:` comment, `id:` and `retry:` lines from the upstream stream;
- commits its own response headers only with the first upstream data chunk; its own keepalive
  (`streaming.keepalive-seconds`) starts only after that;
- counts a frame as an error if its event is `error`/`response.error`/`response.failed`, or its
  JSON has a non-null `error` or `response.error`; the status is the first of `status`,
  `status_code`, `error.status`, `error.status_code` in 400..599, else 502; before the first
  chunk that is a real HTTP error with the error JSON as body, after it the error JSON as one
  `data:` line with no `[DONE]`;
- a non-2xx status before the stream passes through with its body;
- adds a missing `[DONE]` at a clean end of a chat-completions stream;
- after a failure with status 408 or 5xx (any failure but 401-404 and 429, which cool longer)
  it cools the route for 60 s, answering 429 `model_cooldown` with `Retry-After` itself,
  unless `disable-cooling` is set.

Usage: python3 standin.py CONFIG.json, where CONFIG is
{"listen_port": N, "base_url": "http://127.0.0.1:P/v1", "disable_cooling": bool,
 "keepalive_seconds": N (0: off), "ready_file": PATH}. It writes READY_FILE once listening.
"""

import http.client
import http.server
import json
import sys
import threading
import time
import urllib.parse

COOLDOWN_S = 60


def error_status(obj, event):
    """The status CLIProxyAPI gives an in-band error frame, or None if it is no error."""
    is_error = event in ("error", "response.error", "response.failed")
    if isinstance(obj, dict):
        if obj.get("error") is not None:
            is_error = True
        response = obj.get("response")
        if isinstance(response, dict) and response.get("error") is not None:
            is_error = True
        if obj.get("type") in ("error", "response.error", "response.failed"):
            is_error = True
    if not is_error:
        return None
    candidates = []
    if isinstance(obj, dict):
        candidates += [obj.get("status"), obj.get("status_code")]
        err = obj.get("error")
        if isinstance(err, dict):
            candidates += [err.get("status"), err.get("status_code")]
    for value in candidates:
        if isinstance(value, int) and 400 <= value <= 599:
            return value
    return 502


class State:
    def __init__(self, config):
        self.config = config
        self.cool_until = 0.0
        self.lock = threading.Lock()

    def failed(self, status):
        if self.config.get("disable_cooling"):
            return
        if status == 408 or status >= 500:
            with self.lock:
                self.cool_until = time.monotonic() + COOLDOWN_S

    def cooling(self):
        with self.lock:
            return max(0.0, self.cool_until - time.monotonic())


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, obj, extra=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        state = self.server.state
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        remaining = state.cooling()
        if remaining > 0:
            self.send_json(
                429,
                {"error": {"message": "model cooling down", "type": "model_cooldown",
                           "code": "model_cooldown"}},
                [("Retry-After", str(int(remaining) + 1))],
            )
            return
        stream = bool(request.get("stream"))
        if stream:
            options = request.setdefault("stream_options", {})
            options["include_usage"] = True
        base = urllib.parse.urlsplit(state.config["base_url"])
        upstream = http.client.HTTPConnection(base.hostname, base.port, timeout=None)
        body = json.dumps(request).encode()
        upstream.request(
            "POST",
            base.path.rstrip("/") + "/chat/completions",
            body=body,
            headers={"Content-Type": "application/json", "User-Agent": "cli-proxy-openai-compat"},
        )
        response = upstream.getresponse()
        if response.status >= 300:
            data = response.read()
            state.failed(response.status)
            self.send_response(response.status)
            self.send_header("Content-Type", response.getheader("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if not stream:
            data = response.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.relay_stream(response, state)

    def relay_stream(self, response, state):
        committed = False
        saw_done = False
        event = None
        keepalive = self.server.state.config.get("keepalive_seconds", 0)
        last_write = time.monotonic()

        def write(raw):
            nonlocal last_write
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()
            last_write = time.monotonic()

        def commit():
            nonlocal committed
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            committed = True

        while True:
            line = response.readline()
            if not line:
                break
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if committed and keepalive and time.monotonic() - last_write >= keepalive:
                write(b": keep-alive\n\n")
            if text == "" or text.startswith(":") or text.startswith(("id:", "retry:")):
                if text == "":
                    event = None
                continue
            if text.startswith("event:"):
                event = text[len("event:"):].strip()
                continue
            if not text.startswith("data:"):
                status = 502
                obj = {"error": {"message": "upstream sent a line without data:", "type": "server_error"}}
                return self.fail(committed, status, obj, state)
            payload = text[len("data:"):].strip()
            if payload == "[DONE]":
                if event == "error":
                    return self.fail(committed, 502, {"error": {"message": "error event without data"}}, state)
                saw_done = True
                if not committed:
                    commit()
                write(b"data: [DONE]\n\n")
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                return self.fail(committed, 502, {"error": {"message": "upstream data is not JSON"}}, state)
            status = error_status(obj, event)
            if status is not None:
                return self.fail(committed, status, obj, state)
            if not committed:
                commit()
            write(b"data: " + payload.encode() + b"\n\n")
        if not committed:
            commit()
        if not saw_done:
            write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def fail(self, committed, status, obj, state):
        state.failed(status)
        if not committed:
            self.send_json(status, obj)
            return
        raw = b"data: " + json.dumps(obj).encode() + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", config["listen_port"]), Handler)
    server.daemon_threads = True
    server.state = State(config)
    with open(config["ready_file"], "w", encoding="utf-8") as handle:
        handle.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
