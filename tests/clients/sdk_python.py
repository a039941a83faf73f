"""The router as the OpenAI Python SDK (sync and async), httpx-sse, litellm and langchain-openai
see it.

Run by tests/tests/client_sdks.rs against a router on the fake backend:

    python sdk_python.py BASE_URL SCENARIO.json

SCENARIO names the models the harness configured (see client_sdks.rs). Every check raises on a
mismatch; the last line printed is a JSON summary the harness reads (how many failed loads
each client asked for, how many streams it cancelled). Exit status 0 only if all passed.
"""

import asyncio
import json
import os
import sys

import httpx
import openai
from httpx_sse import connect_sse
from openai import APIError, AsyncOpenAI, BadRequestError, InternalServerError, OpenAI

MESSAGES = [{"role": "user", "content": "hello"}]


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def content_of(chunks):
    text = ""
    for chunk in chunks:
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                text += choice.delta.content
    return text


def run_sync(base, sc, summary):
    client = OpenAI(base_url=base + "/v1", api_key="unused", timeout=60)

    ids = {model.id for model in client.models.list()}
    check(sc["concrete"] in ids and sc["alias"] in ids, f"models.list: {sorted(ids)}")

    for model in (sc["concrete"], sc["alias"]):
        reply = client.chat.completions.create(model=model, messages=MESSAGES)
        check(reply.choices[0].message.content, f"non-stream {model}: {reply}")
        chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, stream=True))
        check(content_of(chunks), f"stream {model}: no content")

    # The x-strata-* headers through the raw-response API, and the tiers.
    for tier in ("priority", "flex", "fast"):
        raw = client.chat.completions.with_raw_response.create(
            model=sc["alias"], messages=MESSAGES, service_tier=tier
        )
        check(raw.headers.get("x-strata-request-id"), "x-strata-request-id")
        check(raw.headers.get("x-strata-concrete-model") == sc["concrete"], "concrete model")
        expected = "priority" if tier == "fast" else tier
        check(raw.headers.get("x-strata-service-tier") == expected, f"tier {tier}: {raw.headers}")
        check(raw.parse().choices, "parsed reply")

    # Streamed tool calls.
    chunks = list(
        client.chat.completions.create(
            model=sc["concrete"],
            messages=MESSAGES,
            stream=True,
            extra_body={"fake": {"tool_call": True}},
        )
    )
    calls = [
        call
        for chunk in chunks
        for choice in chunk.choices
        for call in (choice.delta.tool_calls or [])
    ]
    check(calls, "streamed tool calls")
    check(
        any(choice.finish_reason == "tool_calls" for chunk in chunks for choice in chunk.choices),
        "finish_reason tool_calls",
    )

    # A backend 400 on a stream arrives within the header hold: a real status.
    try:
        client.chat.completions.create(
            model=sc["concrete"],
            messages=MESSAGES,
            stream=True,
            extra_body={"fake": {"error_status": 400}},
        )
        raise AssertionError("an upstream 400 must raise")
    except BadRequestError as err:
        check(err.status_code == 400, f"400: {err.status_code}")

    # A load that fails fast (within the hold): InternalServerError 503, and no retry (the
    # harness counts one launch per request).
    for stream in (True, False):
        try:
            result = client.chat.completions.create(
                model=sc["broken"], messages=MESSAGES, stream=stream
            )
            if stream:
                list(result)
            raise AssertionError("a failed load must raise")
        except InternalServerError as err:
            check(err.status_code == 503, f"503: {err.status_code}")
            check(err.response.headers.get("x-should-retry") == "false", "x-should-retry")
        summary["failed_loads"] += 1

    # A load that fails after the head went out (with the first keepalive): the base APIError,
    # the status in the error frame.
    try:
        list(client.chat.completions.create(model=sc["broken_slow"], messages=MESSAGES, stream=True))
        raise AssertionError("a failed load after the headers must raise")
    except InternalServerError:
        raise AssertionError("after the headers there is no HTTP status to raise")
    except APIError as err:
        check(err.body and err.body.get("status") == 503, f"in-band status: {err.body}")
    summary["failed_loads"] += 1

    # A stream that waits through a 7 s load (keepalives while it waits).
    chunks = list(client.chat.completions.create(model=sc["slow"], messages=MESSAGES, stream=True))
    check(content_of(chunks), "stream through a slow load")

    # A cancelled stream; the next request is fine.
    stream = client.chat.completions.create(
        model=sc["concrete"],
        messages=MESSAGES,
        stream=True,
        extra_body={"fake": {"tokens": 40, "token_delay_ms": 50}},
    )
    next(iter(stream))
    stream.close()
    summary["cancelled"] += 1
    reply = client.chat.completions.create(model=sc["concrete"], messages=MESSAGES)
    check(reply.choices[0].message.content, "after a cancel")


