//! The weights prefetch end to end (docs/backend.md#the-weights-prefetch): while A streams and a
//! ticket for B
//! waits, B's weights become resident before B starts; the prefetch stops when B's ticket
//! leaves; `prefetch: false`, `prefetch_min_free_bytes` and `prefetch_max_bytes` are honoured;
//! and what was resident when B's load started is in `/metrics`. With `prefetch_predict`, B's
//! weights become resident while A is loaded and nothing waits, before any request for B (B
//! was requested before), and without it nothing is read ahead.
//!
//! B's weights are a real file in the target directory (`CARGO_TARGET_TMPDIR`, on disk), made
//! cold with `posix_fadvise(DONTNEED)` before each wait; residency is read with `mincore`. On
//! a file system that keeps every page resident (tmpfs) a cold file cannot be made, and each
//! test says so and stops.
//!
//! Its own binary: the prefetch reads at the idle I/O class, so any other test's disk reads
//! starve it; in the shared e2e binary, where tests of other files run beside it, the 20 s wait
//! for residency timed out under `.ci/run`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use strata_e2e::accounting::chat_request;
use strata_e2e::http::{self, spawn_chat};
use strata_e2e::stack::Stack;
use strata_e2e::weights::WeightsFile as Weights;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};

const A: &str = "flash-a";
const B: &str = "flash-b";

/// B's weights, in the target directory (on disk).
fn weights(tag: &str, len: u64) -> Weights {
    Weights::create(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("prefetch"),
        tag,
        len,
    )
}

/// Models A and B, wait-first without grace; B lists `weights` and its fake reads them whole
/// before it reports ready, as an engine does.
fn config(
    tag: &str,
    weights: &Weights,
    edit: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
) -> ConfigBuilder {
    let b = ModelSpec::new(B)
        .entry_key("weights", json!([weights.path]))
        .fake("read_weights", json!(weights.path));
    edit(
        ConfigBuilder::new(tag)
            .wait_when_busy(true)
            .model_grace_ms(0)
            .model(ModelSpec::new(A))
            .model(b),
    )
}

