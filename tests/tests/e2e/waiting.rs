//! The scheduling scenarios (the spec's `tests/waiting.py`), through the real binaries and the
//! fake backend: overloaded admission across two proxies, delayed response headers, model
//! groups, tool-gap grace, tiers inside and across models, cache-aware order and each of its
//! fallbacks, legacy 429/504, disconnects while queued and while admitted, a failed load of a
//! waiting group, and a proxy drain with waiting tickets. Orders are read from the fake's event
//! log (the order requests reached the backend); `/metrics` and the records are checked where
//! the scenario makes them interesting.

use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{chat_request, wait_record};
use strata_e2e::http::{self, Response, Stream, spawn_chat};
use strata_e2e::stack::Stack;
use strata_e2e::{
    ConfigBuilder, DEADLINE, FakeLog, ModelSpec, POLL_INTERVAL, poll_for, poll_until,
};
use strata_protocol::api::{Metrics, TierCounts};
use strata_protocol::record::{Phase, Reason};

const A: &str = "flash-a";
const B: &str = "flash-b";

/// One chat request the backend received.
#[derive(Debug, Clone)]
struct Received {
    ts: f64,
    pid: u32,
    /// The request's `fake` object (tests tag requests with it).
    fake: Value,
}

fn received(log: &FakeLog) -> Vec<Received> {
    log.events_named("request")
        .into_iter()
        .filter(|event| event["path"] == "/v1/chat/completions")
        .map(|event| Received {
            ts: event["ts"].as_f64().unwrap_or(0.0),
            pid: event["pid"].as_u64().unwrap_or(0) as u32,
            fake: event["fake"].clone(),
        })
        .collect()
}

/// A request tagged `tag`. The tag travels in the fake's `error_message`, a key it only reads
/// when `error_status` is set: harmless, and visible in its event log.
fn tagged(model: &str, stream: bool, tag: &str, extra: Value) -> Value {
    let mut fake = json!({"error_message": tag});
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            fake[key] = value;
        }
    }
    chat_request(model, stream, tag, fake)
}

/// The tags of the requests the backend received, in order.
fn order(log: &FakeLog) -> Vec<String> {
    received(log)
        .into_iter()
        .filter_map(|request| request.fake["error_message"].as_str().map(str::to_owned))
        .collect()
}

/// Ends a holder (see [`Stack::hold`]).
fn release(stream: Stream) {
    stream.disconnect();
}

fn ok(handle: JoinHandle<Response>) -> Response {
    let response = handle.join().expect("the request thread");
    assert_eq!(response.status, 200, "{response}");
    response
}

fn wait_first(tag: &str) -> ConfigBuilder {
    ConfigBuilder::new(tag).wait_when_busy(true)
}

/// The wait-first config of the scenarios with two models, A and B.
fn two_models(tag: &str) -> ConfigBuilder {
    wait_first(tag)
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
}

/// The start of most scenarios: the stack of `config`, A loaded, and a stream holding A (see
/// [`Stack::hold`]) tagged `holder`, so that what the test sends next waits.
fn a_warm_and_held(config: ConfigBuilder) -> (Stack, Stream) {
    let stack = Stack::start(config.build());
    stack.warm(A);
    let holder = stack.hold(A, "holder");
    (stack, holder)
}

// ---- wait-first ---------------------------------------------------------------------------

/// More clients than `max_pending` over two proxies at once: every request succeeds, the
/// backend never has more than `max_pending` generations, and `/metrics` on either proxy shows
/// the router's totals (requests of both).
#[test]
fn overload_across_two_proxies_never_dispatches_more_than_max_pending() {
    let mut stack = Stack::start(
        wait_first("overload")
            .model(ModelSpec::new(A))
            .set("max_pending", 2)
            .build(),
    );
    let second = stack.start_extra_proxy();
    stack.warm(A);
    let slow = json!({"tokens": 6, "token_delay_ms": 60});
    let handles: Vec<JoinHandle<Response>> = (0..12)
        .map(|i| {
            let addr = if i % 2 == 0 { stack.addr() } else { second };
            spawn_chat(addr, chat_request(A, i % 3 == 0, "load", slow.clone()))
        })
        .collect();
    // Sample the router-wide counts from the first proxy while the others wait.
    let (mut most_queued, mut most_in_flight) = (0, 0);
    while !handles.iter().all(JoinHandle::is_finished) {
        let metrics = stack.metrics();
        // Both are null only while the supervisor is unreachable, which would be a bug here.
        let queued = metrics
            .queue_depth
            .expect("queue_depth with the supervisor up");
        let in_flight = metrics.in_flight.expect("in_flight with the supervisor up");
        most_queued = most_queued.max(queued);
        most_in_flight = most_in_flight.max(in_flight);
        std::thread::sleep(Duration::from_millis(20));
    }
    for handle in handles {
        ok(handle);
    }
    let in_flight: Vec<u64> = stack
        .fake_log()
        .events_named("request")
        .iter()
        .filter_map(|event| event["in_flight"].as_u64())
        .collect();
    assert!(
        in_flight.iter().all(|n| *n <= 2),
        "the backend saw more than max_pending at once: {in_flight:?}"
    );
    assert!(
        in_flight.contains(&2),
        "the two slots were used together: {in_flight:?}"
    );
    assert!(most_in_flight <= 2, "in_flight {most_in_flight}");
    assert!(
        most_queued >= 2,
        "requests of both proxies waited: {most_queued}"
    );
    stack.stop();
}

