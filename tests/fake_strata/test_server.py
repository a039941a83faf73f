"""Tests for the fake Strata backend (run: python3 -m unittest -v test_server, cwd = this dir).

Every test starts the real `python -m serve.server` as a subprocess in its own process group,
in a private temporary directory, and synchronises on the ready file, the event log or the
process exit with bounded deadlines (never on a bare sleep).
"""

import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "fake-model-q4"
SECRET_ENV = "FAKE_STRATA_TEST_SECRET"
SECRET_VALUE = "do-not-log-this-value-7d1f"
DROP = object()  # a profile value that removes the key
MESSAGES = [{"role": "user", "content": "a secret prompt text"}]


def free_port():
    """A currently free loopback port below the kernel's ephemeral range, so that neither
    bind(0) listeners nor client source ports of concurrently running tests take it."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise AssertionError("no free port found")


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(0.01)


def parse_sse(data):
    """Split an SSE body into ('data', obj-or-'[DONE]') and ('comment', text) events,
    asserting every event is a single line followed by a blank line."""
    text = data.decode("utf-8")
    events = []
    for block in text.split("\n\n")[:-1]:
        assert "\n" not in block, "multi-line SSE event: %r" % block
        if block.startswith("data: "):
            payload = block[len("data: "):]
            events.append(("data", payload if payload == "[DONE]" else json.loads(payload)))
        elif block.startswith(":"):
            events.append(("comment", block))
        else:
            raise AssertionError("unexpected SSE line %r" % block)
    assert text.endswith("\n\n") or text == "", "body does not end with a blank line: %r" % text[-80:]
    return events


class Fake(object):
    """One fake server process in a private temp dir."""

    def __init__(self, testcase, fake=None, profile=None, args=None, port=None, extra_env=None,
                 ready_file=True, idle_unload="0"):
        self.tc = testcase
        self.dir = tempfile.mkdtemp(prefix="fake-strata-")
        os.chmod(self.dir, 0o700)
        self.port = port or free_port()
        self.log_path = os.path.join(self.dir, "events.jsonl")
        self.ready_path = os.path.join(self.dir, "ready.json")
        self.profile_path = os.path.join(self.dir, "profile.json")
        prof = {"model_name": NAME}
        prof.update(profile or {})
        prof = dict((k, v) for k, v in prof.items() if v is not DROP)
        script = {"log": self.log_path}
        script.update(fake or {})
        prof["fake"] = script
        with open(self.profile_path, "w") as f:
            json.dump(prof, f)
        if args is None:
            args = ["--engine", "strata", "--config", self.profile_path, "--host", "127.0.0.1",
                    "--port", str(self.port)]
            if idle_unload is not None:
                args += ["--idle-unload", idle_unload]
            if ready_file:
                args += ["--ready-file", self.ready_path]
        env = dict(os.environ)
        env[SECRET_ENV] = SECRET_VALUE
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(extra_env or {})
        self.out = open(os.path.join(self.dir, "stdout"), "wb")
        self.err = open(os.path.join(self.dir, "stderr"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "serve.server"] + args,
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err,
            start_new_session=True,
        )
        testcase.addCleanup(self.cleanup)

    def cleanup(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # our child's own process group
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout=5)
        self.out.close()
        self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stderr(self):
        with open(os.path.join(self.dir, "stderr"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stdout(self):
        with open(os.path.join(self.dir, "stdout"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def read_ready(self):
        try:
            with open(self.ready_path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def wait_ready(self, timeout=10):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("fake exited with %s before ready; stderr:\n%s"
                                     % (self.proc.returncode, self.stderr()))
            return self.read_ready()
        return wait_until(ready, timeout, "the ready file")

    def wait_exit(self, timeout=10):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("fake did not exit within %ss" % timeout)

    def events(self, name=None):
        try:
            with open(self.log_path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines]
        return [e for e in out if name is None or e["event"] == name]

    def wait_event(self, name, timeout=10, where=None):
        def find():
            for e in self.events(name):
                if where is None or where(e):
                    return e
            return None
        return wait_until(find, timeout, "log event %r" % name)

    # ---- HTTP helpers ----

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path):
        c = self.conn()
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r, body

    def post(self, path, obj):
        c = self.conn()
        c.request("POST", path, body=json.dumps(obj).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        c.close()
        return r, body

    def chat(self, fake=None, stream=True, model=NAME):
        body = {"model": model, "stream": stream, "messages": MESSAGES}
        if fake is not None:
            body["fake"] = fake
        return self.post("/v1/chat/completions", body)

    def raw(self, request_bytes, timeout=10):
        """Send raw bytes and return everything until EOF, plus the socket's time to first byte."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(request_bytes)
            t0 = time.monotonic()
            chunks = []
            first = None
            while True:
                try:
                    b = s.recv(65536)
                except ConnectionResetError:
                    break  # a close with unread request bytes resets, after the answer
                if not b:
                    break
                if first is None:
                    first = time.monotonic() - t0
                chunks.append(b)
            return b"".join(chunks), first
        finally:
            s.close()


def read_until_generating(resp):
    """Reads a stream (an http.client response) up to and including its first content frame:
    from then on the request holds the engine."""
    while True:
        line = resp.readline()
        assert line, "the stream ended before its first content frame"
        if line.startswith(b"data: ") and b'"content": "tok' in line:
            assert resp.readline() == b"\n"
            return


def chat_body(obj):
    """`obj` with a user message unless it names its own `messages`."""
    out = {"messages": MESSAGES}
    out.update(obj)
    return out


def chat_request_bytes(port, obj, extra_headers=""):
    body = json.dumps(chat_body(obj)).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (port, len(body), extra_headers))
    return head.encode() + body


def split_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, body


