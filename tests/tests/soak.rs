//! The soak (issue 15, item 3): many mixed requests from concurrent clients while every
//! process is hurt in turn, then a full audit.
//!
//! Traffic: JSON and SSE, two models and their alias (so the backend switches), the three
//! service tiers, slow readers, and clients that go away in every phase (mid-upload, while
//! queued or loading, mid-stream). Faults, each at a fixed share of the requests: the proxy
//! is SIGKILLed and restarted (20 % and 80 %), the backend is SIGKILLed while a stream runs
//! (40 %), the supervisor is restarted gracefully (60 %).
//!
//! Afterwards: every request ended, with an HTTP response or a clean connection error,
//! within its bound; every request that was given a request ID has exactly one record, no
//! record is duplicated, and no request is missing beyond those cut off by a proxy kill
//! before they reached the supervisor (docs/accounting.md#when-the-proxy-dies); every backend the
//! run started is gone except the serving one; `strata-ctl status` shows no lease and no
//! waiting ticket; the JSONL file and the ring of the current instance agree line for line.
//!
//! Short form (in `cargo test`, so in `.ci/run`): `SOAK_REQUESTS` defaults to 2000 with
//! `SOAK_CLIENTS` 12. Long form (docs/testing.md#soak): `SOAK_REQUESTS=50000 cargo test --release
//! -p strata-e2e --test soak -- --nocapture`.
//!
//! A test binary of its own, not a module of `e2e/`: it loads the machine on purpose, and
//! the other files' tests beside it would see their deadlines and keepalive gaps stretched;
//! alone, it runs after or before them. The long form above also names it with `--test`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{Record, assert_all_schema, jsonl_lines, page, with_request_log};
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for, procs};
use strata_protocol::control::Status;

const A: &str = "flash-a";
const B: &str = "flash-b";
const ALIAS: &str = "qwen3.8-flash-next";
/// No single request may take longer than this, whatever happens around it.
const REQUEST_BOUND: Duration = Duration::from_secs(60);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift64*), one per client, so a failing run can be
/// repeated with the same `SOAK_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Json,
    Stream,
    SlowStream,
    GoneMidUpload,
    GoneWhileWaiting,
    GoneMidStream,
}

/// How one request ended, from the client's side.
#[derive(Debug, Clone)]
struct Outcome {
    kind: Kind,
    /// The HTTP status, when a response head arrived.
    status: Option<u16>,
    request_id: Option<String>,
    /// The connection failed or closed before a response (proxy down or killed), or the
    /// client itself left: a clean end without a response.
    no_response: Option<String>,
    took: Duration,
}

fn pick_model(rng: &mut Rng) -> &'static str {
    match rng.below(10) {
        0..=5 => A,
        6..=8 => B,
        _ => ALIAS,
    }
}

fn body(rng: &mut Rng, model: &str, stream: bool) -> Value {
    let mut body = chat_body(model, stream);
    body["service_tier"] = json!(["priority", "default", "flex"][rng.below(3) as usize]);
    body["fake"] = json!({"tokens": 4 + rng.below(12), "token_delay_ms": 2 + rng.below(8)});
    body
}