/// A slow response-header wait does not block admission of other requests for the same model
/// in wait-first mode; in legacy mode it holds the engine lock until the headers arrive.
#[test]
fn delayed_headers_block_admission_in_legacy_mode_only() {
    for wait_first_mode in [true, false] {
        let stack = Stack::start(
            ConfigBuilder::new(if wait_first_mode {
                "hdr-wf"
            } else {
                "hdr-legacy"
            })
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first_mode)
            .set("max_pending", 8)
            .build(),
        );
        stack.warm(A);
        let log = stack.fake_log();
        let slow = spawn_chat(
            stack.addr(),
            tagged(A, false, "slow", json!({"header_delay_ms": 4000})),
        );
        poll_until(DEADLINE, "the slow request at the backend", || {
            order(&log) == ["slow"]
        });
        let started = Instant::now();
        let quick = http::chat(stack.addr(), &tagged(A, false, "quick", Value::Null));
        let quick_took = started.elapsed();
        assert_eq!(quick.status, 200, "{quick}");
        ok(slow);
        let requests = received(&log);
        let gap = requests[2].ts - requests[1].ts;
        if wait_first_mode {
            assert!(
                quick_took < Duration::from_millis(3000),
                "wait-first: the quick request waited {quick_took:?} behind a header wait"
            );
        } else {
            assert!(
                gap >= 3.8,
                "legacy: the quick request reached the backend {gap:.2}s after the slow one, before its headers"
            );
            let record = wait_record(stack.addr(), quick.header("x-strata-request-id").unwrap());
            assert!(
                record.queue_wait_ms.is_some_and(|ms| ms >= 2000),
                "{}",
                record.raw
            );
        }
        stack.stop();
    }
}

/// Arrivals A B A B with A loaded run as A A, then B B: requests for the loaded model run
/// together, and once it is quiet the earliest waiting model group goes next, whole.
#[test]
fn model_groups_run_a_a_then_b_b() {
    let (stack, holder) = a_warm_and_held(two_models("groups").model_grace_ms(0));
    let log = stack.fake_log();
    let mut handles = Vec::new();
    for (model, tag) in [(B, "b1"), (A, "a2"), (B, "b3"), (A, "a4")] {
        let before = received(&log).len();
        handles.push(spawn_chat(
            stack.addr(),
            tagged(model, false, tag, Value::Null),
        ));
        // Enqueued in this order: B waits, A goes to the backend at once.
        poll_until(DEADLINE, format!("{tag} enqueued"), || {
            if model == B {
                stack.waiting() == handles.len().div_ceil(2)
            } else {
                received(&log).len() == before + 1
            }
        });
    }
    release(holder);
    for handle in handles {
        ok(handle);
    }
    // One group is granted at once, so its members race to the backend: compare as sets.
    let got = order(&log);
    assert_eq!(got[..3], ["holder", "a2", "a4"], "{got:?}");
    let mut b_group = got[3..].to_vec();
    b_group.sort();
    assert_eq!(b_group, ["b1", "b3"], "{got:?}");
    let requests = received(&log);
    assert_eq!(
        requests[4].pid, requests[5].pid,
        "b1 and b3 were served by one B backend"
    );
    stack.stop();
}

/// Tool-call gaps: after the loaded model's last request, `model_grace_ms` keeps it selected; a
/// same-model request inside the period is served at once by the same backend and restarts the
/// period, and the waiting request for another model goes only once the model was quiet for the
/// whole interval.
#[test]
fn grace_keeps_the_model_through_a_tool_gap_and_restarts() {
    let grace = Duration::from_millis(1500);
    let stack = Stack::start(
        two_models("toolgap")
            .model_grace_ms(grace.as_millis() as u64)
            .build(),
    );
    stack.warm(A);
    let log = stack.fake_log();
    let b = spawn_chat(stack.addr(), tagged(B, false, "b", Value::Null));
    poll_until(DEADLINE, "b queued", || stack.waiting() == 1);
    let tool_result = http::chat(stack.addr(), &tagged(A, false, "a-again", Value::Null));
    let second_a_done = Instant::now();
    assert_eq!(tool_result.status, 200, "{tool_result}");
    ok(b);
    let b_waited = second_a_done.elapsed();
    assert!(
        b_waited >= grace - Duration::from_millis(150),
        "b started {b_waited:?} after the last A request; the grace is {grace:?}"
    );
    let upstream_a = stack.config().upstream(A);
    assert_eq!(log.start_count(&upstream_a), 1, "A was never reloaded");
    let requests = received(&log);
    assert_eq!(
        requests[0].pid, requests[1].pid,
        "the same A backend served both"
    );
    stack.stop();
}

