#!/usr/bin/env python3
"""A stand-in for Strata's native engine (`strata --serve`), for running the public Strata server in tests.

The server starts a profile's "exe" as `EXE --serve ARGS...` with pipes on stdin and stdout and the profile's
log file as stderr, then speaks a line protocol with it.  This program speaks the engine's side of it without
a model: it loads nothing, answers every GEN with a short scripted reply, and records what happened to it in
an optional JSON-lines event log so a test can see how it was stopped.

Engine -> server (stdout, one line each, flushed):
    INFO engine=standin            once at start
    READY <ctx> stop               after --load-ms; "stop" = STOP is honoured mid-request
    PP <read> <total> 0 <tok/s>    prompt progress, once per GEN (unless --no-progress)
    T <id>                         one generated token
    DONE <generated> <prompt_tokens> <prompt_ms> <decode_ms> <finish> <drafts_accepted> <drafts_offered>
         <reused> <hits> <lookups> <ram_blobs> <file_blobs> <file_mb> <prompt_read>      (one line, 15 fields)
    RELEASED 0 0 0.0 / REFILLED 0 0.0                   answers to RELEASE / REFILL
Server -> engine (stdin):
    GEN <max_new>[ key=value ...] <id,id,...>     (GENI is treated the same way)
    STOP      end the current generation: DONE with finish "cancel" follows; ignored when idle
    QUIT      exit 0 at once (also mid-generation: the server then sees its output close)
    RELEASE / REFILL
    end of input: exit 0

Options (all optional; unknown options, such as --max-context, are accepted and ignored):
    --load-ms N        sleep N ms before READY (default 0); STOP/QUIT/EOF are still noticed meanwhile
    --ctx N            the context size READY reports (default 8192)
    --token-ms N       delay before each generated token (default 0)
    --tokens N         content tokens per reply before the end-of-turn token (default 8)
    --prompt-ms N      the prompt read time reported in DONE (default 5)
    --tokenizer DIR    the tokenizer directory (vocab.json) the server uses; without it the reply is raw byte ids
                       0..255 (valid in make_tokenizer.py's layout) and no end-of-turn token is sent
    --events PATH      append {"event", "pid", "ts", ...} JSON lines: start, ready, gen, stop, done, quit,
                       sigterm, eof, fail_start
    --fail-start MSG   write MSG to stderr and exit 1 before READY
    --ignore-sigterm   record SIGTERM but keep running (default: record it and exit 143)
    --no-progress      send no PP line

Stdlib only; Python 3.9+.  Written for strata-router's tests from the protocol, not from Strata's code.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time

EOF = object()


class Options:
    def __init__(self, argv: list[str]):
        self.load_ms = 0.0
        self.ctx = 8192
        self.token_ms = 0.0
        self.tokens = 8
        self.prompt_ms = 5.0
        self.tokenizer = None
        self.events = None
        self.fail_start = None
        self.ignore_sigterm = False
        self.progress = True
        self.ignored: list[str] = []
        takes = {"--load-ms": ("load_ms", float), "--ctx": ("ctx", int), "--token-ms": ("token_ms", float),
                 "--tokens": ("tokens", int), "--prompt-ms": ("prompt_ms", float), "--tokenizer": ("tokenizer", str),
                 "--events": ("events", str), "--fail-start": ("fail_start", str)}
        i = 0
        while i < len(argv):
            arg = argv[i]
            name, eq, inline = arg.partition("=")
            if name in takes:
                attr, conv = takes[name]
                if eq:
                    value = inline
                else:
                    if i + 1 >= len(argv):
                        raise SystemExit(f"standin engine: {name} needs a value")
                    i += 1
                    value = argv[i]
                setattr(self, attr, conv(value))
            elif arg == "--ignore-sigterm":
                self.ignore_sigterm = True
            elif arg == "--no-progress":
                self.progress = False
            else:
                self.ignored.append(arg)          # --serve, and whatever else a profile passes
            i += 1


class EventLog:
    def __init__(self, path: str | None):
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, event: str, **fields) -> None:
        if not self.path:
            return
        record = {"event": event, "pid": os.getpid(), "ts": time.time(), **fields}
        line = json.dumps(record) + "\n"
        with self.lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)


class Reply:
    """The token ids of the scripted answer."""

    def __init__(self, tokenizer_dir: str | None):
        self.vocab: dict[str, int] = {}
        if tokenizer_dir:
            with open(os.path.join(tokenizer_dir, "vocab.json"), encoding="utf-8") as f:
                self.vocab = json.load(f)
        self.stop_id = self.vocab.get("<|im_end|>")
        self.think_open = self.vocab.get("<think>")
        self.think_close = self.vocab.get("</think>")
        words = ["Hello", " from", " the", " stand", "-in", " engine", "."]
        if self.vocab:
            self.content = [self.encode_word(w) for w in words]
            self.blank = self.encode_word("\n\n")
        else:
            self.content = [[b] for b in "Hello from the stand-in engine. ".encode("utf-8")]
            self.blank = [10, 10]

    def encode_word(self, word: str) -> list[int]:
        """Greedy longest match over the vocabulary, in the byte-level spelling (space -> U+0120 and so on)."""
        spelled = "".join(byte_char(b) for b in word.encode("utf-8"))
        out, i = [], 0
        while i < len(spelled):
            for j in range(len(spelled), i, -1):
                if spelled[i:j] in self.vocab:
                    out.append(self.vocab[spelled[i:j]])
                    i = j
                    break
            else:
                raise SystemExit(f"standin engine: {spelled[i]!r} is not in the tokenizer's vocabulary")
        return out

    def ids(self, prompt: list[int], count: int) -> list[int]:
        """`count` content ids (words repeated as needed), preceded by the end of the thinking when the prompt left
        it open (its last <think> comes after its last </think>), and followed by the end-of-turn id when known."""
        out: list[int] = []
        if self.think_open is not None and self.think_close is not None:
            last_open = max((k for k, t in enumerate(prompt) if t == self.think_open), default=-1)
            last_close = max((k for k, t in enumerate(prompt) if t == self.think_close), default=-1)
            if last_open > last_close:
                out += [self.think_close] + self.blank
        flat = [t for word in self.content for t in word]
        body = [flat[k % len(flat)] for k in range(max(0, count))]
        out += body
        if self.stop_id is not None:
            out.append(self.stop_id)
        return out


def byte_char(b: int) -> str:
    visible = (0x21 <= b <= 0x7E) or (0xA1 <= b <= 0xAC) or (0xAE <= b <= 0xFF)
    if visible:
        return chr(b)
    shifted = sum(1 for x in range(b) if not ((0x21 <= x <= 0x7E) or (0xA1 <= x <= 0xAC) or (0xAE <= x <= 0xFF)))
    return chr(0x100 + shifted)


class Engine:
    def __init__(self, opts: Options):
        self.opts = opts
        self.log = EventLog(opts.events)
        self.inbox: queue.Queue = queue.Queue()
        self.out_lock = threading.Lock()

    # ---------------------------------------------------------------- io
    def send(self, line: str) -> None:
        with self.out_lock:
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError):
                self.log("eof", where="stdout")
                os._exit(0)

    def read_stdin(self) -> None:
        for raw in sys.stdin:
            self.inbox.put(raw.rstrip("\r\n"))
        self.inbox.put(EOF)

    def finish(self, event: str, code: int, **fields) -> None:
        self.log(event, **fields)
        try:
            sys.stdout.flush()
        except OSError:
            pass
        os._exit(code)

    def control(self, line) -> str | None:
        """Handle a line that ends or interrupts work: returns "stop" for STOP, exits for QUIT and EOF, else None."""
        if line is EOF:
            self.finish("eof", 0)
        word = line.split(" ", 1)[0]
        if word == "QUIT":
            self.finish("quit", 0)
        if word == "STOP":
            return "stop"
        return None

    # ---------------------------------------------------------------- lifecycle
    def on_sigterm(self, signum, frame) -> None:
        if self.opts.ignore_sigterm:
            self.log("sigterm", ignored=True)
            return
        self.finish("sigterm", 143)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        self.log("start", argv=sys.argv[1:])
        if self.opts.fail_start is not None:
            sys.stderr.write(self.opts.fail_start + "\n")
            sys.stderr.flush()
            self.log("fail_start")
            return 1
        reply = Reply(self.opts.tokenizer)
        threading.Thread(target=self.read_stdin, daemon=True).start()
        self.send("INFO engine=standin")
        deadline = time.monotonic() + self.opts.load_ms / 1000.0
        pending = []
        while True:                                  # loading: commands are kept, QUIT and EOF end it
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                line = self.inbox.get(timeout=left)
            except queue.Empty:
                break
            if self.control(line) is None:
                pending.append(line)
        sys.stderr.write(f"standin engine: ready, context {self.opts.ctx}\n")
        sys.stderr.flush()
        self.send(f"READY {self.opts.ctx} stop")
        self.log("ready", ctx=self.opts.ctx)
        while True:
            line = pending.pop(0) if pending else self.inbox.get()
            if self.control(line) is not None:       # a STOP while idle: nothing to stop (the server sends one
                self.log("stop", idle=True)           # after every reply that ended with the end-of-turn token)
                continue
            word = line.split(" ", 1)[0]
            if word in ("GEN", "GENI"):
                self.generate(line, reply, pending)
            elif word == "RELEASE":
                self.send("RELEASED 0 0 0.0")
            elif word == "REFILL":
                self.send("REFILLED 0 0.0")
            elif line.strip():
                sys.stderr.write(f"standin engine: unknown command {word!r}\n")
                sys.stderr.flush()

    def generate(self, line: str, reply: Reply, pending: list) -> None:
        fields = line.split()
        try:
            max_new = int(fields[1])
            prompt = [int(x) for x in fields[-1].split(",") if x] if len(fields) > 2 else []
        except (IndexError, ValueError):
            sys.stderr.write(f"standin engine: bad GEN line ({len(line)} chars)\n")
            sys.stderr.flush()
            self.send("ERR bad GEN line")
            return
        self.log("gen", max_new=max_new, prompt_tokens=len(prompt))
        if self.opts.progress and prompt:
            self.send(f"PP {len(prompt)} {len(prompt)} 0 5000.0")
        ids = reply.ids(prompt, min(self.opts.tokens, max_new))
        started = time.monotonic()
        sent, finish = 0, "stop"
        for t in ids:
            if sent >= max_new:
                finish = "length"
                break
            wait_until = time.monotonic() + self.opts.token_ms / 1000.0
            stopped = False
            while True:                               # the token delay, watching for STOP / QUIT / EOF
                left = wait_until - time.monotonic()
                try:
                    cmd = self.inbox.get(timeout=left) if left > 0 else self.inbox.get_nowait()
                except queue.Empty:
                    break
                if self.control(cmd) == "stop":
                    stopped = True
                    break
                pending.append(cmd)                   # anything else waits for this request to end
            if stopped:
                finish = "cancel"
                self.log("stop", generated=sent)
                break
            self.send(f"T {t}")
            sent += 1
        else:
            if reply.stop_id is None and sent >= max_new:
                finish = "length"
        decode_ms = (time.monotonic() - started) * 1000.0
        n = len(prompt)
        self.send(f"DONE {sent} {n} {self.opts.prompt_ms:.1f} {decode_ms:.1f} {finish} 0 0 0 0 0 0 0 0.0 {n}")
        self.log("done", generated=sent, finish=finish)


def main() -> int:
    opts = Options(sys.argv[1:])
    return Engine(opts).run()


if __name__ == "__main__":
    sys.exit(main())
