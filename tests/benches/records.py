#!/usr/bin/env python3
"""Writes a synthetic request log (schema version 1, every field present)
for timing `strata-ctl simulate --records` on large logs.

    python3 tests/benches/records.py COUNT [GAP_MS] > requests.jsonl

Seeded (the same arguments give the same file): 4 models, Poisson
arrivals (mean gap GAP_MS, default 10000), the model drawn again (from
the four) on about one request in six, generations of 1-8 s, 20 s loads,
and a router that served them one at a time in arrival order (a switch
when the model changed), so the records agree with one another. With
GAP_MS 5000 that router is overloaded and the queues grow. About 960
bytes a record: 1 000 000 records are about 960 MB.
"""

import datetime
import json
import random
import sys

EPOCH = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
MODELS = ["model-a", "model-b", "model-c", "model-d"]


def stamp(ms):
    moment = EPOCH + datetime.timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def main():
    count = int(sys.argv[1])
    gap = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    rng = random.Random(1)
    out = sys.stdout
    arrived = 0
    free_at = 0
    loaded = None
    model = MODELS[0]
    for seq in range(1, count + 1):
        arrived += int(rng.expovariate(1 / gap))
        if rng.random() < 1 / 6:
            model = rng.choice(MODELS)
        service = rng.randint(1_000, 8_000)
        lease = max(arrived, free_at)
        load = None
        if model != loaded:
            load = 20_000
            loaded = model
        granted = lease + (load or 0)
        free_at = granted + service
        record = {
            "schema_version": 1, "seq": seq, "arrival_seq": seq,
            "request_id": f"42-1-{seq}", "endpoint": "/v1/chat/completions",
            "stream": True, "model_requested": model, "model_resolved": model,
            "upstream_model": f"up-{model}", "arrived_at": stamp(arrived),
            "completed_at": stamp(free_at), "lease_at": stamp(lease),
            "first_token_at": None, "last_token_at": None,
            "queue_depth_at_arrival": 0, "in_flight_at_arrival": 0,
            "queue_wait_ms": lease - arrived, "model_switch": load is not None,
            "model_load_ms": load, "upstream_headers_ms": None, "ttft_ms": None,
            "ttft_after_lease_ms": None, "generation_ms": service,
            "total_ms": free_at - arrived, "prompt_tokens": None,
            "completion_tokens": None, "reasoning_tokens": None, "prompt_n": None,
            "cache_n": None, "predicted_n": None, "prompt_ms": None,
            "predicted_ms": None, "prompt_per_second": None,
            "predicted_per_second": None, "finish_reason": "stop", "status": 200,
            "upstream_status": 200, "success": True, "reason": "completed",
            "response_bytes": 1000, "disconnect_phase": None,
        }
        out.write(json.dumps(record, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
