#!/usr/bin/env bash
# The LiteLLM example of docs/many-hosts.md end to end on one machine: two
# routers (`strata-ctl demo`, each with its fake backend and its own port)
# stand for two GPU hosts, and LiteLLM's proxy spreads one model over both.
# Prints what each router served. Not part of `cargo test` (LiteLLM is a
# large PyPI install); run by hand, see tests/benches/RESULTS.md.
#
# Usage: tests/many-hosts/litellm-two-hosts.sh [STRATA_CTL] [LITELLM]
#   STRATA_CTL defaults to target/debug/strata-ctl (cargo build --locked --bins),
#   LITELLM to `litellm` on PATH (pip install 'litellm[proxy]').
set -euo pipefail

ctl=${1:-target/debug/strata-ctl}
litellm=${2:-litellm}
model=qwen3.8-flash-next
port=${LITELLM_PORT:-4077}
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Two routers; each demo prints "serving on http://127.0.0.1:PORT".
bases=()
for host in a b; do
    "$ctl" demo >"$work/$host.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        url=$(grep -o 'serving on http://[0-9.:]*' "$work/$host.log" | cut -d' ' -f3 || true)
        [ -n "$url" ] && break
        sleep 0.1
    done
    [ -n "$url" ] || { cat "$work/$host.log"; exit 1; }
    bases+=("$url")
    echo "host $host: router at $url"
done

cat >"$work/litellm.yaml" <<YAML
model_list:
  - model_name: $model
    litellm_params:
      model: openai/$model
      api_base: ${bases[0]}/v1
      api_key: "none"
      timeout: 1200
  - model_name: $model
    litellm_params:
      model: openai/$model
      api_base: ${bases[1]}/v1
      api_key: "none"
      timeout: 1200
router_settings:
  routing_strategy: simple-shuffle
  num_retries: 1
  allowed_fails: 2
  cooldown_time: 60
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  background_health_checks: true
  health_check_interval: 300
YAML
echo "--- litellm config"
cat "$work/litellm.yaml"

export LITELLM_MASTER_KEY="sk-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
auth="Authorization: Bearer $LITELLM_MASTER_KEY"
"$litellm" --config "$work/litellm.yaml" --port "$port" --host 127.0.0.1 >"$work/litellm.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$port/health/readiness" >/dev/null 2>&1 && break
    sleep 0.2
done
curl -fs "http://127.0.0.1:$port/health/readiness" >/dev/null || { tail -40 "$work/litellm.log"; exit 1; }
echo "--- litellm ready on port $port"

requests=${REQUESTS:-8}
for n in $(seq "$requests"); do
    stream=$([ $((n % 2)) -eq 0 ] && echo true || echo false)
    code=$(curl -s -o "$work/reply.$n" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
        -H "$auth" -H 'Content-Type: application/json' \
        -d "{\"model\":\"$model\",\"stream\":$stream,\"messages\":[{\"role\":\"user\",\"content\":\"hello $n\"}]}")
    echo "request $n (stream $stream): HTTP $code, $(wc -c <"$work/reply.$n") bytes"
done

echo "--- litellm /health (one real chat request per deployment)"
curl -s -H "$auth" "http://127.0.0.1:$port/health" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
print("healthy:", sorted(e.get("api_base") for e in doc.get("healthy_endpoints", [])))
print("unhealthy:", sorted(e.get("api_base") for e in doc.get("unhealthy_endpoints", [])))'

echo "--- what each router served (its /requests records)"
total=0
for i in 0 1; do
    served=$(curl -s "${bases[$i]}/requests?after=0" | python3 -c '
import json, sys
print(sum(1 for r in json.load(sys.stdin)["records"] if r["status"] == 200))')
    total=$((total + served))
    echo "router ${bases[$i]}: $served completed requests"
    curl -s "${bases[$i]}/metrics?format=prometheus" | grep -E '^strata_router_(num_requests|lora_requests_info)'
done
echo "--- total completed on the routers: $total (requests sent: $requests, plus health checks)"