async def run_async(base, sc, summary):
    client = AsyncOpenAI(base_url=base + "/v1", api_key="unused", timeout=60)
    ids = {model.id async for model in client.models.list()}
    check(sc["alias"] in ids, "async models.list")
    stream = await client.chat.completions.create(model=sc["alias"], messages=MESSAGES, stream=True)
    chunks = [chunk async for chunk in stream]
    check(content_of(chunks), "async stream")
    try:
        await client.chat.completions.create(model=sc["broken"], messages=MESSAGES, stream=True)
        raise AssertionError("async: a failed load must raise")
    except InternalServerError as err:
        check(err.status_code == 503, f"async 503: {err.status_code}")
    summary["failed_loads"] += 1

    async def read_forever():
        stream = await client.chat.completions.create(
            model=sc["concrete"],
            messages=MESSAGES,
            stream=True,
            extra_body={"fake": {"tokens": 40, "token_delay_ms": 50}},
        )
        async for _ in stream:
            pass

    task = asyncio.ensure_future(read_forever())
    await asyncio.sleep(0.5)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    summary["cancelled"] += 1
    reply = await client.chat.completions.create(model=sc["concrete"], messages=MESSAGES)
    check(reply.choices[0].message.content, "async after a cancel")
    await client.close()


def run_httpx_sse(base, sc, summary):
    # A raw SSE client with a read timeout above the keepalive period (README).
    timeout = httpx.Timeout(10.0)
    body = {"model": sc["concrete"], "messages": MESSAGES, "stream": True}
    with httpx.Client(timeout=timeout) as client:
        with connect_sse(client, "POST", base + "/v1/chat/completions", json=body) as source:
            check(source.response.status_code == 200, "httpx-sse status")
            data = [event.data for event in source.iter_sse()]
    check(data and data[-1] == "[DONE]", f"httpx-sse frames: {data[-3:]}")
    check(any("content" in d for d in data[:-1]), "httpx-sse content")


def run_litellm(base, sc, summary):
    # litellm as a client of an OpenAI-compatible base (its `openai/` provider prefix). Its
    # bundled model price map, not a download at import.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    common = {"api_base": base + "/v1", "api_key": "unused", "messages": MESSAGES}
    reply = litellm.completion(model="openai/" + sc["alias"], **common)
    check(reply.choices[0].message.content, "litellm non-stream")
    chunks = list(litellm.completion(model="openai/" + sc["concrete"], stream=True, **common))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    check(text, "litellm stream")
    try:
        litellm.completion(model="openai/" + sc["broken"], **common)
        raise AssertionError("litellm: a failed load must raise")
    except litellm.exceptions.ServiceUnavailableError as err:
        check(err.status_code == 503, f"litellm 503: {err!r}")
    summary["failed_loads"] += 1
    summary["litellm"] = litellm.__version__ if hasattr(litellm, "__version__") else "?"


def run_langchain(base, sc, summary):
    # langchain-openai's ChatOpenAI on top of the openai SDK (its default max_retries is 2).
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["alias"], timeout=60)
    check(chat.invoke("hello").content, "langchain invoke")
    text = "".join(chunk.content for chunk in chat.stream("hello"))
    check(text, "langchain stream")
    broken = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["broken"], timeout=60)
    try:
        "".join(chunk.content for chunk in broken.stream("hello"))
        raise AssertionError("langchain: a failed load must raise")
    except InternalServerError as err:
        check(err.status_code == 503, f"langchain 503: {err.status_code}")
    summary["failed_loads"] += 1


def main():
    base, scenario = sys.argv[1], sys.argv[2]
    with open(scenario, encoding="utf-8") as handle:
        sc = json.load(handle)
    summary = {"failed_loads": 0, "cancelled": 0, "openai": openai.__version__}
    run_sync(base, sc, summary)
    asyncio.run(run_async(base, sc, summary))
    run_httpx_sse(base, sc, summary)
    run_litellm(base, sc, summary)
    run_langchain(base, sc, summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