/// The samples of the Prometheus text, by series.
fn prometheus(stack: &Stack) -> BTreeMap<String, f64> {
    let response = stack.get("/metrics?format=prometheus");
    assert_eq!(response.status, 200, "{response}");
    String::from_utf8_lossy(&response.body)
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn series(name: &str, model: &str) -> String {
    format!("strata_router_{name}{{model=\"{model}\"}}")
}

/// The body of a chat for B that waits behind A.
fn b_request(tag: &str) -> Value {
    chat_request(B, false, tag, Value::Null)
}

/// Waits until the router says the waiting request for `model` has waited `at_least`: long
/// enough that a prefetch, had it run, would have read every byte.
fn wait_until_waited(stack: &Stack, model: &str, at_least: Duration) {
    wait_until_held(stack, model, "waiting", at_least);
}

/// Waits until the router has held a request for `model` at `stage` (`waiting`, `leased`) for
/// `at_least`.
fn wait_until_held(stack: &Stack, model: &str, stage: &str, at_least: Duration) {
    poll_until(
        DEADLINE,
        format!("a request for {model} {stage} {at_least:?}"),
        || {
            stack
                .metrics()
                .in_flight_requests
                .iter()
                .flatten()
                .any(|held| {
                    held.model == model
                        && held.stage == stage
                        && held.age_ms >= at_least.as_millis() as u64
                })
        },
    );
}

#[test]
fn the_next_models_weights_become_resident_while_it_waits() {
    let weights = weights("resident", 256 << 20);
    let stack = Stack::start(config("prefetch-resident", &weights, |b| b).build());
    let holder = stack.hold(A, "holder");
    if !weights.evict() {
        return;
    }
    let waiting = spawn_chat(stack.addr(), b_request("b"));
    // The prefetch reads at the idle I/O class: any other disk reader on the machine (a build,
    // another test binary) pauses it, so its bound is generous; A is held until the test lets
    // go, so the wait costs nothing when the disk is free.
    poll_until(
        Duration::from_secs(90),
        "B's weights resident while A streams",
        || weights.resident() == weights.len,
    );
    let status = stack.status();
    assert_eq!(
        (status.loaded.as_deref(), status.waiting_requests),
        (Some(A), 1),
        "A still serves and B still waits: {status:?}"
    );
    let metrics = prometheus(&stack);
    assert!(
        metrics[&series("prefetch_bytes_total", B)] >= weights.len as f64 * 0.9,
        "{metrics:?}"
    );
    assert!(
        metrics[&series("prefetch_seconds_total", B)] > 0.0,
        "{metrics:?}"
    );

    // A lets go: B loads, and its load found its weights in memory.
    holder.disconnect();
    let response = waiting.join().expect("B's client");
    assert_eq!(response.status, 200, "{response}");
    poll_until(DEADLINE, "B's resident fraction at load start", || {
        prometheus(&stack).contains_key(&series("load_resident_ratio", B))
    });
    let ratio = prometheus(&stack)[&series("load_resident_ratio", B)];
    assert!(ratio >= 0.99, "resident at load start: {ratio}");
    let log = stack.supervisor_stderr();
    assert!(log.contains("prefetching weights"), "{log}");
    stack.stop();
}

#[test]
fn the_prefetch_stops_when_the_waiting_ticket_leaves() {
    let weights = weights("stops", 256 << 20);
    // 32 chunks at 200 ms each: a whole prefetch would take over 6 s.
    let stack = Stack::start_with_supervisor(
        config("prefetch-stops", &weights, |b| b).build(),
        |command| {
            command.env(strata_supervisor::prefetch::TEST_PAUSE_ENV, "200");
        },
    );
    let holder = stack.hold(A, "holder");
    if !weights.evict() {
        return;
    }
    let client = http::send_chat(stack.addr(), &b_request("leaves"));
    poll_until(DEADLINE, "the prefetch of B under way", || {
        prometheus(&stack)
            .get(&series("prefetch_bytes_total", B))
            .is_some_and(|bytes| *bytes > 0.0)
    });
    drop(client);
    poll_until(DEADLINE, "the prefetch of B stopped", || {
        stack
            .supervisor_stderr()
            .contains("weights prefetch stopped: the model is no longer next")
    });
    let read = prometheus(&stack)[&series("prefetch_bytes_total", B)];
    assert!(
        read < weights.len as f64 / 2.0,
        "read {read} bytes before the stop"
    );
    assert!(
        weights.resident() < weights.len / 2,
        "{} of {} bytes resident",
        weights.resident(),
        weights.len
    );
    let log = stack.supervisor_stderr();
    assert!(
        !log.contains("weights prefetched"),
        "it ran to the end:\n{log}"
    );
    holder.disconnect();
    stack.stop();
}

#[test]
fn prefetch_false_reads_nothing_ahead() {
    let weights = weights("off", 64 << 20);
    let stack =
        Stack::start(config("prefetch-off", &weights, |b| b.set("prefetch", false)).build());
    let holder = stack.hold(A, "holder");
    if !weights.evict() {
        return;
    }
    let waiting = spawn_chat(stack.addr(), b_request("b"));
    wait_until_waited(&stack, B, Duration::from_millis(1500));
    assert!(
        weights.resident() < weights.len / 10,
        "read ahead with prefetch off"
    );
    holder.disconnect();
    assert_eq!(waiting.join().expect("B's client").status, 200);
    poll_until(DEADLINE, "B's resident fraction at load start", || {
        prometheus(&stack).contains_key(&series("load_resident_ratio", B))
    });
    let metrics = prometheus(&stack);
    assert!(
        metrics[&series("load_resident_ratio", B)] < 0.1,
        "{metrics:?}"
    );
    assert_eq!(
        metrics.get(&series("prefetch_bytes_total", B)).copied(),
        Some(0.0),
        "{metrics:?}"
    );
    let log = stack.supervisor_stderr();
    assert!(!log.contains("prefetching weights"), "{log}");
    stack.stop();
}

/// `prefetch_min_free_bytes` above what the machine has, and `prefetch_max_bytes` below the
/// weights' size: each skips the prefetch and says so once, however often B waits again.
#[test]
fn the_memory_and_size_bounds_skip_the_prefetch_and_say_so_once() {
    let weights = weights("bounds", 64 << 20);
    for (tag, key, value, said) in [
        (
            "prefetch-min-free",
            "prefetch_min_free_bytes",
            1u64 << 50,
            "MemAvailable minus what is left to read would fall below prefetch_min_free_bytes",
        ),
        (
            "prefetch-max",
            "prefetch_max_bytes",
            1 << 20,
            "the weights are larger than prefetch_max_bytes",
        ),
    ] {
        // At debug level the worker also says when it skips again, silently at info level.
        let stack = Stack::start_logging(
            config(tag, &weights, |b| b.set(key, value)).build(),
            "debug",
        );
        let holder = stack.hold(A, "holder");
        if !weights.evict() {
            return;
        }
        for round in 1..=2 {
            let client = http::send_chat(stack.addr(), &b_request("b"));
            poll_until(DEADLINE, format!("{tag}: skip {round} seen"), || {
                let log = stack.supervisor_stderr();
                log.matches(said).count() + log.matches("weights prefetch skipped again").count()
                    == round
            });
            poll_until(DEADLINE, format!("{tag}: B waits"), || stack.waiting() == 1);
            drop(client);
            poll_until(DEADLINE, format!("{tag}: B's ticket left"), || {
                stack.waiting() == 0
            });
            let log = stack.supervisor_stderr();
            assert_eq!(log.matches(said).count(), 1, "{tag} round {round}:\n{log}");
        }
        assert!(weights.resident() < weights.len / 10, "{tag}: read ahead");
        assert!(
            !prometheus(&stack).contains_key(&series("prefetch_bytes_total", B)),
            "{tag}"
        );
        holder.disconnect();
        stack.stop();
    }
}

/// The `resident_percent` of each "weights resident at load start" line of the supervisor's log,
/// in order (only B has weights, so each is one of B's loads).
fn resident_at_load_starts(stack: &Stack) -> Vec<u64> {
    stack
        .supervisor_stderr()
        .lines()
        .filter(|line| line.contains("weights resident at load start"))
        .filter_map(|line| {
            let (_, rest) = line.split_once("resident_percent=")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// `prefetch_predict`: B was requested (and served), then A: while A idles and nothing waits,
/// B's weights, made cold after B's load, become resident before any request for B arrives;
/// the next request for B then starts its load with them resident.
#[test]
fn prefetch_predict_reads_the_likely_next_model_before_anyone_asks() {
    let weights = weights("predict", 256 << 20);
    let stack = Stack::start(
        config("prefetch-predict", &weights, |b| {
            b.set("prefetch_predict", true)
        })
        .build(),
    );
    stack.warm(B);
    // B's load read its weights: make them cold again, before A loads (B's own loaded
    // backend is never predicted, and A has no weights, so nothing reads them meanwhile).
    if !weights.evict() {
        return;
    }
    stack.warm(A);
    // At the idle I/O class: generous, as in the first test.
    poll_until(
        Duration::from_secs(90),
        "B's weights resident while A idles",
        || weights.resident() == weights.len,
    );
    let status = stack.status();
    assert_eq!(
        (status.loaded.as_deref(), status.waiting_requests),
        (Some(A), 0),
        "A is loaded and nothing waits: {status:?}"
    );
    let log = stack.supervisor_stderr();
    let starts = log
        .lines()
        .filter(|line| line.contains("predicted prefetch starts"))
        .collect::<Vec<_>>();
    assert!(
        starts.len() == 1 && starts[0].contains(B),
        "one predicted prefetch, of B:\n{log}"
    );
    assert!(
        prometheus(&stack)[&series("prefetch_bytes_total", B)] >= weights.len as f64 * 0.9,
        "the predicted read counts in the prefetch figures"
    );

    // The request for B: its switch starts with the weights resident.
    stack.warm(B);
    poll_until(DEADLINE, "B's second load start measured", || {
        resident_at_load_starts(&stack).len() == 2
    });
    let percents = resident_at_load_starts(&stack);
    assert!(
        percents[1] >= 99,
        "resident at B's load starts: {percents:?}"
    );
    poll_until(DEADLINE, "the ratio of B's second load start", || {
        prometheus(&stack)[&series("load_resident_ratio", B)] >= 0.99
    });
    let log = stack.supervisor_stderr();
    assert!(
        log.lines()
            .any(|line| line.contains("predicted prefetch ends") && line.contains("a load starts")),
        "{log}"
    );
    stack.stop();
}

/// `prefetch_predict: false`: the same requests, then A serves for 1.5 s with nothing waiting,
/// and B's weights stay cold.
#[test]
fn without_prefetch_predict_nothing_is_read_before_anyone_asks() {
    let weights = weights("predict-off", 64 << 20);
    let stack = Stack::start(
        config("prefetch-predict-off", &weights, |b| {
            b.set("prefetch_predict", false)
        })
        .build(),
    );
    stack.warm(B);
    if !weights.evict() {
        return;
    }
    stack.warm(A);
    let holder = stack.hold(A, "holder");
    wait_until_held(&stack, A, "leased", Duration::from_millis(1500));
    assert!(
        weights.resident() < weights.len / 10,
        "read ahead without prefetch_predict"
    );
    let log = stack.supervisor_stderr();
    assert!(!log.contains("predicted prefetch"), "{log}");
    assert!(!log.contains("prefetching weights"), "{log}");
    holder.disconnect();
    stack.stop();
}