/// Tiers inside the loaded model: with one slot busy, waiting default, flex and priority
/// requests (in that arrival order) run priority, default, flex; `/metrics` splits the queue by
/// tier (and by model) meanwhile, and each record snapshots the engine at its arrival.
#[test]
fn tiers_order_the_loaded_models_queue_and_metrics_split_it() {
    let (stack, holder) = a_warm_and_held(
        wait_first("tiers-in")
            .model(ModelSpec::new(A))
            .set("max_pending", 1),
    );
    let log = stack.fake_log();
    let mut handles = Vec::new();
    for (tier, tag) in [("default", "d"), ("flex", "f"), ("priority", "p")] {
        let mut body = tagged(A, false, tag, Value::Null);
        body["service_tier"] = json!(tier);
        handles.push((tag, spawn_chat(stack.addr(), body)));
        let n = handles.len();
        poll_until(DEADLINE, format!("{tag} queued"), || stack.waiting() == n);
    }
    let metrics = stack.metrics();
    assert_eq!(metrics.queue_depth, Some(3), "{metrics:?}");
    assert_eq!(metrics.in_flight, Some(1), "{metrics:?}");
    assert_eq!(
        metrics.queue_depth_by_tier,
        TierCounts {
            priority: Some(1),
            default: Some(1),
            flex: Some(1)
        },
        "{metrics:?}"
    );
    assert_eq!(
        metrics.queue_depth_by_model,
        Some(BTreeMap::from([(A.to_owned(), 3)])),
        "{metrics:?}"
    );
    let prometheus = http::get(stack.addr(), "/metrics?format=prometheus").text();
    assert!(
        prometheus.contains("strata_router_queue_depth_by_tier{tier=\"priority\"} 1"),
        "{prometheus}"
    );
    release(holder);
    for (tag, handle) in handles {
        let response = ok(handle);
        let record = wait_record(
            stack.addr(),
            response.header("x-strata-request-id").unwrap(),
        );
        let (queued_before, in_flight) = match tag {
            "d" => (0, 1),
            "f" => (1, 1),
            _ => (2, 1),
        };
        assert_eq!(
            record.queue_depth_at_arrival, queued_before,
            "{tag}: {}",
            record.raw
        );
        assert_eq!(
            record.in_flight_at_arrival, in_flight,
            "{tag}: {}",
            record.raw
        );
        assert!(
            record.queue_wait_ms.is_some_and(|ms| ms > 0),
            "{}",
            record.raw
        );
    }
    assert_eq!(order(&log), ["holder", "p", "d", "f"]);
    stack.stop();
}

/// Tiers across models: a waiting priority request for another model holds back new default
/// requests for the loaded model (the engine drains toward it), waits for the active response
/// to finish (nothing preempts it), then switches at once (priority skips the grace hold).
#[test]
fn a_priority_request_for_another_model_drains_the_loaded_one_then_switches() {
    let (stack, holder) = a_warm_and_held(two_models("tiers-across").model_grace_ms(1000));
    let log = stack.fake_log();
    let mut priority_b = tagged(B, false, "pb", Value::Null);
    priority_b["service_tier"] = json!("priority");
    let pb = spawn_chat(stack.addr(), priority_b);
    poll_until(DEADLINE, "pb queued", || stack.waiting() == 1);
    let da = spawn_chat(stack.addr(), tagged(A, false, "da", Value::Null));
    poll_until(DEADLINE, "da held back", || stack.waiting() == 2);
    assert_eq!(
        order(&log),
        ["holder"],
        "nothing new reached A while pb waits"
    );
    release(holder);
    ok(pb);
    let da = ok(da);
    assert_eq!(order(&log), ["holder", "pb", "da"]);
    let record = wait_record(stack.addr(), da.header("x-strata-request-id").unwrap());
    assert!(record.model_switch, "{}", record.raw);
    stack.stop();
}

/// Flex waits behind default work: with A busy, a flex request for A and then a default request
/// for B wait; the default one goes first (a switch), flex after it.
#[test]
fn flex_waits_behind_default_work_for_another_model() {
    let (stack, holder) =
        a_warm_and_held(two_models("flex").set("max_pending", 1).model_grace_ms(0));
    let log = stack.fake_log();
    let mut flex_a = tagged(A, false, "fa", Value::Null);
    flex_a["service_tier"] = json!("flex");
    let fa = spawn_chat(stack.addr(), flex_a);
    poll_until(DEADLINE, "fa queued", || stack.waiting() == 1);
    let db = spawn_chat(stack.addr(), tagged(B, false, "db", Value::Null));
    poll_until(DEADLINE, "db queued", || stack.waiting() == 2);
    release(holder);
    ok(db);
    ok(fa);
    assert_eq!(order(&log), ["holder", "db", "fa"]);
    stack.stop();
}