class ServingTests(unittest.TestCase):
    """HTTP behaviour against one ready server per test."""

    def setUp(self):
        self.fake = Fake(self)
        self.fake.wait_ready()

    def test_health_and_models_shapes(self):
        for path in ("/health", "/api/health"):
            r, body = self.fake.get(path)
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(body), {
                "status": "ok", "max_context": 32768, "model": NAME, "images": False,
                "api_key": False, "loaded": True, "service": "strata"})
        for path in ("/v1/models", "/models"):
            r, body = self.fake.get(path)
            self.assertEqual(r.status, 200)
            doc = json.loads(body)
            self.assertEqual(doc["object"], "list")
            self.assertEqual(len(doc["data"]), 1)
            entry = doc["data"][0]
            self.assertEqual(entry["id"], NAME)
            self.assertEqual(entry["object"], "model")
            self.assertEqual(entry["status"], {"value": "loaded"})
            self.assertEqual(entry["meta"], {"n_ctx": 32768})

    def test_http10_closes_without_a_connection_header_and_404(self):
        r, body = self.fake.get("/nope")
        self.assertEqual(r.status, 404)
        self.assertEqual(json.loads(body), {"error": {"message": "not found"}})
        # HTTP/1.0 and a close after the answer, with no Connection header (as Strata), even
        # when the client asks to keep the connection.
        raw, _ = self.fake.raw(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
        status, headers, body = split_response(raw)
        self.assertTrue(status.startswith("HTTP/1.0 200"), status)
        self.assertNotIn("connection", headers)
        self.assertEqual(int(headers["content-length"]), len(body))
        self.assertEqual(json.loads(body)["model"], NAME)
        # A streamed chat body ends at EOF (the connection closes); no length, no chunking.
        raw, _ = self.fake.raw(chat_request_bytes(self.fake.port, {"stream": True}))
        status, headers, body = split_response(raw)
        self.assertTrue(status.startswith("HTTP/1.0 200"), status)
        self.assertNotIn("connection", headers)
        self.assertNotIn("content-length", headers)
        self.assertNotIn("transfer-encoding", headers)
        self.assertTrue(body.endswith(b"data: [DONE]\n\n"))

    def test_json_has_pythons_default_separators(self):
        _, body = self.fake.get("/health")
        self.assertEqual(body, (
            '{"status": "ok", "max_context": 32768, "model": "%s", "images": false, '
            '"api_key": false, "loaded": true, "service": "strata"}' % NAME).encode())
        _, body = self.fake.get("/v1/models")
        self.assertTrue(body.startswith(b'{"object": "list", "data": [{"id": '), body)
        _, body = self.fake.get("/nope")
        self.assertEqual(body, b'{"error": {"message": "not found"}}')
        _, body = self.fake.post("/v1/cache/lookup", {"requests": []})
        self.assertEqual(body, b'{"min_tokens": 1024, "results": []}')
        _, body = self.fake.post("/v1/chat/completions", {"messages": []})
        self.assertEqual(body, b'{"error": {"type": "invalid_request_error", '
                               b'"message": "No messages provided."}}')
        # Answers keep non-ASCII text as UTF-8, as Strata's json.dumps(..., ensure_ascii=False).
        for stream in (True, False):
            _, body = self.fake.chat({"response_model": "mod\u00e8le", "tokens": 1},
                                     stream=stream)
            self.assertIn('"model": "mod\u00e8le"'.encode("utf-8"), body)
            self.assertIn(b'"usage": {"prompt_tokens": ', body)
        _, body = self.fake.chat({"tokens": 1})
        for line in body.split(b"\n\n")[:-2]:
            self.assertTrue(line.startswith(b'data: {"id": "chatcmpl-'), line)

    def test_stream_frames_in_order(self):
        r, body = self.fake.chat({"reasoning_tokens": 2, "tool_call": True, "tokens": 3,
                                  "prompt_tokens": 100, "cached_tokens": 40})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.version, 10)
        self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
        self.assertEqual(r.getheader("Cache-Control"), "no-cache")
        self.assertEqual(r.getheader("X-Accel-Buffering"), "no")
        self.assertIsNone(r.getheader("Connection"))
        events = parse_sse(body)
        self.assertTrue(all(kind == "data" for kind, _ in events), events)
        datas = [d for _, d in events]
        self.assertEqual(datas[-1], "[DONE]")
        chunks = datas[:-1]
        ids = set(c["id"] for c in chunks)
        self.assertEqual(len(ids), 1)
        cid = ids.pop()
        self.assertRegex(cid, r"^chatcmpl-[0-9a-f]{24}$")
        for c in chunks:
            self.assertEqual(c["object"], "chat.completion.chunk")
            self.assertEqual(c["model"], NAME)
            self.assertIsInstance(c["created"], int)
            self.assertEqual(len(c["choices"]), 1)
            self.assertEqual(c["choices"][0]["index"], 0)
        deltas = [c["choices"][0]["delta"] for c in chunks]
        self.assertEqual(deltas[0], {"role": "assistant", "content": ""})
        self.assertEqual(deltas[1:3], [{"reasoning_content": "hmm "}] * 2)
        start = deltas[3]["tool_calls"][0]
        self.assertEqual(start["index"], 0)
        self.assertRegex(start["id"], r"^call_")
        self.assertEqual(start["type"], "function")
        self.assertEqual(start["function"], {"name": "get_weather", "arguments": ""})
        pieces = []
        i = 4
        while "tool_calls" in deltas[i]:
            call = deltas[i]["tool_calls"][0]
            self.assertEqual(set(call), {"index", "function"})
            pieces.append(call["function"]["arguments"])
            i += 1
        self.assertEqual(json.loads("".join(pieces)), {"city": "Paris"})
        self.assertEqual(deltas[i:i + 3], [{"content": "tok "}] * 3)
        final = chunks[i + 3]
        self.assertEqual(len(chunks), i + 4)
        for c in chunks[:-1]:
            self.assertIsNone(c["choices"][0]["finish_reason"])
            self.assertNotIn("usage", c)
        self.assertEqual(final["choices"][0]["delta"], {})
        self.assertEqual(final["choices"][0]["finish_reason"], "tool_calls")
        self.assertEqual(final["usage"], {
            "prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
            "prompt_tokens_details": {"cached_tokens": 40}})
        t = final["timings"]
        self.assertEqual(set(t), {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms",
                                  "prompt_per_second", "predicted_n", "predicted_ms",
                                  "predicted_per_token_ms", "predicted_per_second"})
        self.assertEqual((t["cache_n"], t["prompt_n"], t["predicted_n"]), (40, 60, 5))
        for key in ("prompt_ms", "predicted_ms", "prompt_per_token_ms", "predicted_per_second"):
            self.assertIsInstance(t[key], float)
        done = self.fake.wait_event("response_done")
        self.assertEqual(done["frames"], len(datas))
        self.assertEqual(done["finish_reason"], "tool_calls")

    def test_stream_defaults_model_and_overrides(self):
        r, body = self.fake.chat({"timings": False, "finish_reason": "length",
                                  "content_bytes": 10}, model="some-alias")
        chunks = [d for _, d in parse_sse(body)][:-1]
        self.assertTrue(all(c["model"] == NAME for c in chunks))
        contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
        self.assertEqual(contents, ["tok tok to"] * 5)
        final = chunks[-1]
        self.assertEqual(final["choices"][0]["finish_reason"], "length")
        self.assertNotIn("timings", final)
        self.assertEqual(final["usage"]["completion_tokens"], 5)
        # P defaults to len(request body) // 4.
        req = self.fake.wait_event("request")
        self.assertEqual(final["usage"]["prompt_tokens"], req["body_bytes"] // 4)
        self.assertEqual(req["model"], "some-alias")
        self.assertEqual(req["fake"]["content_bytes"], 10)

    def test_non_stream_json(self):
        r, body = self.fake.chat({"reasoning_tokens": 1, "tool_call": True, "tokens": 2,
                                  "prompt_tokens": 50, "cached_tokens": 70}, stream=False)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("Content-Type"), "application/json")
        self.assertIsNone(r.getheader("Connection"))
        doc = json.loads(body)
        self.assertRegex(doc["id"], r"^chatcmpl-[0-9a-f]{24}$")
        self.assertEqual(doc["object"], "chat.completion")
        self.assertEqual(doc["model"], NAME)
        choice = doc["choices"][0]
        self.assertEqual(choice["index"], 0)
        self.assertEqual(choice["finish_reason"], "tool_calls")
        msg = choice["message"]
        self.assertEqual(msg["role"], "assistant")
        self.assertEqual(msg["content"], "tok tok ")
        self.assertEqual(msg["reasoning_content"], "hmm ")
        self.assertEqual(msg["tool_calls"][0]["function"]["name"], "get_weather")
        self.assertEqual(json.loads(msg["tool_calls"][0]["function"]["arguments"]),
                         {"city": "Paris"})
        # cached_tokens is capped at the prompt size.
        self.assertEqual(doc["usage"], {
            "prompt_tokens": 50, "completion_tokens": 3, "total_tokens": 53,
            "prompt_tokens_details": {"cached_tokens": 50}})
        self.assertEqual(doc["timings"]["prompt_n"], 0)
        r, body = self.fake.chat({"tokens": 1}, stream=False)
        msg = json.loads(body)["choices"][0]["message"]
        self.assertEqual(msg, {"role": "assistant", "content": "tok "})

    def test_fixed_ids_make_identical_requests_byte_identical(self):
        for stream in (True, False):
            r1, body1 = self.fake.chat({"fixed_ids": True, "tool_call": True}, stream=stream)
            r2, body2 = self.fake.chat({"fixed_ids": True, "tool_call": True}, stream=stream)
            self.assertEqual((r1.status, r2.status), (200, 200))
            self.assertEqual(body1, body2)
            self.assertIn(b'"id": "chatcmpl-000000000000000000000000"', body1)
            self.assertIn(b'"created": 0,', body1)
            self.assertIn(b'"id": "call_000000000000000000000000"', body1)
            r3, body3 = self.fake.chat({"tool_call": True}, stream=stream)
            self.assertNotEqual(body1, body3)
            self.assertNotIn(b"chatcmpl-000000000000000000000000", body3)

    def test_response_model_overrides_the_answered_model(self):
        for stream in (True, False):
            r, body = self.fake.chat({"response_model": "someone-else"}, stream=stream)
            self.assertEqual(r.status, 200)
            self.assertIn(b'"model": "someone-else"', body)
            self.assertNotIn(('"model": "%s"' % NAME).encode(), body)
            r, body = self.fake.chat({}, stream=stream)
            self.assertIn(('"model": "%s"' % NAME).encode(), body)

    def test_error_status_and_bad_requests(self):
        r, body = self.fake.chat({"error_status": 503})
        self.assertEqual(r.status, 503)
        self.assertEqual(json.loads(body)["error"]["type"], "server_error")
        self.assertEqual(r.getheader("Content-Type"), "application/json")
        r, body = self.fake.chat({"error_status": 400, "error_message": "too long"},
                                 stream=False)
        self.assertEqual(r.status, 400)
        self.assertEqual(json.loads(body),
                         {"error": {"type": "invalid_request_error", "message": "too long"}})
        r, body = self.fake.post("/v1/chat/completions", None)  # "null" is not an object
        self.assertEqual((r.status, json.loads(body)["error"]["message"]),
                         (400, "send a JSON object"))
        c = self.fake.conn()
        c.request("POST", "/v1/chat/completions", body=b"{not json")
        r = c.getresponse()
        self.assertEqual(r.status, 400)
        self.assertEqual(json.loads(r.read())["error"]["type"], "invalid_request_error")
        c.close()
        r, body = self.fake.chat({"tokens": "many"})
        self.assertEqual(r.status, 400)
        r, body = self.fake.chat({"no_such_key": 1})
        self.assertEqual(r.status, 400)
        self.assertIn("no_such_key", json.loads(body)["error"]["message"])
        r, body = self.fake.chat({"load_ms": 1})  # profile-level only
        self.assertEqual(r.status, 400)
        r, body = self.fake.chat({"keepalive_ms": 100})  # gone: comments come from the engine
        self.assertEqual(r.status, 400)
        self.assertIn("keepalive_ms", json.loads(body)["error"]["message"])
        # Like Strata's chat template: a request needs messages.
        for messages, message in (([], "No messages provided."), (None, "No messages provided."),
                                  ("x", "messages must be a list of objects (a string was "
                                        "sent that is not JSON)"),
                                  ([1], "messages must be a list of objects")):
            r, body = self.fake.post("/v1/chat/completions", {"messages": messages})
            self.assertEqual((r.status, json.loads(body)), (400, {"error": {
                "type": "invalid_request_error", "message": message}}))

    def test_chunked_request_body_is_not_read(self):
        # Strata reads Content-Length bytes only: a chunked body is an empty request, which
        # its chat template refuses.
        body = json.dumps(chat_body({"stream": False, "fake": {"tokens": 1}})).encode()
        chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
        raw, _ = self.fake.raw(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                               b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
        status, _, resp = split_response(raw)
        self.assertTrue(status.startswith("HTTP/1.0 400"), status)
        self.assertEqual(json.loads(resp), {"error": {
            "type": "invalid_request_error", "message": "No messages provided."}})
        req = self.fake.wait_event("request")
        self.assertEqual((req["body_bytes"], req["rejected"]), (0, "No messages provided."))

    def test_mid_stream_error(self):
        r, body = self.fake.chat({"tokens": 5, "mid_stream": "error", "mid_stream_after": 2})
        self.assertEqual(r.status, 200)
        datas = [d for _, d in parse_sse(body)]
        contents = [d for d in datas[:-2] if d["choices"][0]["delta"].get("content")]
        self.assertEqual(len(contents), 2)
        self.assertEqual(datas[-2], {"error": {"type": "server_error", "message": "engine died"}})
        self.assertEqual(datas[-1], "[DONE]")
        self.assertFalse(any("usage" in d for d in datas[:-1]))
        r, body = self.fake.chat({"mid_stream": "error"}, stream=False)
        self.assertEqual(r.status, 503)

    def test_keepalive_comments_come_only_from_prompt_progress(self):
        t0 = time.monotonic()
        r, body = self.fake.chat({"tokens": 2, "token_delay_ms": 250, "prefill_ms": 300,
                                  "prompt_progress": 3, "header_delay_ms": 200})
        self.assertGreaterEqual(time.monotonic() - t0, 1.0)
        events = parse_sse(body)
        # The role frame, one comment per PP line, then the tokens: token delays under the
        # engine's 10 s heartbeat send nothing.
        kinds = [kind for kind, _ in events]
        self.assertEqual(kinds, ["data", "comment", "comment", "comment", "data", "data", "data",
                                 "data"])
        self.assertTrue(all(text == ": keep-alive" for kind, text in events if kind == "comment"))
        self.assertEqual(events[-1], ("data", "[DONE]"))
        done = self.fake.wait_event("response_done")
        self.assertEqual(done["keepalives"], 3)
        # A non-stream gets none (nothing is sent before its answer).
        r, body = self.fake.chat({"tokens": 1, "prefill_ms": 100, "prompt_progress": 4},
                                 stream=False)
        self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 1)

    def test_engine_heartbeat_after_10_s_of_engine_silence(self):
        r, body = self.fake.chat({"tokens": 1, "token_delay_ms": 10500})
        kinds = [kind for kind, _ in parse_sse(body)]
        self.assertEqual(kinds, ["data", "comment", "data", "data", "data"])

    def test_header_delay_sends_nothing(self):
        req = chat_request_bytes(self.fake.port, {"stream": True, "fake": {
            "header_delay_ms": 400, "prefill_ms": 400, "prompt_progress": 8, "tokens": 1}})
        raw, first = self.fake.raw(req)
        self.assertGreaterEqual(first, 0.35)
        self.assertTrue(raw.startswith(b"HTTP/1.0 200"), raw[:40])

    def test_no_body_limit(self):
        # At this revision Strata has no 413: a large body is read and served (the fake's old
        # STRATA_MAX_BODY_MIB is gone too).
        fake = Fake(self, extra_env={"STRATA_MAX_BODY_MIB": "1"})
        fake.wait_ready()
        pad = "p" * (3 << 20)
        r, body = fake.post("/v1/chat/completions", chat_body(
            {"stream": False, "pad": pad, "fake": {"tokens": 1}}))
        self.assertEqual(r.status, 200)
        self.assertGreater(fake.wait_event("request")["body_bytes"], 3 << 20)

    def test_client_disconnect_logs_cancel(self):
        s = socket.create_connection(("127.0.0.1", self.fake.port), timeout=10)
        s.sendall(chat_request_bytes(self.fake.port, {"stream": True, "fake": {
            "tokens": 100, "token_delay_ms": 50}}))
        got = b""
        while b"chat.completion.chunk" not in got:
            b = s.recv(4096)
            self.assertTrue(b)
            got += b
        s.close()
        cancel = self.fake.wait_event("cancel", timeout=5)
        self.assertEqual(cancel["path"], "/v1/chat/completions")
        self.assertEqual(cancel["reason"], "client_disconnect")
        self.assertEqual(self.fake.events("response_done"), [])
        # The server keeps serving; the engine is idle again.
        r, _ = self.fake.get("/health")
        self.assertEqual(r.status, 200)
        r, body = self.fake.post("/v1/cache/lookup", {"requests": []})
        self.assertEqual(r.status, 200)

    def test_disconnect_during_header_delay_and_non_stream(self):
        for obj in ({"stream": True, "fake": {"header_delay_ms": 5000}},
                    {"stream": False, "fake": {"tokens": 100, "token_delay_ms": 50}}):
            before = len(self.fake.events("cancel"))
            s = socket.create_connection(("127.0.0.1", self.fake.port), timeout=10)
            s.sendall(chat_request_bytes(self.fake.port, obj))
            self.fake.wait_event("request", where=lambda e: e["fake"] == obj["fake"])
            s.close()
            wait_until(lambda: len(self.fake.events("cancel")) > before, 5, "cancel")

    def test_cache_lookup_and_busy(self):
        bodies = [
            {"id": "a", "body": {"messages": [{"role": "user", "content": "x" * 400}]}},
            {"id": "b", "body": {"fake": {"prompt_tokens": 3000, "cached_tokens": 2000}}},
            {"id": "c", "body": {"fake": {"prompt_tokens": 10, "cached_tokens": 20}}},
        ]
        r, body = self.fake.post("/v1/cache/lookup", {"requests": bodies})
        self.assertEqual(r.status, 200)
        doc = json.loads(body)
        self.assertEqual(doc["min_tokens"], 1024)
        self.assertEqual(doc["results"], [
            {"id": "a", "input_tokens": len(json.dumps(bodies[0]["body"])) // 4,
             "cached_tokens": 0},
            {"id": "b", "input_tokens": 3000, "cached_tokens": 2000},
            {"id": "c", "input_tokens": 10, "cached_tokens": 10},
        ])
        r, body = self.fake.post("/v1/cache/lookup", {"requests": "no"})
        self.assertEqual(r.status, 400)
        # Busy while a generation is in flight.
        c = self.fake.conn()
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat_body(
            {"stream": True, "fake": {"tokens": 3, "token_delay_ms": 150}})).encode())
        resp = c.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertIn(b"chat.completion.chunk", resp.readline())
        r, body = self.fake.post("/v1/cache/lookup", {"requests": bodies})
        self.assertEqual(r.status, 409)
        self.assertEqual(json.loads(body), {"error": {"type": "model_busy", "message": "busy"}})
        rest = resp.read()
        c.close()
        self.assertTrue(rest.endswith(b"data: [DONE]\n\n"))
        # Idle as soon as the client has the whole answer (not only once the handler ends).
        r, body = self.fake.post("/v1/cache/lookup", {"requests": bodies})
        self.assertEqual(r.status, 200)
        wait_until(lambda: len(self.fake.events("cache_lookup")) == 4, 5, "4 lookups logged")
        statuses = [e["status"] for e in self.fake.events("cache_lookup")]
        self.assertEqual(statuses, [200, 400, 409, 200])

    def test_log_records_env_keys_and_no_prompt(self):
        self.fake.chat({"tokens": 1})
        self.fake.wait_event("response_done")
        start = self.fake.events("start")[0]
        self.assertIn(SECRET_ENV, start["env_keys"])
        self.assertEqual(start["env_keys"], sorted(start["env_keys"]))
        self.assertEqual(start["model_name"], NAME)
        self.assertEqual(start["port"], self.fake.port)
        self.assertEqual(start["engine"], "strata")
        self.assertEqual(start["cwd"], HERE)
        self.assertEqual(start["profile"], self.fake.profile_path)
        self.assertIn("--ready-file", start["argv"])
        with open(self.fake.log_path) as f:
            text = f.read()
        self.assertNotIn(SECRET_VALUE, text)
        self.assertNotIn("secret prompt", text)
        for e in self.fake.events():
            self.assertIsInstance(e["ts"], float)
            self.assertEqual(e["pid"], self.fake.proc.pid)
        self.assertEqual([e["event"] for e in self.fake.events()],
                         ["start", "engine_start", "ready", "request", "response_done"])


