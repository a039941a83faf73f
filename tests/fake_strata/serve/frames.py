"""Builders for the response shapes of Strata's OpenAI chat endpoint."""

import json
import os
import time

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"
MAX_CONTEXT = 32768

TOOL_NAME = "get_weather"
TOOL_ARGUMENT_PIECES = ('{"city"', ': "Par', 'is"}')


def dumps(obj):
    """JSON as Strata writes its answers and SSE frames: Python's default `", "` and `": "`
    separators, non-ASCII text as is, on one line (json.dumps never emits a newline without
    indent)."""
    return json.dumps(obj, ensure_ascii=False)


def data_frame(obj):
    return b"data: " + dumps(obj).encode("utf-8") + b"\n\n"


def engine_error_frames(message):
    """What Strata writes when its engine ends under a stream: one error frame (plain
    json.dumps, so ASCII-escaped) and `[DONE]`, in one write."""
    err = {"error": {"type": "server_error", "message": message}}
    return b"data: " + json.dumps(err).encode("utf-8") + b"\n\n" + DONE


def error_body(etype, message):
    return {"error": {"type": etype, "message": message}}


def error_type_for(status):
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "forbidden",
        404: "not_found_error",
        409: "model_busy",
        413: "invalid_request_error",
        415: "invalid_request_error",
        502: "structured_output_failed",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")


def reasoning_text(i):
    return "hmm "


def content_text(i, content_bytes):
    """Text of the i-th content delta: "tok " or exactly content_bytes ASCII bytes."""
    if content_bytes is None:
        return "tok "
    return ("tok " * (content_bytes // 4 + 1))[:content_bytes]


def plan(params):
    """The generated deltas in order: (kind, value) with kind in
    reasoning | tool_start | tool_args | content."""
    for i in range(params["reasoning_tokens"]):
        yield ("reasoning", reasoning_text(i))
    if params["tool_call"]:
        yield ("tool_start", None)
        for piece in TOOL_ARGUMENT_PIECES:
            yield ("tool_args", piece)
    for i in range(params["tokens"]):
        yield ("content", content_text(i, params["content_bytes"]))


def usage(prompt, completion, cached):
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def timings(prompt, completion, cached, token_delay_ms):
    """llama.cpp-style timings with deterministic fractional milliseconds:
    prompt_ms = 0.5 * prompt_n + 0.25, predicted_ms = completion * max(token_delay_ms, 1.5) + 0.25."""
    prompt_n = prompt - cached
    prompt_ms = round(prompt_n * 0.5 + 0.25, 3)
    predicted_ms = round(completion * max(float(token_delay_ms), 1.5) + 0.25, 3)

    def per_token(ms, n):
        return round(ms / n, 3) if n else 0.0

    def per_second(ms, n):
        return round(n * 1000.0 / ms, 3) if n and ms else 0.0

    return {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per_token(prompt_ms, prompt_n),
        "prompt_per_second": per_second(prompt_ms, prompt_n),
        "predicted_n": completion,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per_token(predicted_ms, completion),
        "predicted_per_second": per_second(predicted_ms, completion),
    }


class Completion(object):
    """Identity shared by every chunk of one response."""

    def __init__(self, model, fixed_ids=False):
        if fixed_ids:
            # Deterministic identity, so two identical requests get byte-identical answers.
            self.id = "chatcmpl-" + "0" * 24
            self.call_id = "call_" + "0" * 24
            self.created = 0
        else:
            self.id = "chatcmpl-" + os.urandom(12).hex()
            self.call_id = "call_" + os.urandom(12).hex()
            self.created = int(time.time())
        self.model = model

    def chunk(self, delta, finish_reason=None, **extra):
        obj = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        obj.update(extra)
        return obj

    def delta_for(self, kind, value):
        if kind == "reasoning":
            return {"reasoning_content": value}
        if kind == "content":
            return {"content": value}
        if kind == "tool_start":
            return {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": self.call_id,
                        "type": "function",
                        "function": {"name": TOOL_NAME, "arguments": ""},
                    }
                ]
            }
        if kind == "tool_args":
            return {"tool_calls": [{"index": 0, "function": {"arguments": value}}]}
        raise AssertionError(kind)

    def message(self, content, reasoning, tool_call):
        msg = {"role": "assistant", "content": content}
        if reasoning:
            msg["reasoning_content"] = reasoning
        if tool_call:
            msg["tool_calls"] = [
                {
                    "id": self.call_id,
                    "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": "".join(TOOL_ARGUMENT_PIECES)},
                }
            ]
        return msg

    def response(self, message, finish_reason, **extra):
        obj = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        obj.update(extra)
        return obj