/// `service_tier: "fast"` (what current OpenAI SDKs send for Fast mode) is priority; the
/// response says so in `x-strata-service-tier`.
#[test]
fn service_tier_fast_is_priority() {
    let stack = Stack::start(wait_first("fast").model(ModelSpec::new(A)).build());
    let mut body = chat_request(A, false, "fast", Value::Null);
    body["service_tier"] = json!("fast");
    let response = stack.chat(&body);
    assert_eq!(response.status, 200, "{response}");
    assert_eq!(response.header("x-strata-service-tier"), Some("priority"));
    body["service_tier"] = json!("turbo");
    let response = stack.chat(&body);
    assert_eq!(response.status, 400, "{response}");
    stack.stop();
}

// ---- cache order ----------------------------------------------------------------------------

/// Three waiting requests whose cached/input fractions are 10%, 90% and 50% (in arrival order),
/// behind a generation that holds the one `cache_max_active` slot, in wait-first mode or (with
/// `wait_when_busy` false) legacy mode.
fn cache_scenario(
    tag: &str,
    wait_when_busy: bool,
    fake_profile: &[(&str, Value)],
    lookup_ms: u64,
) -> Vec<String> {
    let mut model = ModelSpec::new(A);
    for (key, value) in fake_profile {
        model = model.fake(key, value.clone());
    }
    let (stack, holder) = a_warm_and_held(
        ConfigBuilder::new(tag)
            .wait_when_busy(wait_when_busy)
            .model(model)
            .set("cache_max_active", 1)
            .set("cache_lookup_ms", lookup_ms),
    );
    let log = stack.fake_log();
    let mut handles = Vec::new();
    for (tag, cached) in [("c10", 200), ("c90", 1800), ("c50", 1000)] {
        let extra = json!({"prompt_tokens": 2000, "cached_tokens": cached});
        handles.push(spawn_chat(stack.addr(), tagged(A, false, tag, extra)));
        let n = handles.len();
        poll_until(DEADLINE, format!("{tag} queued"), || stack.waiting() == n);
    }
    assert_eq!(
        stack.metrics().in_flight,
        Some(1),
        "cache_max_active: 1 keeps them queued"
    );
    release(holder);
    for handle in handles {
        ok(handle);
    }
    let got = order(&log);
    let statuses: Vec<u64> = log
        .events_named("cache_lookup")
        .iter()
        .filter_map(|event| event["status"].as_u64())
        .collect();
    stack.stop();
    let mut out = got;
    out.push(format!("lookups {statuses:?}"));
    out
}

