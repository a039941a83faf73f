"""The router as the OpenAI Python SDK (sync and async), httpx-sse, litellm and langchain-openai
see it.

Run by tests/tests/e2e/client_sdks.rs against a router on the fake backend:

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
    # A raw SSE client with a read timeout above the keepalive period
    # (docs/http-api.md#what-a-streaming-client-needs).
    timeout = httpx.Timeout(10.0)
    url = base + "/v1/chat/completions"

    def stream(client, model, fake=None, **extra):
        body = {"model": model, "messages": MESSAGES, "stream": True, **extra}
        if fake:
            body["fake"] = fake
        return connect_sse(client, "POST", url, json=body)

    with httpx.Client(timeout=timeout) as client:
        listed = client.get(base + "/v1/models").json()
        ids = {entry["id"] for entry in listed["data"]}
        check(sc["concrete"] in ids and sc["alias"] in ids, f"httpx models: {sorted(ids)}")
        reply = client.post(url, json={"model": sc["alias"], "messages": MESSAGES}).json()
        check(reply["choices"][0]["message"]["content"], "httpx non-stream")
        for model in (sc["concrete"], sc["alias"], sc["slow"]):
            with stream(client, model, service_tier="flex") as source:
                check(source.response.status_code == 200, f"httpx-sse status {model}")
                headers = source.response.headers
                check(headers.get("x-strata-concrete-model"), "httpx-sse concrete model header")
                check(headers.get("x-strata-service-tier") == "flex", "httpx-sse tier header")
                data = [event.data for event in source.iter_sse()]
            check(data and data[-1] == "[DONE]", f"httpx-sse frames {model}: {data[-3:]}")
            check(any("content" in d for d in data[:-1]), f"httpx-sse content {model}")
        with stream(client, sc["concrete"], {"tool_call": True}) as source:
            data = [event.data for event in source.iter_sse()]
        check(any("tool_calls" in d for d in data), "httpx-sse tool calls")
        with stream(client, sc["concrete"], {"error_status": 400}) as source:
            check(source.response.status_code == 400, "httpx-sse upstream 400")
        with stream(client, sc["broken"]) as source:
            check(source.response.status_code == 503, "httpx-sse failed load 503")
        summary["failed_loads"] += 1
        with stream(client, sc["broken_slow"]) as source:
            check(source.response.status_code == 200, "httpx-sse held head then 200")
            events = list(source.iter_sse())
        last = events[-1]
        check(last.event == "error" and json.loads(last.data)["error"]["status"] == 503,
              f"httpx-sse in-band error: {last}")
        check(all(event.data != "[DONE]" for event in events), "no [DONE] after an error")
        summary["failed_loads"] += 1
        with stream(client, sc["concrete"], {"tokens": 40, "token_delay_ms": 50}) as source:
            next(iter(source.iter_sse()))
        summary["cancelled"] += 1


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
    chunks = list(litellm.completion(model="openai/" + sc["alias"], stream=True, **common))
    check(any(chunk.choices and chunk.choices[0].delta.content for chunk in chunks), "alias stream")
    reply = litellm.completion(
        model="openai/" + sc["concrete"], extra_body={"fake": {"tool_call": True}}, **common
    )
    check(reply.choices[0].message.tool_calls, "litellm tool calls")
    try:
        litellm.completion(
            model="openai/" + sc["concrete"], extra_body={"fake": {"error_status": 400}}, **common
        )
        raise AssertionError("litellm: an upstream 400 must raise")
    except litellm.exceptions.BadRequestError as err:
        check(err.status_code == 400, f"litellm 400: {err!r}")
    try:
        litellm.completion(model="openai/" + sc["broken"], **common)
        raise AssertionError("litellm: a failed load must raise")
    except litellm.exceptions.ServiceUnavailableError as err:
        check(err.status_code == 503, f"litellm 503: {err!r}")
    summary["failed_loads"] += 1
    # After the head went out: litellm raises while iterating (no HTTP status to map).
    try:
        list(litellm.completion(model="openai/" + sc["broken_slow"], stream=True, **common))
        raise AssertionError("litellm: a failed load after the headers must raise")
    except AssertionError:
        raise
    except Exception as err:  # litellm wraps it in a class of its own choosing
        summary["litellm_in_band"] = type(err).__name__
    summary["failed_loads"] += 1
    # The x-strata-* headers (litellm keeps the upstream's in its hidden params) and a tier.
    reply = litellm.completion(model="openai/" + sc["alias"], service_tier="flex", **common)
    headers = reply._hidden_params.get("additional_headers") or {}
    tiers = [v for k, v in headers.items() if k.lower().endswith("x-strata-service-tier")]
    check(tiers == ["flex"], f"litellm tier header: {headers}")
    # A stream through the 7 s load, and a cancelled stream.
    chunks = list(litellm.completion(model="openai/" + sc["slow"], stream=True, **common))
    check(any(chunk.choices and chunk.choices[0].delta.content for chunk in chunks), "slow stream")
    stream = litellm.completion(
        model="openai/" + sc["concrete"],
        stream=True,
        extra_body={"fake": {"tokens": 40, "token_delay_ms": 50}},
        **common,
    )
    next(iter(stream))
    stream.completion_stream.close()
    summary["cancelled"] += 1


def run_langchain(base, sc, summary):
    # langchain-openai's ChatOpenAI on top of the openai SDK (its default max_retries is 2).
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["alias"], timeout=60)
    check(chat.invoke("hello").content, "langchain invoke")
    text = "".join(chunk.content for chunk in chat.stream("hello"))
    check(text, "langchain stream")
    concrete = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["concrete"], timeout=60)
    check(concrete.invoke("hello").content, "langchain concrete invoke")
    failing = concrete.bind(extra_body={"fake": {"error_status": 400}})
    try:
        failing.invoke("hello")
        raise AssertionError("langchain: an upstream 400 must raise")
    except BadRequestError as err:
        check(err.status_code == 400, f"langchain 400: {err.status_code}")
    broken = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["broken"], timeout=60)
    try:
        "".join(chunk.content for chunk in broken.stream("hello"))
        raise AssertionError("langchain: a failed load must raise")
    except InternalServerError as err:
        check(err.status_code == 503, f"langchain 503: {err.status_code}")
    summary["failed_loads"] += 1
    late = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["broken_slow"], timeout=60)
    try:
        "".join(chunk.content for chunk in late.stream("hello"))
        raise AssertionError("langchain: a failed load after the headers must raise")
    except InternalServerError:
        raise AssertionError("langchain: after the headers there is no HTTP status")
    except APIError as err:
        check(err.body and err.body.get("status") == 503, f"langchain in-band: {err.body}")
    summary["failed_loads"] += 1
    # Headers and a tier, a stream through the 7 s load, a cancelled stream.
    flex = ChatOpenAI(
        base_url=base + "/v1",
        api_key="unused",
        model=sc["alias"],
        service_tier="flex",
        include_response_headers=True,
        timeout=60,
    )
    headers = flex.invoke("hello").response_metadata.get("headers") or {}
    check(headers.get("x-strata-service-tier") == "flex", f"langchain headers: {headers}")
    slow = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=sc["slow"], timeout=60)
    check("".join(chunk.content for chunk in slow.stream("hello")), "langchain slow stream")
    long = concrete.bind(extra_body={"fake": {"tokens": 40, "token_delay_ms": 50}})
    chunks = long.stream("hello")
    next(chunks)
    chunks.close()
    summary["cancelled"] += 1


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