class LifecycleTests(unittest.TestCase):

    def test_ready_file_atomic_identity_and_port_closed_while_loading(self):
        fake = Fake(self, fake={"load_ms": 500})
        started = fake.wait_event("start")  # logged before the simulated load begins
        refused = 0
        deadline = time.monotonic() + 10
        while True:
            self.assertLess(time.monotonic(), deadline, "port never opened")
            self.assertIsNone(fake.proc.poll())
            had_ready = fake.read_ready() is not None
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", fake.port))
                connected_at = time.time()
                break
            except ConnectionRefusedError:
                refused += 1
                # The ready file is written only once connections are accepted.
                self.assertFalse(had_ready, "ready file present while the port is closed")
            finally:
                s.close()
            time.sleep(0.02)
        self.assertGreater(refused, 5)
        self.assertGreaterEqual(connected_at - started["ts"], 0.5, "port opened while loading")
        fake.wait_ready()
        ready = fake.read_ready()
        self.assertEqual(ready, {"pid": fake.proc.pid, "model_name": NAME, "port": fake.port})
        socket.create_connection(("127.0.0.1", fake.port), timeout=5).close()
        leftovers = [n for n in os.listdir(fake.dir) if n.startswith(".ready-")]
        self.assertEqual(leftovers, [])
        self.assertIn("ready: http://127.0.0.1:%d/v1" % fake.port,
                      wait_until(fake.stdout, 5, "the ready line"))
        started, readied = fake.events("start")[0], fake.events("ready")[0]
        self.assertGreaterEqual(readied["ts"] - started["ts"], 0.5)
        self.assertEqual(readied["contents"], ready)

    def test_ready_file_is_never_partial(self):
        # The file appears in one step: every observation parses as the full document.
        fake = Fake(self)
        seen = None
        deadline = time.monotonic() + 10
        while seen is None:
            self.assertLess(time.monotonic(), deadline)
            try:
                with open(fake.ready_path) as f:
                    text = f.read()
            except FileNotFoundError:
                continue
            seen = json.loads(text)
        self.assertEqual(seen["pid"], fake.proc.pid)

    def test_model_name_default(self):
        fake = Fake(self, profile={"model_name": DROP})
        self.assertEqual(fake.wait_ready()["model_name"], "qwen3.8-flash-next")
        self.assertEqual(json.loads(fake.get("/health")[1])["model"], "qwen3.8-flash-next")
        bad = Fake(self, profile={"model_name": None})
        self.assertEqual(bad.wait_exit(), 1)

    def test_sigterm_exits_zero(self):
        fake = Fake(self, fake={"spawn_grandchild": True})
        fake.wait_ready()
        grandchild = fake.wait_event("grandchild")["child_pid"]
        self.assertEqual(os.getpgid(grandchild), fake.proc.pid)  # same process group
        fake.proc.send_signal(signal.SIGTERM)
        self.assertEqual(fake.wait_exit(), 0)
        self.assertEqual(fake.events("stop")[0]["signal"], "SIGTERM")
        self.assertEqual(fake.events("exit")[-1]["code"], 0)
        # The fake leaves its grandchild to the router's process-group kill.
        os.kill(grandchild, 0)
        os.killpg(fake.proc.pid, signal.SIGKILL)
        wait_until(lambda: _gone(grandchild), 5, "grandchild death")

    def test_sigterm_ends_a_stream_with_an_error_frame_and_quits_the_engine(self):
        fake = Fake(self)
        fake.wait_ready()
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        c = fake.conn()
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat_body(
            {"stream": True, "fake": {"tokens": 1000, "token_delay_ms": 20}})).encode())
        resp = c.getresponse()
        read_until_generating(resp)
        # A second stream waits for the engine.
        queued = socket.create_connection(("127.0.0.1", fake.port), timeout=10)
        self.addCleanup(queued.close)
        queued.sendall(chat_request_bytes(fake.port, {"stream": True}))
        fake.wait_event("request", where=lambda e: e["in_flight"] == 2)
        fake.proc.send_signal(signal.SIGTERM)
        self.assertEqual(fake.wait_exit(timeout=5), 0)
        events = parse_sse(resp.read())
        c.close()
        self.assertEqual(events[-2:], [
            ("data", {"error": {"type": "server_error", "message":
                                "the engine stopped unexpectedly (exit code 0); "
                                "the next request restarts it"}}),
            ("data", "[DONE]")])
        self.assertTrue(all("usage" not in d for _, d in events[:-1]))
        quit_ = fake.wait_event("engine_exit")
        self.assertEqual((quit_["pid"], quit_["how"], quit_["code"], quit_["server_pid"]),
                         (engine_pid, "quit", 0, fake.proc.pid))
        names = [e["event"] for e in fake.events()]
        self.assertLess(names.index("stop"), names.index("engine_exit"))
        self.assertLess(names.index("engine_exit"), names.index("exit"))
        cancels = fake.events("cancel")
        self.assertEqual([e["reason"] for e in cancels], ["shutdown", "shutdown"],
                         fake.events())
        # The queued stream had its head and role frame, then the connection closed.
        rest = b""
        while True:
            try:
                b = queued.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            rest += b
        status, _, body = split_response(rest)
        self.assertTrue(status.startswith("HTTP/1.0 200"), status)
        self.assertEqual([kind for kind, _ in parse_sse(body)], ["data"])
        self.assertIsNone(fake.events("exit")[-1].get("reason"))

    def test_sigterm_to_the_group_ends_the_engine_by_its_signal(self):
        # How the router stopped backends before its stop signalled the server alone.
        fake = Fake(self)
        fake.wait_ready()
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        os.killpg(fake.proc.pid, signal.SIGTERM)
        self.assertEqual(fake.wait_exit(), 0)
        ended = fake.wait_event("engine_exit")
        self.assertEqual((ended["pid"], ended["how"], ended["code"]),
                         (engine_pid, "sigterm", -signal.SIGTERM))
        wait_until(lambda: _gone(engine_pid), 5, "the engine's end")

    def test_sigterm_while_loading_ends_the_server_by_the_signal(self):
        # As Strata, whose SIGTERM handler comes only once it serves; the engine sees EOF.
        fake = Fake(self, fake={"load_ms": 60000})
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        fake.proc.send_signal(signal.SIGTERM)
        self.assertEqual(fake.wait_exit(), -signal.SIGTERM)
        self.assertIsNone(fake.read_ready())
        self.assertEqual(fake.events("stop")[0]["loading"], True)
        self.assertEqual(fake.wait_event("engine_exit")["how"], "eof")
        wait_until(lambda: _gone(engine_pid), 5, "the engine's end")

    def test_ignore_sigterm_survives(self):
        fake = Fake(self, fake={"ignore_sigterm": True})
        fake.wait_ready()
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        fake.proc.send_signal(signal.SIGTERM)
        fake.wait_event("signal_ignored")
        self.assertIsNone(fake.proc.poll())
        r, body = fake.get("/health")
        self.assertEqual((r.status, json.loads(body)["loaded"]), (200, True))
        self.assertFalse(_gone(engine_pid))  # not told QUIT: only a group SIGKILL ends it
        self.assertEqual(fake.events("engine_exit"), [])
        os.killpg(fake.proc.pid, signal.SIGKILL)
        self.assertEqual(fake.wait_exit(), -signal.SIGKILL)
        wait_until(lambda: _gone(engine_pid), 5, "the engine's end")
        self.assertEqual(fake.events("engine_exit"), [])

    def test_mid_stream_die(self):
        fake = Fake(self)
        fake.wait_ready()
        r, body = fake.chat({"tokens": 5, "mid_stream": "die", "mid_stream_after": 2})
        self.assertEqual(r.status, 200)
        self.assertFalse(body.endswith(b"data: [DONE]\n\n"))
        datas = [d for _, d in parse_sse(body)]
        self.assertEqual(len(datas), 3)  # role + 2 content frames, then EOF
        self.assertEqual(fake.wait_exit(), 5)
        self.assertEqual(fake.events("exit")[-1]["code"], 5)

    def test_upstream_cli_has_no_ready_file(self):
        upstream = {"FAKE_STRATA_UPSTREAM_CLI": "1"}
        # Like argparse in the public serve/server.py: exit 2 on the unknown flag.
        fake = Fake(self, extra_env=upstream)
        self.assertEqual(fake.wait_exit(), 2)
        self.assertIn("unrecognized arguments: --ready-file", fake.stderr())
        # Without it, it serves, opening its port only once loaded.
        plain = Fake(self, fake={"load_ms": 100}, extra_env=upstream, ready_file=False)
        plain.wait_event("ready")
        response, body = plain.get("/health")
        self.assertEqual((response.status, json.loads(body)["loaded"]), (200, True))
        # --help lists the other flags, not --ready-file; without the variable it does.
        def help_text(env):
            return subprocess.run([sys.executable, "-m", "serve.server", "--help"], cwd=HERE,
                                  env=env, capture_output=True, text=True).stdout
        env = dict(os.environ, **upstream)
        self.assertIn("--idle-unload", help_text(env))
        self.assertNotIn("--ready-file", help_text(env))
        env.pop("FAKE_STRATA_UPSTREAM_CLI")
        self.assertIn("--ready-file", help_text(env))

    def test_start_failure_exit(self):
        fake = Fake(self, fake={"start_failure": "exit", "load_ms": 100})
        self.assertEqual(fake.wait_exit(), 3)
        fake2 = Fake(self, fake={"start_failure": "exit", "exit_code": 7})
        self.assertEqual(fake2.wait_exit(), 7)
        self.assertIsNone(fake.read_ready())
        self.assertIsNone(fake2.read_ready())

    def test_start_failure_hang(self):
        fake = Fake(self, fake={"start_failure": "hang"})
        fake.wait_event("start")
        # It never binds: keep probing for a while, the port stays closed and no ready file.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", fake.port), timeout=1)
            time.sleep(0.05)
        self.assertIsNone(fake.read_ready())
        self.assertIsNone(fake.proc.poll())
        fake.proc.send_signal(signal.SIGTERM)
        self.assertEqual(fake.wait_exit(), -signal.SIGTERM)

    def test_start_failure_wrong_identity(self):
        fakes = {f: Fake(self, fake={"start_failure": f}) for f in (
            "wrong_model_name", "wrong_pid", "wrong_port", "health_wrong_model",
            "health_not_loaded")}
        ready = dict((f, fake.wait_ready()) for f, fake in fakes.items())
        self.assertEqual(ready["wrong_model_name"]["model_name"], NAME + "-wrong")
        self.assertEqual(ready["wrong_pid"]["pid"], fakes["wrong_pid"].proc.pid + 1000000)
        self.assertEqual(ready["wrong_port"]["port"], fakes["wrong_port"].port + 1)
        health = json.loads(fakes["health_wrong_model"].get("/health")[1])
        self.assertEqual((health["model"], health["loaded"]), (NAME + "-wrong", True))
        health = json.loads(fakes["health_not_loaded"].get("/health")[1])
        self.assertEqual((health["model"], health["loaded"]), (NAME, False))
        for f in ("wrong_model_name", "wrong_pid", "wrong_port"):
            self.assertEqual(json.loads(fakes[f].get("/health")[1])["model"], NAME)

    def test_exit_after_ready(self):
        fake = Fake(self, fake={"start_failure": "exit_after_ready"})
        ready = fake.wait_ready()
        self.assertEqual(ready["pid"], fake.proc.pid)
        self.assertEqual(fake.wait_exit(), 4)

    def test_refusals_exit_2(self):
        lazy = Fake(self, profile={"lazy_load": True})
        self.assertEqual(lazy.wait_exit(), 2)
        self.assertIn("lazy_load", lazy.stderr())
        self.assertEqual(lazy.events("exit")[0]["code"], 2)
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        try:
            busy = Fake(self, port=holder.getsockname()[1])
            self.assertEqual(busy.wait_exit(), 2)
            self.assertIn("port %d is already in use" % busy.port, busy.stderr())
        finally:
            holder.close()
        unknown = Fake(self, args=["--config", "/nonexistent", "--no-such-flag"])
        self.assertEqual(unknown.wait_exit(), 2)
        badkey = Fake(self, fake={"tokenz": 3})
        self.assertEqual(badkey.wait_exit(), 2)
        self.assertIn("tokenz", badkey.stderr())

    def test_health_override_file_wedges_or_changes_health_while_serving(self):
        override_dir = tempfile.mkdtemp(prefix="fake-health-")
        self.addCleanup(shutil.rmtree, override_dir, True)
        path = os.path.join(override_dir, "health")
        fake = Fake(self, fake={"health_override_file": path})
        fake.wait_ready()
        r, body = fake.get("/health")
        self.assertEqual(json.loads(body)["model"], NAME)
        for text, key, value in (("wrong_model", "model", NAME + "-wrong"),
                                 ("not_loaded", "loaded", False)):
            with open(path, "w") as f:
                f.write(text + "\n")
            r, body = fake.get("/health")
            self.assertEqual(json.loads(body)[key], value)
        with open(path, "w") as f:
            f.write("hang")
        c = fake.conn(timeout=0.5)
        c.request("GET", "/health")
        with self.assertRaises(socket.timeout):
            c.getresponse()
        c.close()
        os.remove(path)
        r, body = fake.get("/health")
        self.assertEqual(json.loads(body)["loaded"], True)

    def test_read_weights_reads_the_whole_file_before_ready(self):
        weights_dir = tempfile.mkdtemp(prefix="fake-weights-")
        self.addCleanup(shutil.rmtree, weights_dir, True)
        path = os.path.join(weights_dir, "w.bin")
        with open(path, "wb") as f:
            f.write(b"w" * (9 << 20))
        fake = Fake(self, fake={"read_weights": path})
        fake.wait_ready()
        read = fake.events("weights_read")
        self.assertEqual(len(read), 1)
        self.assertEqual(read[0]["bytes"], 9 << 20)
        names = [e["event"] for e in fake.events()]
        self.assertLess(names.index("weights_read"), names.index("ready"))
        missing = Fake(self, fake={"read_weights": os.path.join(weights_dir, "none")})
        self.assertEqual(missing.wait_exit(), 1)
        self.assertIn("cannot read the weights", missing.stderr())

    def test_cache_lookup_disabled_and_min_tokens(self):
        off = Fake(self, fake={"cache_lookup": False})
        on = Fake(self, profile={"conversation_cache_min_tokens": 4096})
        off.wait_ready()
        on.wait_ready()
        r, body = off.post("/v1/cache/lookup", {"requests": []})
        self.assertEqual(r.status, 404)
        r, body = on.post("/v1/cache/lookup", {"requests": []})
        self.assertEqual(json.loads(body), {"min_tokens": 4096, "results": []})

    def test_cache_lookup_bad_replies(self):
        bad = Fake(self, fake={"cache_lookup_reply": "malformed"})
        short = Fake(self, fake={"cache_lookup_reply": "missing_id"})
        bad.wait_ready()
        short.wait_ready()
        two = {"requests": [{"id": "1", "body": {"model": "m"}}, {"id": "2", "body": {"model": "m"}}]}
        r, body = bad.post("/v1/cache/lookup", two)
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(body), {"min_tokens": "many", "results": "none"})
        r, body = short.post("/v1/cache/lookup", two)
        self.assertEqual([item["id"] for item in json.loads(body)["results"]], ["2"])

    def test_large_stream(self):
        fake = Fake(self)
        fake.wait_ready()
        r, body = fake.chat({"tokens": 10000, "content_bytes": 1000})
        self.assertGreater(len(body), 10 * 1000 * 1000)
        datas = [d for _, d in parse_sse(body)]
        self.assertEqual(datas[-1], "[DONE]")
        self.assertEqual(datas[-2]["usage"]["completion_tokens"], 10000)
        self.assertEqual(len(datas[5]["choices"][0]["delta"]["content"]), 1000)