/// The holder leaves by disconnecting, and the backend is busy with it until it notices (at its
/// next token, up to 100 ms later; Strata too). The first lookup follows the lease's end at
/// once, so under load it could find the backend still busy (409, arrival order, by design):
/// the fake answers each lookup 300 ms after it arrives, well inside `cache_lookup_ms`, so the
/// cache order is what these tests see.
fn settle_before_lookup() -> [(&'static str, Value); 1] {
    [("cache_lookup_delay_ms", json!(300))]
}

#[test]
fn cache_matches_order_competing_requests_90_50_10() {
    let got = cache_scenario("cache-order", true, &settle_before_lookup(), 1000);
    assert_eq!(got[..4], ["holder", "c90", "c50", "c10"], "{got:?}");
    assert!(got[4].contains("200"), "lookups were answered: {got:?}");
}

/// `cache_max_active` holds in legacy mode too (the spec: "The limit applies in both scheduling
/// modes"). With one slot, requests for the loaded model stay in the router's queue while a
/// generation runs, where legacy mode alone would send each one as soon as the one before has
/// its headers; so each admission finds the backend idle, and the cache order applies.
#[test]
fn legacy_cache_max_active_keeps_requests_queued_for_cache_order() {
    let got = cache_scenario("legacy-cache", false, &settle_before_lookup(), 1000);
    assert_eq!(got[..4], ["holder", "c90", "c50", "c10"], "{got:?}");
    assert!(got[4].contains("200"), "lookups were answered: {got:?}");
}

/// (tag, the fake's profile keys, cache_lookup_ms, a lookup status the fake must have logged).
type FallbackCase = (&'static str, Vec<(&'static str, Value)>, u64, &'static str);

#[test]
fn cache_lookup_fallbacks_keep_arrival_order() {
    let cases: [FallbackCase; 3] = [
        (
            "cache-404",
            vec![("cache_lookup", json!(false))],
            1000,
            "404",
        ),
        (
            "cache-slow",
            vec![("cache_lookup_delay_ms", json!(1500))],
            300,
            "",
        ),
        (
            "cache-bad",
            vec![("cache_lookup_reply", json!("malformed"))],
            1000,
            "200",
        ),
    ];
    for (tag, profile, lookup_ms, status) in cases {
        let got = cache_scenario(tag, true, &profile, lookup_ms);
        assert_eq!(got[..4], ["holder", "c10", "c90", "c50"], "{tag}: {got:?}");
        assert!(
            got[4].contains(status),
            "{tag}: a lookup was tried: {got:?}"
        );
    }
}

/// A busy backend (409: another generation runs) falls back too: two slots, one taken by a long
/// generation, so the lookup when the other slot frees finds the engine busy. (The backend
/// generates one request at a time, as Strata: the long one then ends so that the rest can be
/// served; c10 takes 1.5 s, so the lookup when the long one's slot frees finds it busy too, and
/// c90 and c50 are dispatched one at a time.)
#[test]
fn a_busy_backend_falls_back_to_arrival_order() {
    let stack = Stack::start(
        wait_first("cache-409")
            .model(ModelSpec::new(A))
            .set("cache_max_active", 2)
            .build(),
    );
    stack.warm(A);
    let log = stack.fake_log();
    let long = stack.hold(A, "long");
    let short = stack.hold(A, "short");
    let mut handles = Vec::new();
    for (tag, cached, delay_ms) in [("c10", 200, 300), ("c90", 1800, 0), ("c50", 1000, 0)] {
        let extra =
            json!({"prompt_tokens": 2000, "cached_tokens": cached, "token_delay_ms": delay_ms});
        handles.push(spawn_chat(stack.addr(), tagged(A, false, tag, extra)));
        let n = handles.len();
        poll_until(DEADLINE, format!("{tag} queued"), || stack.waiting() == n);
    }
    release(short);
    poll_until(DEADLINE, "a lookup that found the backend busy", || {
        log.events_named("cache_lookup")
            .iter()
            .any(|event| event["status"] == 409)
    });
    release(long);
    for handle in handles {
        ok(handle);
    }
    assert_eq!(order(&log), ["long", "short", "c10", "c90", "c50"]);
    let statuses: Vec<u64> = log
        .events_named("cache_lookup")
        .iter()
        .filter_map(|event| event["status"].as_u64())
        .collect();
    assert!(statuses.contains(&409), "{statuses:?}");
    stack.stop();
}

// ---- legacy ---------------------------------------------------------------------------------

/// Legacy bounded mode: `max_pending` bounds active plus waiting over every tier (excess gets
/// 429 at once), and a request that waits longer than `queue_ms` gets 504 without a switch.
#[test]
fn legacy_queue_full_and_queue_timeout_apply_to_every_tier() {
    let (stack, holder) = a_warm_and_held(
        ConfigBuilder::new("legacy-tiers")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B))
            .wait_when_busy(false)
            .set("max_pending", 2)
            .set("queue_ms", 800),
    );
    let mut priority_b = chat_request(B, false, "pb", Value::Null);
    priority_b["service_tier"] = json!("priority");
    let started = Instant::now();
    let pb = spawn_chat(stack.addr(), priority_b.clone());
    poll_until(DEADLINE, "pb queued", || stack.waiting() == 1);
    let full = stack.chat(&priority_b);
    assert_eq!(full.status, 429, "{full}");
    assert_eq!(full.error().code, "queue_full");
    let pb = pb.join().unwrap();
    assert_eq!(pb.status, 504, "{pb}");
    assert_eq!(pb.error().code, "queue_timeout");
    assert!(started.elapsed() >= Duration::from_millis(750));
    let upstream_b = stack.config().upstream(B);
    assert_eq!(stack.fake_log().start_count(&upstream_b), 0, "no switch");
    let record = wait_record(stack.addr(), pb.header("x-strata-request-id").unwrap());
    assert_eq!(record.reason, Reason::QueueTimeout, "{}", record.raw);
    assert_eq!(record.lease_at, None, "{}", record.raw);
    let record = wait_record(stack.addr(), full.header("x-strata-request-id").unwrap());
    assert_eq!(record.reason, Reason::QueueFull, "{}", record.raw);
    assert_eq!(record.status, Some(429), "{}", record.raw);
    release(holder);
    stack.stop();
}

/// Legacy mode: the engine lock is taken in tier order. While one request holds it through its
/// header wait, a default and then a priority request wait; priority takes it next.
#[test]
fn legacy_the_lock_goes_to_the_best_tier_first() {
    let stack = Stack::start(
        ConfigBuilder::new("legacy-lock")
            .model(ModelSpec::new(A))
            .wait_when_busy(false)
            .build(),
    );
    stack.warm(A);
    let log = stack.fake_log();
    let slow = spawn_chat(
        stack.addr(),
        tagged(A, false, "slow", json!({"header_delay_ms": 1500})),
    );
    poll_until(DEADLINE, "slow at the backend", || order(&log) == ["slow"]);
    let d = spawn_chat(stack.addr(), tagged(A, false, "d", Value::Null));
    poll_until(DEADLINE, "d queued", || stack.waiting() == 1);
    let mut priority = tagged(A, false, "p", Value::Null);
    priority["service_tier"] = json!("priority");
    let p = spawn_chat(stack.addr(), priority);
    poll_until(DEADLINE, "p queued", || stack.waiting() == 2);
    // Legacy queue depth counts the lock holder in its header wait too.
    assert_eq!(stack.metrics().queue_depth, Some(3));
    ok(slow);
    ok(d);
    ok(p);
    assert_eq!(order(&log), ["slow", "p", "d"]);
    stack.stop();
}

