#!/usr/bin/env python3
"""Write a Strata profile (the server's --config JSON) that runs standin_engine.py as the native engine.

    python3 make_profile.py --out DIR/profile.json --model-name NAME [--alias A ...] [--log PATH]
                            [--tokenizer DIR] [--events PATH] [--engine-arg ARG ...]
                            [--load-ms N] [--ctx N] [--token-ms N] [--tokens N] [--fail-start MSG]
                            [--ignore-sigterm]

Defaults put everything next to --out: the tokenizer directory (written with make_tokenizer.py when it has no
vocab.json), the engine's log (`engine.log`, the profile's "log": the engine's stderr goes there) and the event
log (`events.jsonl`).  Prints the profile's path.

The profile's keys and why:
    exe            this directory's standin_engine.py, absolute and executable: the server runs `EXE --serve ARGS`,
                   so "exe" cannot be an interpreter with the script in "args" (the interpreter would get --serve)
    args           the stand-in's options (a list; the server requires the key)
    log            the engine's stderr, appended; a failed start's reason is only here
    tokenizer      the directory with vocab.json, merges.txt and token_type.json (no vocab.json: the server exits)
    model_name     what /health, /v1/models and responses call the model
    aliases        other names (a list); a response's "model" is the asked name only when it is one of these
    idle_unload_s  0: never unload (the router passes --idle-unload 0 anyway)

Stdlib only; Python 3.9+.  Importable: `profile(...)` returns the dict, `write(...)` writes it.
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.join(HERE, "standin_engine.py")
sys.path.insert(0, HERE)
import make_tokenizer  # noqa: E402


def engine_args(tokenizer: str, events: str | None = None, load_ms: float = 0, ctx: int = 8192,
                token_ms: float = 0, tokens: int = 8, fail_start: str | None = None,
                ignore_sigterm: bool = False, extra: list[str] | None = None) -> list[str]:
    args = ["--tokenizer", tokenizer, "--load-ms", f"{load_ms:g}", "--ctx", str(ctx),
            "--token-ms", f"{token_ms:g}", "--tokens", str(tokens)]
    if events:
        args += ["--events", events]
    if fail_start is not None:
        args += ["--fail-start", fail_start]
    if ignore_sigterm:
        args.append("--ignore-sigterm")
    return args + list(extra or [])


def profile(model_name: str, tokenizer: str, log: str, args: list[str], aliases: list[str] | None = None,
            cwd: str | None = None) -> dict:
    cfg = {"exe": ENGINE, "args": args, "log": log, "tokenizer": tokenizer, "model_name": model_name,
           "aliases": list(aliases or []), "idle_unload_s": 0}
    if cwd:
        cfg["cwd"] = cwd
    return cfg


def write(out: str, model_name: str, aliases=None, log=None, tokenizer=None, events=None, **engine) -> str:
    out = os.path.abspath(out)
    base = os.path.dirname(out)
    os.makedirs(base, exist_ok=True)
    tokenizer = os.path.abspath(tokenizer or os.path.join(base, "tokenizer"))
    if not os.path.exists(os.path.join(tokenizer, "vocab.json")):
        make_tokenizer.write(tokenizer)
    log = os.path.abspath(log or os.path.join(base, "engine.log"))
    events = os.path.abspath(events) if events else os.path.join(base, "events.jsonl")
    mode = os.stat(ENGINE).st_mode
    if not mode & stat.S_IXUSR:                 # a checkout without the executable bit
        os.chmod(ENGINE, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    cfg = profile(model_name, tokenizer, log, engine_args(tokenizer, events, **engine), aliases)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Write a Strata profile that runs the stand-in engine.")
    ap.add_argument("--out", required=True, help="the profile to write (JSON)")
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--alias", action="append", default=[], help="another name of the model (repeatable)")
    ap.add_argument("--log", help="the engine's log (default: engine.log next to --out)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: tokenizer/ next to --out, made if missing)")
    ap.add_argument("--events", help="the engine's event log (default: events.jsonl next to --out)")
    ap.add_argument("--load-ms", type=float, default=0)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--token-ms", type=float, default=0)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--fail-start", default=None)
    ap.add_argument("--ignore-sigterm", action="store_true")
    ap.add_argument("--engine-arg", action="append", default=[], help="one more engine argument (repeatable)")
    a = ap.parse_args()
    path = write(a.out, a.model_name, aliases=a.alias, log=a.log, tokenizer=a.tokenizer, events=a.events,
                 load_ms=a.load_ms, ctx=a.ctx, token_ms=a.token_ms, tokens=a.tokens, fail_start=a.fail_start,
                 ignore_sigterm=a.ignore_sigterm, extra=a.engine_arg)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