fn one_request(addr: SocketAddr, rng: &mut Rng) -> Outcome {
    let started = Instant::now();
    let kind = match rng.below(20) {
        0..=6 => Kind::Json,
        7..=12 => Kind::Stream,
        13..=14 => Kind::SlowStream,
        15 => Kind::GoneMidUpload,
        16..=17 => Kind::GoneWhileWaiting,
        _ => Kind::GoneMidStream,
    };
    let model = pick_model(rng);
    let mut outcome = Outcome {
        kind,
        status: None,
        request_id: None,
        no_response: None,
        took: Duration::ZERO,
    };
    let stream = matches!(kind, Kind::Stream | Kind::SlowStream | Kind::GoneMidStream);
    let request = body(rng, model, stream).to_string();
    // While no proxy listens (between a kill and the restart), a client retries, as a
    // client behind a socket-activated listener would not even notice.
    let mut conn = loop {
        match http::Conn::connect(addr) {
            Ok(conn) => break conn,
            Err(err) if started.elapsed() < REQUEST_BOUND / 2 => {
                let _ = err;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => {
                outcome.no_response = Some(format!("connect: {err}"));
                outcome.took = started.elapsed();
                return outcome;
            }
        }
    };
    let head = http::request_bytes(
        addr,
        "POST",
        http::CHAT_PATH,
        &[("content-type", "application/json")],
        request.as_bytes(),
    );
    if kind == Kind::GoneMidUpload {
        // The head and part of the body, then away.
        let cut = head.len() - request.len() / 2;
        let _ = conn.write(&head[..cut]);
        outcome.no_response = Some("left mid-upload".into());
        outcome.took = started.elapsed();
        return outcome;
    }
    if let Err(err) = conn.write(&head) {
        outcome.no_response = Some(format!("write: {err}"));
        outcome.took = started.elapsed();
        return outcome;
    }
    if kind == Kind::GoneWhileWaiting {
        // Before any answer: queued, loading, or just dispatched.
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        outcome.no_response = Some("left while waiting".into());
        outcome.took = started.elapsed();
        return outcome;
    }
    let response = match conn.try_into_stream(REQUEST_BOUND) {
        Ok(response) => response,
        Err(err) => {
            outcome.no_response = Some(format!("no response head: {err}"));
            outcome.took = started.elapsed();
            return outcome;
        }
    };
    let mut response = response;
    outcome.status = Some(response.status);
    outcome.request_id = response.header("x-strata-request-id").map(str::to_owned);
    match kind {
        Kind::GoneMidStream => {
            let _ = response.read_some(64, REQUEST_BOUND);
        }
        Kind::SlowStream => {
            // A reader that takes a little at a time.
            response.set_read_size(64);
            let deadline = Instant::now() + REQUEST_BOUND;
            while Instant::now() < deadline {
                match response.read_some(64, REQUEST_BOUND) {
                    Ok(Some(_)) => std::thread::sleep(Duration::from_millis(3)),
                    Ok(None) | Err(_) => break,
                }
            }
        }
        _ => {
            // An error mid-body is a clean end too (a killed proxy or backend).
            let _ = response.try_read_to_end(REQUEST_BOUND);
        }
    }
    outcome.took = started.elapsed();
    outcome
}

/// The backends the run started that still run (besides `serving`).
fn orphaned_backends(stack: &Stack, serving: Option<u32>) -> Vec<u32> {
    stack
        .fake_log()
        .starts()
        .iter()
        .map(|start| start.pid)
        .filter(|pid| Some(*pid) != serving && procs::is_alive(*pid))
        .collect()
}

#[test]
fn soak_with_every_process_hurt_loses_no_record_and_leaves_nothing_behind() {
    let requests = env_usize("SOAK_REQUESTS", 2000);
    let clients = env_usize("SOAK_CLIENTS", 12);
    let seed = env_usize("SOAK_SEED", 0x5eed) as u64;
    let mut config = ConfigBuilder::new("soak")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .alias(ALIAS, &[A, B])
        .wait_when_busy(true)
        // The backend probes run through the whole soak (every switch, crash and restart),
        // often, with the default "report": they may never lose a record or stop anything.
        .set("backend_probe_ms", 500)
        .build();
    let log_path = with_request_log(
        &mut config,
        json!({"request_log_capacity": 100_000, "request_log_max_bytes": 1_073_741_824u64}),
    );
    let mut stack = Stack::start(config);
    let addr = stack.addr();
    let started = Instant::now();

    // Clients run until at least `requests` have been sent and every fault is over.
    let faults_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::with_capacity(requests)));
    let workers: Vec<_> = (0..clients)
        .map(|n| {
            let (next, finished, outcomes) = (next.clone(), finished.clone(), outcomes.clone());
            let faults_done = faults_done.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_add(n as u64 + 1).wrapping_mul(0x9e37_79b9));
                while next.fetch_add(1, Ordering::SeqCst) < requests
                    || !faults_done.load(Ordering::SeqCst)
                {
                    let outcome = one_request(addr, &mut rng);
                    outcomes.lock().unwrap().push(outcome);
                    finished.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();

    // Each fault comes once the last one is over and a sixth of the requests have finished
    // since, so every fault meets traffic (a request refused in a fault's gap takes no time).
    let segment = requests / 6;
    let mut recovered = 0;
    let wait_traffic = |recovered: usize| {
        poll_for(
            Duration::from_secs(600),
            "traffic after the last fault",
            || (finished.load(Ordering::SeqCst) >= recovered + segment).then_some(()),
        );
    };
    let connected = |stack: &Stack| {
        poll_for(DEADLINE, "the proxy to be connected", || {
            (stack.status().proxies == 1).then_some(())
        });
        finished.load(Ordering::SeqCst)
    };
    let kill_proxy = |stack: &mut Stack| {
        stack.kill_proxy(Signal::SIGKILL);
        stack.wait_proxy_exit(DEADLINE);
        stack.start_proxy();
    };
    wait_traffic(recovered);
    kill_proxy(&mut stack);
    recovered = connected(&stack);
    wait_traffic(recovered);
    // The backend dies while a stream runs on it.
    let child = poll_for(DEADLINE, "a lease on a running backend", || {
        let status = stack.status();
        (status.active_leases > 0)
            .then_some(status.child_pid)
            .flatten()
    });
    procs::signal(child, Signal::SIGKILL);
    recovered = finished.load(Ordering::SeqCst);
    wait_traffic(recovered);
    let first_instance = stack.status().instance_id.clone();
    stack.supervisor().restart();
    assert_ne!(stack.status().instance_id, first_instance, "a new instance");
    recovered = connected(&stack);
    wait_traffic(recovered);
    kill_proxy(&mut stack);
    recovered = connected(&stack);
    wait_traffic(recovered);
    faults_done.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().expect("a client thread panicked");
    }
    let elapsed = started.elapsed();
    let outcomes = outcomes.lock().unwrap().clone();
    assert!(outcomes.len() >= requests);
    let requests = outcomes.len();

    // Every request ended within its bound, with a response or a clean error.
    let mut by_kind: HashMap<(Kind, Option<u16>), usize> = HashMap::new();
    for outcome in &outcomes {
        *by_kind.entry((outcome.kind, outcome.status)).or_default() += 1;
        assert!(outcome.took < REQUEST_BOUND, "{outcome:?}");
        assert!(
            outcome.status.is_some() || outcome.no_response.is_some(),
            "{outcome:?}"
        );
        if let Some(status) = outcome.status {
            assert!(
                matches!(status, 200 | 429 | 502 | 503 | 504),
                "an unexpected status: {outcome:?}"
            );
        }
    }

    // Nothing is left running or held.
    let status = poll_for(DEADLINE, "no lease and no waiting ticket", || {
        let status = ctl_status(&stack);
        (status.active_leases == 0 && status.waiting_requests == 0).then_some(status)
    });
    let serving = status.child_pid;
    let orphans = poll_for(DEADLINE, "every replaced backend to be gone", || {
        let orphans = orphaned_backends(&stack, serving);
        orphans.is_empty().then_some(orphans)
    });
    assert!(orphans.is_empty());

    // The records: one per request that reached the supervisor, none twice.
    let lines = jsonl_lines(&log_path);
    let records: Vec<Record> = lines.iter().map(|line| Record::new(line)).collect();
    let mut ids = HashSet::new();
    for record in &records {
        assert!(
            ids.insert(record.request_id.clone()),
            "a duplicate record: {record}"
        );
    }
    let mut per_instance: HashMap<String, Vec<Record>> = HashMap::new();
    for record in &records {
        let id = &record.request_id;
        let instance = if id.starts_with("proxy-") {
            "proxy".to_owned()
        } else {
            id.rsplit_once('-').unwrap().0.to_owned()
        };
        per_instance
            .entry(instance)
            .or_default()
            .push(record.clone());
    }
    for (instance, records) in &per_instance {
        if instance != "proxy" {
            assert_all_schema(records, instance);
        }
    }
    let told: Vec<&Outcome> = outcomes
        .iter()
        .filter(|outcome| outcome.request_id.is_some())
        .collect();
    for outcome in &told {
        let id = outcome.request_id.as_deref().unwrap();
        assert!(ids.contains(id), "no record for {outcome:?}");
    }
    // Requests that reached the proxy (not refused at connect) and have no record: only
    // those cut off by a proxy kill can be, and only before they reached the supervisor.
    let reached_proxy = outcomes
        .iter()
        .filter(|outcome| {
            !outcome
                .no_response
                .as_deref()
                .is_some_and(|why| why.starts_with("connect"))
        })
        .count();
    let unrecorded = reached_proxy.saturating_sub(records.len());
    let cut_off = outcomes
        .iter()
        .filter(|outcome| {
            outcome.status.is_none()
                && outcome
                    .no_response
                    .as_deref()
                    .is_some_and(|why| why.starts_with("no response") || why.starts_with("write"))
        })
        .count();
    assert!(
        records.len() <= reached_proxy,
        "more records ({}) than requests that reached a proxy ({reached_proxy})",
        records.len()
    );
    assert!(
        unrecorded <= cut_off + 2 * clients,
        "{unrecorded} requests have no record; only {cut_off} were cut off by a kill (and at \
         most one per client per proxy kill can have been lost mid-upload)"
    );

    // The ring of the current instance and the file agree line for line.
    let instance = status.instance_id.clone();
    let mut ring_all: Vec<String> = Vec::new();
    let mut after = 0;
    loop {
        let more = page(addr, &format!("after={after}&limit=1000"));
        let Some(last) = more.records.last() else {
            break;
        };
        after = last.seq;
        ring_all.extend(more.records.iter().map(|record| record.raw.clone()));
    }
    let of_instance = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|line| {
                Record::new(line)
                    .request_id
                    .starts_with(&format!("{instance}-"))
            })
            .cloned()
            .collect()
    };
    let (file_current, ring_current) = (of_instance(&lines), of_instance(&ring_all));
    assert_eq!(ring_current, file_current, "the ring and the file differ");

    let mut why: HashMap<&str, usize> = HashMap::new();
    for outcome in &outcomes {
        if let Some(reason) = &outcome.no_response {
            *why.entry(reason.split(':').next().unwrap()).or_default() += 1;
        }
    }
    println!("no response: {why:?}");
    let mut kinds: Vec<String> = by_kind
        .iter()
        .map(|((kind, status), n)| format!("{kind:?}/{status:?}: {n}"))
        .collect();
    kinds.sort();
    println!(
        "soak: {requests} requests by {clients} clients in {elapsed:.1?}; {} records \
         (per instance: {:?}), {} told a request ID, {unrecorded} unrecorded of {cut_off} cut off\n{}",
        records.len(),
        per_instance
            .iter()
            .map(|(instance, records)| (instance.as_str(), records.len()))
            .collect::<Vec<_>>(),
        told.len(),
        kinds.join("\n")
    );
    stack.stop();
}

/// `strata-ctl status SOCKET`, as an operator runs it.
fn ctl_status(stack: &Stack) -> Status {
    let output = std::process::Command::new(strata_e2e::binaries::binary("strata-ctl"))
        .arg("status")
        .arg(&stack.config().control_socket)
        .output()
        .expect("run strata-ctl status");
    assert!(output.status.success(), "strata-ctl status: {output:?}");
    let line: Value =
        serde_json::from_slice(&output.stdout).expect("strata-ctl status prints JSON");
    strata_e2e::parse_status(&line)
}