/// A chat request sent from a thread of its own: its response, how long it took, and when it
/// ended (wall clock, to compare with the fake's event times).
fn spawn_timed_chat(
    addr: std::net::SocketAddr,
    body: Value,
) -> JoinHandle<(Response, Duration, SystemTime)> {
    std::thread::spawn(move || {
        let sent = Instant::now();
        let response = http::chat(addr, &body);
        (response, sent.elapsed(), SystemTime::now())
    })
}

/// A cache lookup racing legacy `queue_ms` (the spec: "Legacy queue deadlines still apply
/// during lookup"). Two requests wait behind a holder of the one `cache_max_active` slot, t1
/// arriving 800 ms before t2; when the holder lets go they compete, and the backend takes 4 s
/// to answer their lookup. t1 fails with 504 `queue_timeout` at `queue_ms` (1.5 s), while the
/// lookup still runs, not when it ends. Its leaving discards the lookup ("scores are discarded
/// when requests leave the queue"), so t2, alone now, is served at once, well before its own
/// deadline and before the lookup answers; the late answer changes nothing.
#[test]
fn legacy_queue_ms_fails_requests_while_their_cache_lookup_runs() {
    const QUEUE_MS: u64 = 1500;
    const LOOKUP_DELAY_MS: u64 = 4000;
    // t2's deadline falls this long after t1's.
    const ARRIVAL_GAP: Duration = Duration::from_millis(800);
    let stack = Stack::start(
        ConfigBuilder::new("legacy-lookup-race")
            .model(ModelSpec::new(A).fake("cache_lookup_delay_ms", LOOKUP_DELAY_MS))
            .wait_when_busy(false)
            .set("queue_ms", QUEUE_MS)
            .set("cache_max_active", 1)
            .set("cache_lookup_ms", 6000)
            .build(),
    );
    // Loaded by the operator: in legacy mode queue_ms would bound a first request's load too.
    stack.control().on(Some(A)).assert_ok();
    let log = stack.fake_log();
    let holder = stack.hold(A, "holder");
    let extra = |cached: u64| json!({"prompt_tokens": 2000, "cached_tokens": cached});
    let first = spawn_timed_chat(stack.addr(), tagged(A, false, "t1", extra(200)));
    // t2 is sent once the router says t1 has waited ARRIVAL_GAP.
    wait_metrics(&stack, "t1 waiting for ARRIVAL_GAP", |m| {
        m.in_flight_requests
            .iter()
            .flatten()
            .any(|held| held.stage == "waiting" && held.age_ms >= ARRIVAL_GAP.as_millis() as u64)
    });
    let second = spawn_timed_chat(stack.addr(), tagged(A, false, "t2", extra(1800)));
    poll_until(DEADLINE, "t2 queued", || stack.waiting() == 2);
    // The slot frees: the two compete, and the engine asks for their lookup.
    release(holder);

    let (response, took, t1_failed) = first.join().expect("t1's thread");
    assert_eq!(response.status, 504, "{response}");
    assert_eq!(response.error().code, "queue_timeout", "{response}");
    assert!(
        took >= Duration::from_millis(QUEUE_MS) && took < Duration::from_millis(LOOKUP_DELAY_MS),
        "t1 failed after {took:?}: queue_ms is {QUEUE_MS} ms, the lookup takes {LOOKUP_DELAY_MS} ms"
    );
    let record = wait_record(
        stack.addr(),
        response
            .header("x-strata-request-id")
            .expect("x-strata-request-id"),
    );
    assert_eq!(record.reason, Reason::QueueTimeout, "{}", record.raw);
    assert_eq!(record.lease_at, None, "{}", record.raw);

    let (response, took, t2_done) = second.join().expect("t2's thread");
    assert_eq!(
        response.status, 200,
        "t2 is served once t1 has left: {response}"
    );
    assert!(
        took < Duration::from_millis(QUEUE_MS),
        "t2 took {took:?}, within its own queue_ms"
    );

    // The lookup ran meanwhile: the fake logs it when it answers, one batch of both, asked
    // before t1 failed and answered after t2 was done.
    let lookup = poll_for(DEADLINE, "the cache lookup's answer", || {
        log.events_named("cache_lookup").into_iter().next()
    });
    assert_eq!(
        (lookup["status"].as_u64(), lookup["count"].as_u64()),
        (Some(200), Some(2)),
        "{lookup}"
    );
    let answered_at =
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(lookup["ts"].as_f64().expect("ts"));
    let asked_at = answered_at - Duration::from_millis(LOOKUP_DELAY_MS);
    assert!(
        asked_at < t1_failed,
        "the lookup started ({asked_at:?}) after t1 had failed ({t1_failed:?})"
    );
    assert!(
        t2_done < answered_at,
        "t2 ({t2_done:?}) waited for the lookup's answer ({answered_at:?})"
    );

    // Nothing waits or holds a lease, and the next request is served.
    let status = stack.status();
    assert_eq!(
        (status.waiting_requests, status.active_leases),
        (0, 0),
        "{status:?}"
    );
    ok(spawn_chat(
        stack.addr(),
        tagged(A, false, "t3", Value::Null),
    ));
    stack.stop();
    // Read once everything has stopped, so no late dispatch can come after it.
    assert_eq!(
        order(&log),
        ["holder", "t2", "t3"],
        "the timed-out request never reached the backend"
    );
}