class EngineTests(unittest.TestCase):
    """The engine child, one generation at a time, idle unload and a dead engine."""

    def test_engine_is_a_child_in_the_server_group(self):
        fake = Fake(self)
        fake.wait_ready()
        started = fake.wait_event("engine_start")
        engine_pid = started["engine_pid"]
        self.assertEqual((started["pid"], started["restart"]), (fake.proc.pid, False))
        self.assertEqual(os.getpgid(engine_pid), fake.proc.pid)
        with open("/proc/%d/stat" % engine_pid) as f:
            self.assertEqual(int(f.read().split(")")[-1].split()[1]), fake.proc.pid)
        with open("/proc/%d/cmdline" % engine_pid, "rb") as f:
            argv = f.read().split(b"\0")
        self.assertIn(b"serve.script", argv)
        self.assertIn(fake.profile_path.encode(), argv)  # names the test's directory
        # The load is the engine's: the port opened only after its READY.
        names = [e["event"] for e in fake.events()]
        self.assertLess(names.index("engine_start"), names.index("ready"))

    def test_engine_ends_on_eof_when_its_server_dies(self):
        fake = Fake(self)
        fake.wait_ready()
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        fake.proc.send_signal(signal.SIGKILL)
        self.assertEqual(fake.wait_exit(), -signal.SIGKILL)
        ended = fake.wait_event("engine_exit")
        self.assertEqual((ended["pid"], ended["how"]), (engine_pid, "eof"))
        wait_until(lambda: _gone(engine_pid), 5, "the engine's end")

    def test_start_failures_are_the_engines(self):
        fake = Fake(self, fake={"start_failure": "exit", "exit_code": 7})
        self.assertEqual(fake.wait_exit(), 7)
        ended = fake.wait_event("engine_exit")
        self.assertEqual((ended["how"], ended["code"]), ("start_failure", 7))
        self.assertEqual(fake.events("exit")[-1]["reason"], "start_failure exit")
        hang = Fake(self, fake={"start_failure": "hang"})
        hang.wait_event("engine_start")
        hang.proc.send_signal(signal.SIGTERM)
        self.assertEqual(hang.wait_exit(), -signal.SIGTERM)
        self.assertEqual(hang.wait_event("engine_exit")["how"], "eof")

    def test_one_generation_at_a_time_and_a_waiting_request_gets_no_byte(self):
        fake = Fake(self)
        fake.wait_ready()
        c = fake.conn()
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat_body(
            {"stream": True, "fake": {"tokens": 8, "token_delay_ms": 250}})).encode())
        first = c.getresponse()
        read_until_generating(first)
        # A stream behind it gets its head and role frame, then nothing while it waits.
        waiting_stream = socket.create_connection(("127.0.0.1", fake.port), timeout=10)
        self.addCleanup(waiting_stream.close)
        waiting_stream.sendall(chat_request_bytes(fake.port, {"stream": True, "fake": {
            "tokens": 1}}))
        head = b""
        while b"chat.completion.chunk" not in head or not head.endswith(b"\n\n"):
            b = waiting_stream.recv(65536)
            self.assertTrue(b)
            head += b
        self.assertTrue(head.startswith(b"HTTP/1.0 200"), head[:40])
        fake.wait_event("request", where=lambda e: e["in_flight"] == 2)
        # A non-stream behind both gets no byte at all.
        waiting_json = socket.create_connection(("127.0.0.1", fake.port), timeout=10)
        self.addCleanup(waiting_json.close)
        waiting_json.sendall(chat_request_bytes(fake.port, {"stream": False, "fake": {
            "tokens": 1}}))
        fake.wait_event("request", where=lambda e: e["in_flight"] == 3)
        for sock in (waiting_stream, waiting_json):
            sock.settimeout(0.3)
            with self.assertRaises(socket.timeout):
                sock.recv(1)
            sock.settimeout(10)
        self.assertEqual(fake.events("response_done"), [])
        self.assertTrue(first.read().endswith(b"data: [DONE]\n\n"))
        c.close()
        rest = b""
        while not rest.endswith(b"data: [DONE]\n\n"):
            b = waiting_stream.recv(65536)
            self.assertTrue(b)
            rest += b
        answer = b""
        while True:
            b = waiting_json.recv(65536)
            if not b:
                break
            answer += b
        status, _, body = split_response(answer)
        self.assertTrue(status.startswith("HTTP/1.0 200"), status)
        self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 1)
        done = wait_until(lambda: len(fake.events("response_done")) == 3 and
                          fake.events("response_done"), 5, "three answers")
        # The engine served them in arrival order (the events are logged after each last
        # byte, which comes after the engine is released, so their order in the log varies).
        done.sort(key=lambda e: e["engine_turn"])
        self.assertEqual([(e["engine_turn"], e["stream"]) for e in done],
                         [(1, True), (2, True), (3, False)])
        self.assertLess(done[0]["engine_wait_ms"], 100)
        self.assertGreater(done[1]["engine_wait_ms"], 600)
        self.assertGreater(done[2]["engine_wait_ms"], 300)

    def test_a_dead_engine_leaves_the_server_up_and_the_next_request_restarts_it(self):
        fake = Fake(self, fake={"load_ms": 300})
        fake.wait_ready()
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        c = fake.conn()
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat_body(
            {"stream": True, "fake": {"tokens": 1000, "token_delay_ms": 20}})).encode())
        resp = c.getresponse()
        read_until_generating(resp)
        os.kill(engine_pid, signal.SIGKILL)
        events = parse_sse(resp.read())
        c.close()
        self.assertEqual(events[-2:], [
            ("data", {"error": {"type": "server_error", "message":
                                "the engine stopped unexpectedly (exit code -9); "
                                "the next request restarts it"}}),
            ("data", "[DONE]")])
        done = fake.wait_event("response_done")
        self.assertEqual((done["status"], done["mid_stream"]), (200, "engine_died"))
        died = fake.wait_event("engine_died")
        self.assertEqual((died["engine_pid"], died["code"]), (engine_pid, -9))
        self.assertIsNone(fake.proc.poll())
        r, body = fake.get("/health")
        health = json.loads(body)
        self.assertEqual((r.status, health["loaded"], health["model"]), (200, False, NAME))
        self.assertEqual(json.loads(fake.get("/v1/models")[1]), {"object": "list", "data": []})
        # The next request starts the engine again (its load_ms) and is served.
        t0 = time.monotonic()
        r, body = fake.chat({"tokens": 1}, stream=False)
        self.assertEqual(r.status, 200)
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        starts = fake.events("engine_start")
        self.assertEqual([e["restart"] for e in starts], [False, True])
        self.assertNotEqual(starts[1]["engine_pid"], engine_pid)
        self.assertEqual(json.loads(fake.get("/health")[1])["loaded"], True)
        self.assertEqual(json.loads(fake.get("/v1/models")[1])["data"][0]["status"],
                         {"value": "loaded"})

    def test_profile_idle_unload_applies_without_the_flag(self):
        fake = Fake(self, profile={"idle_unload_s": 1}, idle_unload=None)
        fake.wait_ready()
        engine_pid = fake.wait_event("engine_start")["engine_pid"]
        unload = fake.wait_event("idle_unload", timeout=10)
        self.assertEqual((unload["engine_pid"], unload["idle_unload_s"]), (engine_pid, 1.0))
        ended = fake.wait_event("engine_exit")
        self.assertEqual((ended["pid"], ended["how"]), (engine_pid, "quit"))
        health = json.loads(fake.get("/health")[1])
        self.assertEqual(health["loaded"], False)
        models = json.loads(fake.get("/v1/models")[1])["data"]
        self.assertEqual([m["status"] for m in models], [{"value": "unloaded"}])
        r, body = fake.chat({"tokens": 1}, stream=False)
        self.assertEqual(r.status, 200)
        self.assertEqual([e["restart"] for e in fake.events("engine_start")], [False, True])
        self.assertEqual(json.loads(fake.get("/health")[1])["loaded"], True)

    def test_idle_unload_flag_overrides_the_profile(self):
        fake = Fake(self, profile={"idle_unload_s": 1})  # with --idle-unload 0
        fake.wait_ready()
        self.assertEqual(fake.events("start")[0]["idle_unload"], 0.0)
        # The profile's unload would come within about 2 s; none comes in 3 s.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            self.assertEqual(json.loads(fake.get("/health")[1])["loaded"], True)
            time.sleep(0.1)
        self.assertEqual(fake.events("idle_unload"), [])
        self.assertEqual(fake.events("engine_exit"), [])


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone once it is no longer running.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


if __name__ == "__main__":
    unittest.main()