/// Polls `/metrics` until `pred` holds; on timeout the panic shows the last document.
fn wait_metrics(stack: &Stack, what: &str, pred: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let metrics = stack.metrics();
        if pred(&metrics) {
            return metrics;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {DEADLINE:?}; last /metrics: {metrics:?}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Legacy `/metrics` counts (docs/scheduling.md#counts; the spec: "/metrics reports
/// queue_depth_by_tier, including startup and upstream header waits in legacy mode"): the one
/// request holding the lock is counted in its tier's queue depth while its model loads and
/// while it waits for its response headers, and no longer once they have come and its stream
/// runs (in flight all along); `queue_depth_by_model` counts the same request.
#[test]
fn legacy_queue_depth_by_tier_counts_the_load_and_the_header_wait() {
    let stack = Stack::start(
        ConfigBuilder::new("legacy-counts")
            .model(ModelSpec::new(A).load_ms(1500))
            .wait_when_busy(false)
            .build(),
    );
    let log = stack.fake_log();
    let flex = |queued| TierCounts {
        priority: Some(0),
        default: Some(0),
        flex: Some(queued),
    };
    let slow = json!({"header_delay_ms": 1500, "tokens": 10, "token_delay_ms": 200});
    let mut body = tagged(A, true, "flex", slow);
    body["service_tier"] = json!("flex");
    let conn = http::send_chat(stack.addr(), &body);

    let loading = wait_metrics(&stack, "the flex request counted while A loads", |m| {
        m.loading_model.as_deref() == Some(A) && m.queue_depth_by_tier == flex(1)
    });
    assert_eq!(
        loading
            .queue_depth_by_model
            .as_ref()
            .and_then(|by_model| by_model.get(A)),
        Some(&1),
        "{loading:?}"
    );
    assert_eq!(
        (loading.queue_depth, loading.in_flight),
        (Some(1), Some(1)),
        "{loading:?}"
    );

    // Loaded, and the request is at the backend, which holds its headers back for 1.5 s.
    poll_until(DEADLINE, "the flex request at the backend", || {
        order(&log) == ["flex"]
    });
    let header_wait = wait_metrics(&stack, "the flex request counted in its header wait", |m| {
        m.loaded_model.as_deref() == Some(A)
            && m.loading_model.is_none()
            && m.queue_depth_by_tier == flex(1)
    });
    assert_eq!(
        header_wait
            .queue_depth_by_model
            .as_ref()
            .and_then(|by_model| by_model.get(A)),
        Some(&1),
        "{header_wait:?}"
    );
    assert_eq!(
        (header_wait.queue_depth, header_wait.in_flight),
        (Some(1), Some(1)),
        "{header_wait:?}"
    );

    let mut stream = conn.into_stream(DEADLINE);
    assert_eq!(stream.status, 200, "{:?}", stream.headers);
    let streaming = wait_metrics(&stack, "the flex request no longer queued", |m| {
        m.queue_depth_by_tier == flex(0)
    });
    assert_eq!(
        streaming
            .queue_depth_by_model
            .as_ref()
            .and_then(|by_model| by_model.get(A)),
        Some(&0),
        "{streaming:?}"
    );
    assert_eq!(
        (streaming.queue_depth, streaming.in_flight),
        (Some(0), Some(1)),
        "after its headers the stream still runs: {streaming:?}"
    );
    assert!(
        log.events_named("response_done").is_empty(),
        "the stream was still running when /metrics was read"
    );
    let frames = stream.remaining_frames(DEADLINE);
    assert!(frames.iter().any(|frame| frame.is_done()), "{frames:?}");
    stack.stop();
}

// ---- disconnects, errors, drain ------------------------------------------------------------

/// A client that leaves while queued: `client_disconnect`, phase `queued`, no lease, no queue
/// wait, and (non-stream) no status. One that leaves while its model loads: phase `loading`,
/// admitted (`lease_at`) but never granted. Both leave the queue, and nothing is sent upstream.
#[test]
fn disconnects_while_queued_and_while_admitted() {
    let (stack, holder) = a_warm_and_held(
        wait_first("disc")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B).load_ms(4000))
            .set("max_pending", 1)
            .model_grace_ms(0),
    );
    let log = stack.fake_log();
    let mut queued = http::Conn::connect(stack.addr()).unwrap();
    let body = tagged(A, false, "queued", Value::Null).to_string();
    queued
        .write(&http::request_bytes(
            stack.addr(),
            "POST",
            http::CHAT_PATH,
            &[("content-type", "application/json")],
            body.as_bytes(),
        ))
        .unwrap();
    poll_until(DEADLINE, "queued", || stack.waiting() == 1);
    drop(queued);
    let record = strata_e2e::accounting::wait_record_where(
        stack.addr(),
        "the queued disconnect",
        |record| record.reason == Reason::ClientDisconnect,
    );
    assert_eq!(
        (
            record.disconnect_phase,
            &record.lease_at,
            record.queue_wait_ms,
            record.status,
            record.model_resolved.as_deref(),
        ),
        (Some(Phase::Queued), &None, None, None, Some(A)),
        "{}",
        record.raw
    );
    poll_until(DEADLINE, "the ticket left the queue", || {
        stack.waiting() == 0
    });
    release(holder);

    // Admitted to B's 4 s load, then gone: phase loading, lease_at set. (A stream, written
    // raw: its head is held through the load, so it has no headers to read yet.)
    let loading = http::send_chat(stack.addr(), &tagged(B, true, "loading", Value::Null));
    // The supervisor tells the proxy it admitted the ticket before it spawns the backend, so
    // once the fake logs B's start the proxy knows the request is loading. (The control
    // socket's `loading` can show B a moment before that message reaches the proxy.)
    let upstream_b = stack.config().upstream(B);
    poll_until(DEADLINE, "B's backend started", || {
        log.start_count(&upstream_b) == 1
    });
    drop(loading);
    let record = strata_e2e::accounting::wait_record_where(
        stack.addr(),
        "the loading disconnect",
        |record| {
            record.reason == Reason::ClientDisconnect && record.model_resolved.as_deref() == Some(B)
        },
    );
    assert_eq!(record.status, None, "{}", record.raw);
    assert_eq!(
        record.disconnect_phase,
        Some(Phase::Loading),
        "{}",
        record.raw
    );
    assert!(record.lease_at.is_some(), "{}", record.raw);
    assert_eq!(record.queue_wait_ms, None, "{}", record.raw);
    assert_eq!(
        order(&log),
        ["holder"],
        "nothing of theirs reached a backend"
    );
    stack.stop();
}

/// A failed load fails the whole waiting group it was started for, once: one launch, every
/// request of the group a 503 `model_load_error`, and the cooldown refuses the next at once.
#[test]
fn a_failed_load_fails_its_waiting_group_with_one_launch() {
    let (stack, holder) = a_warm_and_held(
        wait_first("groupfail")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B).start_failure("exit"))
            .model_grace_ms(0),
    );
    let handles: Vec<JoinHandle<Response>> = (0..3)
        .map(|i| {
            let handle = spawn_chat(stack.addr(), chat_request(B, false, "b", Value::Null));
            poll_until(DEADLINE, "b queued", || stack.waiting() == i + 1);
            handle
        })
        .collect();
    release(holder);
    for handle in handles {
        let response = handle.join().unwrap();
        assert_eq!(response.status, 503, "{response}");
        assert_eq!(response.error().code, "model_load_error");
    }
    let upstream_b = stack.config().upstream(B);
    assert_eq!(stack.fake_log().start_count(&upstream_b), 1, "one launch");
    let again = stack.chat(&chat_request(B, false, "b", Value::Null));
    assert_eq!(again.status, 503);
    assert!(again.header("retry-after").is_some(), "{again}");
    stack.stop();
}

/// A proxy that drains (SIGTERM) with tickets still waiting in the supervisor's queue: they are
/// admitted and served as usual, and the proxy exits 0 after the last of them.
#[test]
fn a_draining_proxy_serves_its_waiting_tickets() {
    let mut stack = Stack::start(
        wait_first("drain-queue")
            .model(ModelSpec::new(A))
            .set("max_pending", 1)
            .build(),
    );
    stack.warm(A);
    let holder = stack.hold(A, "holder");
    let handles: Vec<JoinHandle<Response>> = (0..2)
        .map(|i| {
            let handle = spawn_chat(stack.addr(), chat_request(A, false, "w", Value::Null));
            poll_until(DEADLINE, "queued", || stack.waiting() == i + 1);
            handle
        })
        .collect();
    stack.kill_proxy(Signal::SIGTERM);
    release(holder);
    for handle in handles {
        ok(handle);
    }
    let status = stack.wait_proxy_exit(DEADLINE);
    assert!(status.success(), "{status}");
    assert_eq!(stack.status().waiting_requests, 0);
    assert_eq!(stack.status().active_leases, 0);
    stack.start_proxy();
    stack.stop();
}
