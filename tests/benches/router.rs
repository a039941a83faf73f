//! The router benchmark: direct vs nginx vs strata-router, in one interleaved run.
//!
//! ```sh
//! cargo bench -p strata-e2e --bench router                  # full run (about 7 minutes)
//! cargo bench -p strata-e2e --bench router -- --quick       # smoke run (seconds)
//! cargo bench -p strata-e2e --bench router -- --markdown    # the tables as Markdown
//! ```
//!
//! It builds `strata-supervisor` and `strata-proxy` in the bench's own profile first (`cargo
//! build --release -p strata-supervisor -p strata-proxy --bins`, a no-op when they are up to
//! date; skipped when `STRATA_TEST_BIN_DIR` names prebuilt ones), then starts, all on loopback
//! with free ports and private 0700 temp directories, every process stopped by PID:
//!
//! - two **direct** upstreams (`bench-upstream`, the fast fake Strata of this crate), one per
//!   upstream kind: HTTP/1.1 keep-alive, and HTTP/1.0 + `Connection: close` (Strata's);
//! - **nginx**, when `nginx` is on `PATH` (and not `--no-nginx`), in front of both, with an
//!   upstream keep-alive pool and `proxy_buffering off`;
//! - the **router** (supervisor + proxy, wait-first mode, `max_pending` 4096) once per
//!   upstream kind, its backend being `bench-upstream` launched by the supervisor through the
//!   config's `python`; and a third router with two models and `max_pending` 1 for the waiting
//!   clients and the model switches.
//!
//! Every phase runs against every target and upstream kind in turn (direct, nginx, router),
//! and the whole sequence repeats for several rounds; the tables show the median of the rounds
//! and ratios to direct. CPU figures are the daemons' `utime + stime` from `/proc` (proxy +
//! supervisor for the router, the workers for nginx) summed over all rounds and divided by the
//! requests, events or MiB of those rounds. Every response is checked; any error fails the
//! run (exit 1). There are no thresholds.
//!
//! Flags (defaults for the full run; `--quick` in brackets): `--quick`, `--markdown`,
//! `--rounds N` (5 [1]), `--phase-ms N` (length of each timed phase: 2000 [250]), `--waiting
//! N` (waiting streaming clients: 10000 [100], at most the open-file limit minus 1000),
//! `--switches N` (10 [2]), `--phases LIST` (a comma-separated subset of `c=1`, `c=16`,
//! `c=64`, `sse`, `paced`, `bulk`, `16 streams`), `--no-nginx`.
//!
//! What each figure is:
//!
//! - non-stream: `c` connections post back to back for one phase; latency is request sent →
//!   whole body read; req/s is requests over the phase's wall time. The answer is 16 × 8 bytes
//!   of content (about 300 bytes of JSON).
//! - SSE: sequential streams on one connection for one phase; time to first event is request
//!   sent → first body byte, full stream → last byte.
//! - paced: streams whose frames are 10 ms apart; the largest gap between two frames seen.
//! - bulk: one stream of 64 KiB frames at a time; bytes over the summed stream times.
//! - 16 streams: 16 connections each get one stream at the same moment; all their frames over
//!   the wall time until the last one ends.
//! - RSS: `VmRSS` after the warm-up, `VmHWM` after the rounds. Waiting clients: the third
//!   router's single slot is kept busy by one endless paced stream, then N streaming requests
//!   are opened and held until the proxy's `/metrics` shows all N queued; the RSS growth of
//!   each daemon over N; then the busy stream ends, every waiting client is served and reads
//!   its answer, and both daemons' RSS 3 s later (what a burst leaves behind).
//! - model switch: requests alternate between two models whose backends take 100–200 ms to
//!   load (random, so the ready file does not appear at a fixed phase of the supervisor's
//!   polling); from the `ready_ns` the new backend logged right after renaming its ready file
//!   into place (CLOCK_REALTIME) to the first body byte at the client, and from the request to
//!   that byte.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::bench::load::{Conn, Error, StreamTiming};
use strata_e2e::bench::nginx::{self, Nginx};
use strata_e2e::bench::procstat::{self, Probe};
use strata_e2e::bench::report::{Table, Unit, format_ratio, format_value, median, percentile};
use strata_e2e::bench::upstream::realtime_ns;
use strata_e2e::bench::wire::{self, Shape};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, Daemon, ModelSpec, TempDir, free_port};
use tokio::sync::Barrier;

/// Where the benchmark's `bench-upstream` binary is (built by cargo with the bench).
const UPSTREAM_BIN: &str = env!("CARGO_BIN_EXE_bench-upstream");

/// The non-stream answer: 16 deltas of 8 bytes (128 bytes of content, ~300 bytes of JSON).
const JSON_SHAPE: Shape = Shape::new(16, 8);

#[derive(Debug, Clone)]
struct Options {
    quick: bool,
    markdown: bool,
    rounds: usize,
    phase: Duration,
    waiting: usize,
    switches: usize,
    nginx: bool,
    /// The phases to run (all by default; `--phases c=1,sse` for a focused look).
    phases: Vec<&'static str>,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut args = std::env::args().skip(1);
        let mut quick = false;
        let mut markdown = false;
        let mut rounds = None;
        let mut phase_ms = None;
        let mut waiting = None;
        let mut switches = None;
        let mut nginx = true;
        let mut phases: Vec<&'static str> = PHASES.to_vec();
        let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
            value
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} needs a positive number"))
        };
        while let Some(arg) = args.next() {
            match arg.as_str() {
                // cargo bench passes --bench to harness = false targets.
                "--bench" => {}
                "--quick" => quick = true,
                "--markdown" => markdown = true,
                "--no-nginx" => nginx = false,
                "--rounds" => rounds = Some(number("--rounds", args.next())?),
                "--phase-ms" => phase_ms = Some(number("--phase-ms", args.next())?),
                "--waiting" => waiting = Some(number("--waiting", args.next())?),
                "--switches" => switches = Some(number("--switches", args.next())?),
                "--phases" => {
                    let list = args.next().unwrap_or_default();
                    phases = list
                        .split(',')
                        .map(|name| {
                            PHASES
                                .iter()
                                .find(|p| **p == name)
                                .copied()
                                .ok_or_else(|| format!("unknown phase {name:?}: {PHASES:?}"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "-h" | "--help" => {
                    return Err(
                        "usage: router [--quick] [--markdown] [--rounds N] [--phase-ms N] \
                         [--waiting N] [--switches N] [--phases LIST] [--no-nginx]"
                            .into(),
                    );
                }
                other => return Err(format!("unknown argument {other} (try --help)")),
            }
        }
        Ok(Options {
            quick,
            markdown,
            rounds: rounds.unwrap_or(if quick { 1 } else { 5 }),
            phase: Duration::from_millis(phase_ms.unwrap_or(if quick { 250 } else { 2000 }) as u64),
            waiting: waiting.unwrap_or(if quick { 100 } else { 10_000 }),
            switches: switches.unwrap_or(if quick { 2 } else { 10 }),
            nginx,
            phases,
        })
    }

    /// One sequential SSE stream: `chunks` deltas of 16 bytes.
    fn sse_shape(&self) -> Shape {
        Shape::new(200, 16)
    }

    fn paced_shape(&self) -> Shape {
        Shape::new(if self.quick { 5 } else { 20 }, 16).paced(10)
    }

    fn paced_streams(&self) -> usize {
        if self.quick { 2 } else { 10 }
    }

    fn bulk_shape(&self) -> Shape {
        Shape::new(if self.quick { 32 } else { 160 }, 64 * 1024)
    }

    fn bulk_streams(&self) -> usize {
        if self.quick { 1 } else { 5 }
    }

    fn streams16_shape(&self) -> Shape {
        Shape::new(if self.quick { 100 } else { 2000 }, 16)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    KeepAlive,
    Close,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::KeepAlive, Kind::Close];

    fn http(self) -> &'static str {
        match self {
            Kind::KeepAlive => "1.1",
            Kind::Close => "1.0",
        }
    }

    /// The router's model ID for this kind (its upstream name is `up-ID`).
    fn model(self) -> &'static str {
        match self {
            Kind::KeepAlive => "h11",
            Kind::Close => "h10",
        }
    }

    fn upstream_name(self) -> String {
        format!("up-{}", self.model())
    }

    fn title(self) -> &'static str {
        match self {
            Kind::KeepAlive => "upstream HTTP/1.1 keep-alive",
            Kind::Close => "upstream HTTP/1.0 + Connection: close (like Strata)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Direct,
    Nginx,
    Router,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Nginx => "nginx",
            Target::Router => "router",
        }
    }
}

/// Where one (kind, target) is reached and whose CPU counts.
struct Endpoint {
    addr: SocketAddr,
    kind: Kind,
    probe: Probe,
}

impl Endpoint {
    fn request(&self, stream: bool, shape: Shape) -> Arc<[u8]> {
        wire::chat_request(self.kind.model(), stream, shape).into()
    }

    fn up(&self) -> String {
        self.kind.upstream_name()
    }
}

/// CPU ticks per process and the units (requests, events, MiB) they were spent on.
#[derive(Debug, Clone, Default)]
struct CpuSum {
    labels: Vec<&'static str>,
    ticks: Vec<u64>,
    units: f64,
}

#[derive(Default)]
struct Results {
    /// Per-round values.
    samples: BTreeMap<(Kind, Target, &'static str), Vec<f64>>,
    cpu: BTreeMap<(Kind, Target, &'static str), CpuSum>,
    rss_idle: BTreeMap<(Kind, Target), u64>,
    rss_peak: BTreeMap<(Kind, Target), u64>,
    router_rss_idle: BTreeMap<(Kind, &'static str), u64>,
}

impl Results {
    fn sample(&mut self, kind: Kind, target: Target, metric: &'static str, value: f64) {
        self.samples
            .entry((kind, target, metric))
            .or_default()
            .push(value);
    }

    fn cpu(
        &mut self,
        ep: &Endpoint,
        target: Target,
        metric: &'static str,
        spent: CpuSpent,
        units: f64,
    ) {
        let sum = self.cpu.entry((ep.kind, target, metric)).or_default();
        if sum.ticks.is_empty() {
            sum.labels = ep.probe.procs.iter().map(|(label, _)| *label).collect();
            sum.ticks = vec![0; sum.labels.len()];
        }
        for (total, spent) in sum.ticks.iter_mut().zip(spent.0) {
            *total += spent;
        }
        sum.units += units;
    }

    fn value(&self, kind: Kind, target: Target, metric: &str) -> Option<f64> {
        if let Some(sum) = self
            .cpu
            .iter()
            .find(|((k, t, m), _)| *k == kind && *t == target && *m == metric)
            .map(|(_, sum)| sum)
        {
            return cpu_micros(sum, None);
        }
        self.samples
            .iter()
            .find(|((k, t, m), _)| *k == kind && *t == target && *m == metric)
            .and_then(|(_, values)| median(values))
    }
}

/// CPU µs per unit of `sum`, for one process (`Some(index)`) or all.
fn cpu_micros(sum: &CpuSum, only: Option<usize>) -> Option<f64> {
    if sum.labels.is_empty() || sum.units <= 0.0 {
        return None;
    }
    let ticks: u64 = match only {
        Some(i) => sum.ticks[i],
        None => sum.ticks.iter().sum(),
    };
    Some(procstat::ticks_to_duration(ticks).as_secs_f64() * 1e6 / sum.units)
}

/// CPU ticks spent per process during a phase.
struct CpuSpent(Vec<u64>);

fn measure_start(probe: &Probe) -> Vec<u64> {
    probe.ticks()
}

fn measure_end(probe: &Probe, before: Vec<u64>) -> CpuSpent {
    CpuSpent(
        probe
            .ticks()
            .into_iter()
            .zip(before)
            .map(|(after, before)| after.saturating_sub(before))
            .collect(),
    )
}

// ---- phases ---------------------------------------------------------------------------------

/// `conc` keep-alive connections posting non-stream requests back to back for `duration`.
async fn nonstream(
    ep: &Endpoint,
    target: Target,
    conc: usize,
    duration: Duration,
    res: &mut Results,
    names: (&'static str, &'static str, &'static str, &'static str),
) -> Result<(), Error> {
    let body = ep.request(false, JSON_SHAPE);
    let expect = JSON_SHAPE.json_len(&ep.up());
    let barrier = Arc::new(Barrier::new(conc + 1));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..conc {
        let (addr, body, barrier) = (ep.addr, body.clone(), barrier.clone());
        workers.spawn(async move {
            let mut conn = Conn::new(addr);
            // One request to open the connection (and warm it) before the clock starts.
            let warm = match conn.post(&body).await {
                Ok(head) => conn.read_json(&head, expect).await,
                Err(err) => Err(err),
            };
            barrier.wait().await;
            warm?;
            let deadline = Instant::now() + duration;
            let mut latencies = Vec::with_capacity(4096);
            while Instant::now() < deadline {
                let sent = Instant::now();
                let head = conn.post(&body).await?;
                conn.read_json(&head, expect).await?;
                latencies.push(sent.elapsed().as_nanos() as u64);
            }
            Ok::<_, Error>(latencies)
        });
    }
    barrier.wait().await;
    let started = Instant::now();
    let cpu = measure_start(&ep.probe);
    let mut latencies = Vec::new();
    while let Some(joined) = workers.join_next().await {
        latencies.extend(joined.map_err(|err| format!("worker panicked: {err}"))??);
    }
    let elapsed = started.elapsed();
    let spent = measure_end(&ep.probe, cpu);
    latencies.sort_unstable();
    let (p50, p99, rps, cpu_name) = names;
    res.sample(
        ep.kind,
        target,
        p50,
        percentile(&latencies, 50.0) as f64 / 1e3,
    );
    res.sample(
        ep.kind,
        target,
        p99,
        percentile(&latencies, 99.0) as f64 / 1e3,
    );
    res.sample(
        ep.kind,
        target,
        rps,
        latencies.len() as f64 / elapsed.as_secs_f64(),
    );
    res.cpu(ep, target, cpu_name, spent, latencies.len() as f64);
    Ok(())
}

/// Sequential streams on one connection, for `duration` (or `count` streams when given).
async fn sequential_streams(
    ep: &Endpoint,
    shape: Shape,
    duration: Duration,
    count: Option<usize>,
    count_events: bool,
) -> Result<(Vec<StreamTiming>, CpuSpent), Error> {
    let body = ep.request(true, shape);
    let expect = shape.sse_len(&ep.up());
    let mut conn = Conn::new(ep.addr);
    // Warm the connection (and check the stream) before the clock starts.
    let head = conn.post(&body).await?;
    conn.read_sse(&head, Instant::now(), expect, count_events)
        .await?;
    let cpu = measure_start(&ep.probe);
    let deadline = Instant::now() + duration;
    let mut timings = Vec::new();
    loop {
        let done = match count {
            Some(n) => timings.len() >= n,
            None => Instant::now() >= deadline,
        };
        if done {
            break;
        }
        let sent = Instant::now();
        let head = conn.post(&body).await?;
        let timing = conn.read_sse(&head, sent, expect, count_events).await?;
        if count_events && timing.events != shape.sse_events() {
            return Err(format!(
                "{} frames in a stream, expected {}",
                timing.events,
                shape.sse_events()
            ));
        }
        timings.push(timing);
    }
    Ok((timings, measure_end(&ep.probe, cpu)))
}

async fn sse(
    ep: &Endpoint,
    target: Target,
    opts: &Options,
    res: &mut Results,
) -> Result<(), Error> {
    let shape = opts.sse_shape();
    let (timings, spent) = sequential_streams(ep, shape, opts.phase, None, true).await?;
    let mut first: Vec<u64> = timings
        .iter()
        .map(|t| t.first_event.as_nanos() as u64)
        .collect();
    let mut total: Vec<u64> = timings.iter().map(|t| t.total.as_nanos() as u64).collect();
    first.sort_unstable();
    total.sort_unstable();
    res.sample(
        ep.kind,
        target,
        "sse_first",
        percentile(&first, 50.0) as f64 / 1e3,
    );
    res.sample(
        ep.kind,
        target,
        "sse_total",
        percentile(&total, 50.0) as f64 / 1e3,
    );
    let events: u64 = timings.iter().map(|t| t.events).sum();
    res.cpu(ep, target, "cpu_sse", spent, events as f64);
    Ok(())
}

async fn paced(
    ep: &Endpoint,
    target: Target,
    opts: &Options,
    res: &mut Results,
) -> Result<(), Error> {
    let (timings, _) = sequential_streams(
        ep,
        opts.paced_shape(),
        Duration::ZERO,
        Some(opts.paced_streams()),
        true,
    )
    .await?;
    let max_gap = timings.iter().map(|t| t.max_gap).max().unwrap_or_default();
    res.sample(ep.kind, target, "paced_gap", max_gap.as_secs_f64() * 1e3);
    Ok(())
}

async fn bulk(
    ep: &Endpoint,
    target: Target,
    opts: &Options,
    res: &mut Results,
) -> Result<(), Error> {
    let (timings, spent) = sequential_streams(
        ep,
        opts.bulk_shape(),
        Duration::ZERO,
        Some(opts.bulk_streams()),
        false,
    )
    .await?;
    let bytes: u64 = timings.iter().map(|t| t.bytes).sum();
    let secs: f64 = timings.iter().map(|t| t.total.as_secs_f64()).sum();
    res.sample(ep.kind, target, "bulk", bytes as f64 / 1e6 / secs);
    res.cpu(
        ep,
        target,
        "cpu_bulk",
        spent,
        bytes as f64 / (1024.0 * 1024.0),
    );
    Ok(())
}

/// 16 streams at once, each on its own connection.
async fn streams16(
    ep: &Endpoint,
    target: Target,
    opts: &Options,
    res: &mut Results,
) -> Result<(), Error> {
    const STREAMS: usize = 16;
    let shape = opts.streams16_shape();
    let body = ep.request(true, shape);
    let expect = shape.sse_len(&ep.up());
    let warm = Shape::new(1, 1);
    let warm_len = warm.sse_len(&ep.up());
    let barrier = Arc::new(Barrier::new(STREAMS + 1));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..STREAMS {
        let (addr, body, barrier) = (ep.addr, body.clone(), barrier.clone());
        let warm_body = ep.request(true, warm);
        workers.spawn(async move {
            let mut conn = Conn::new(addr);
            // One short stream to open the connection before the clock starts.
            let warm = match conn.post(&warm_body).await {
                Ok(head) => conn
                    .read_sse(&head, Instant::now(), warm_len, true)
                    .await
                    .map(|_| ()),
                Err(err) => Err(err),
            };
            barrier.wait().await;
            warm?;
            let sent = Instant::now();
            let head = conn.post(&body).await?;
            conn.read_sse(&head, sent, expect, true).await
        });
    }
    barrier.wait().await;
    let started = Instant::now();
    let cpu = measure_start(&ep.probe);
    let mut events = 0u64;
    while let Some(joined) = workers.join_next().await {
        let timing = joined.map_err(|err| format!("worker panicked: {err}"))??;
        if timing.events != shape.sse_events() {
            return Err(format!(
                "{} frames in a stream, expected {}",
                timing.events,
                shape.sse_events()
            ));
        }
        events += timing.events;
    }
    let elapsed = started.elapsed();
    let spent = measure_end(&ep.probe, cpu);
    res.sample(
        ep.kind,
        target,
        "s16_rate",
        events as f64 / elapsed.as_secs_f64(),
    );
    res.cpu(ep, target, "cpu_s16", spent, events as f64);
    Ok(())
}

/// Checks a target's answers byte for byte and warms it up.
async fn check_and_warm(ep: &Endpoint) -> Result<(), Error> {
    let up = ep.up();
    let mut conn = Conn::new(ep.addr);
    for _ in 0..20 {
        let head = conn.post(&ep.request(false, JSON_SHAPE)).await?;
        let body = conn.read_all(&head).await?;
        if body[..] != wire::json_response(&up, &JSON_SHAPE)[..] {
            return Err(format!(
                "{}: unexpected JSON answer: {}",
                ep.addr,
                String::from_utf8_lossy(&body)
            ));
        }
        let shape = Shape::new(4, 5);
        let head = conn.post(&ep.request(true, shape)).await?;
        let body = conn.read_all(&head).await?;
        let mut expect = Vec::new();
        for _ in 0..shape.chunks {
            expect.extend(wire::sse_chunk(&up, shape.bytes as usize));
        }
        expect.extend(wire::sse_final(&up, shape.chunks));
        expect.extend(wire::SSE_DONE);
        if body[..] != expect[..] {
            return Err(format!(
                "{}: unexpected SSE answer: {}",
                ep.addr,
                String::from_utf8_lossy(&body)
            ));
        }
    }
    Ok(())
}

// ---- the router-only phases --------------------------------------------------------------------

/// `GET /metrics` of a proxy.
async fn metrics(addr: SocketAddr) -> Result<Value, Error> {
    let mut conn = Conn::new(addr);
    let head = conn.send("GET", "/metrics", b"").await?;
    let body = conn.read_all(&head).await?;
    if head.status != 200 {
        return Err(format!("/metrics answered {}", head.status));
    }
    serde_json::from_slice(&body).map_err(|err| format!("/metrics is not JSON: {err}"))
}

async fn wait_metric(
    addr: SocketAddr,
    key: &str,
    want: u64,
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let doc = metrics(addr).await?;
        if doc[key].as_u64() == Some(want) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("/metrics {key} stayed {} (want {want})", doc[key]));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Waiting {
    clients: usize,
    proxy_before_kib: u64,
    proxy_after_kib: u64,
    supervisor_before_kib: u64,
    supervisor_after_kib: u64,
    /// Three seconds after every waiting client was served and left.
    proxy_finished_kib: u64,
    supervisor_finished_kib: u64,
}

/// Holds `n` streaming clients waiting (the one slot of `sw-a` busy with a long stream) and
/// measures what they cost the daemons' RSS.
async fn waiting(
    addr: SocketAddr,
    proxy: u32,
    supervisor: u32,
    n: usize,
) -> Result<Waiting, Error> {
    // The busy stream: effectively endless, read by a task until we drop it.
    let busy_shape = Shape::new(1_000_000, 8).paced(100);
    let mut conn = Conn::new(addr);
    let head = conn
        .post(&wire::chat_request("sw-a", true, busy_shape))
        .await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        tokio::select! {
            _ = stopped => {}
            _ = conn.read_body(&head, |_, _| {}) => {}
        }
        // Dropping the connection here is the client going away.
    });
    wait_metric(addr, "in_flight", 1, Duration::from_secs(20)).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let proxy_before_kib = procstat::rss_kib(proxy).unwrap_or(0);
    let supervisor_before_kib = procstat::rss_kib(supervisor).unwrap_or(0);

    let body: Arc<[u8]> = wire::chat_request("sw-a", true, Shape::new(1, 8)).into();
    let connecting = Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (body, connecting) = (body.clone(), connecting.clone());
        tasks.spawn(async move {
            let permit = connecting.acquire_owned().await.expect("semaphore open");
            let mut conn = Conn::new(addr);
            // Wait-first: 200 and the SSE headers come as soon as the request is queued.
            let head = conn.post(&body).await?;
            drop(permit);
            if !head.content_type.starts_with("text/event-stream") {
                return Err(format!("a waiting client got {head:?}"));
            }
            Ok::<_, Error>((conn, head))
        });
    }
    let mut held = Vec::with_capacity(n);
    while let Some(joined) = tasks.join_next().await {
        held.push(joined.map_err(|err| format!("client panicked: {err}"))??);
    }
    wait_metric(addr, "queue_depth", n as u64, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let proxy_after_kib = procstat::rss_kib(proxy).unwrap_or(0);
    let supervisor_after_kib = procstat::rss_kib(supervisor).unwrap_or(0);
    // The busy stream ends; every waiting client is served in turn and reads its answer.
    let _ = stop.send(());
    let _ = reader.await;
    let mut served = tokio::task::JoinSet::new();
    for (mut conn, head) in held {
        served.spawn(async move { conn.read_body(&head, |_, _| {}).await });
    }
    while let Some(joined) = served.join_next().await {
        joined.map_err(|err| format!("client panicked: {err}"))??;
    }
    wait_metric(addr, "queue_depth", 0, Duration::from_secs(60)).await?;
    wait_metric(addr, "in_flight", 0, Duration::from_secs(20)).await?;
    // What stays once the burst is over (the proxy hands memory back within its 2 s check).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let proxy_finished_kib = procstat::rss_kib(proxy).unwrap_or(0);
    let supervisor_finished_kib = procstat::rss_kib(supervisor).unwrap_or(0);
    Ok(Waiting {
        clients: n,
        proxy_before_kib,
        proxy_after_kib,
        supervisor_before_kib,
        supervisor_after_kib,
        proxy_finished_kib,
        supervisor_finished_kib,
    })
}

struct Switch {
    /// Ready file written → first body byte at the client.
    overhead_ms: f64,
    /// Request sent → first body byte (stopping the old backend, starting and loading the new).
    total_ms: f64,
    /// The overhead step by step ([`SWITCH_STEPS`]), when every mark was found.
    steps: Option<Vec<f64>>,
    /// The old backend's stop: first signal → group reaped and confirmed gone.
    stop_ms: Option<f64>,
}

/// The steps of a switch's overhead, each from the mark before it (the first from the new
/// backend's ready file) to the one it names; the last ends at the first byte at the client.
const SWITCH_STEPS: [&str; 7] = [
    "supervisor notices the ready file",
    "its /health request reaches the backend",
    "health check passed (answer read)",
    "grant sent (state broadcast, ticket granted)",
    "grant read by the proxy",
    "chat request reaches the backend (proxy connect + write)",
    "first byte at the client (backend answer + relay)",
];

/// The switch router's log level: `strata::switch` debug lines mark each step.
const SWITCH_LOG: &str = "info,strata::switch=debug";

/// CLOCK_REALTIME nanoseconds of an RFC 3339 UTC timestamp as tracing writes it
/// (`2026-12-01T23:45:27.123456Z`). Not a record timestamp (those are whole milliseconds,
/// `strata_protocol::record::parse_timestamp`): a log line's, read with `time`'s RFC 3339 parser.
fn rfc3339_ns(text: &str) -> Option<u128> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339);
    u128::try_from(at.ok()?.unix_timestamp_nanos()).ok()
}

/// The time of the last `strata::switch` line containing `message` in `log`, after `after_ns`.
fn log_mark(log: &str, message: &str, after_ns: u128) -> Option<u128> {
    log.lines()
        .filter(|line| line.contains("strata::switch") && line.contains(message))
        .filter_map(|line| rfc3339_ns(line.split_whitespace().next()?))
        .filter(|ns| *ns > after_ns)
        .max()
}

/// The `stop_us` of the last "backend group stopped" line after `after_ns`.
fn stop_ms_after(log: &str, after_ns: u128) -> Option<f64> {
    log.lines()
        .filter(|line| line.contains("strata::switch") && line.contains("backend group stopped"))
        .filter(|line| {
            line.split_whitespace()
                .next()
                .and_then(rfc3339_ns)
                .is_some_and(|ns| ns > after_ns)
        })
        .filter_map(|line| {
            let rest = line.split("stop_us=").nth(1)?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<f64>().ok()
        })
        .next_back()
        .map(|us| us / 1000.0)
}

/// The latest `arrived_ns` of a `health` or `request` event the bench upstream logged.
fn last_arrival_ns(log: &Path, event: &str, model_name: &str) -> Option<u128> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["event"] == event && e["model_name"] == model_name)
        .filter_map(|e| e["arrived_ns"].as_u64().map(u128::from))
        .max()
}

/// The latest `ready_ns` the bench upstream logged for `model_name`.
fn last_ready_ns(log: &Path, model_name: &str) -> Option<u128> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "ready" && event["model_name"] == model_name)
        .filter_map(|event| event["ready_ns"].as_u64().map(u128::from))
        .max()
}

/// Alternates requests between `sw-b` and `sw-a`: each one waits for a model switch.
async fn switches(stack: &Stack, n: usize) -> Result<Vec<Switch>, Error> {
    let addr = stack.addr();
    let log = stack.config().fake_log.as_path();
    let mut conn = Conn::new(addr);
    let mut out = Vec::new();
    for i in 0..n {
        let model = if i % 2 == 0 { "sw-b" } else { "sw-a" };
        let up = format!("up-{model}");
        let sent_ns = realtime_ns();
        let head = conn
            .post(&wire::chat_request(model, true, Shape::new(1, 8)))
            .await?;
        let mut first_ns = None;
        conn.read_body(&head, |data, _| {
            if first_ns.is_none() && data.windows(5).any(|w| w == b"data:") {
                first_ns = Some(realtime_ns());
            }
        })
        .await?;
        let first_ns = first_ns.ok_or("the switch stream had no data frame")?;
        let ready_ns = last_ready_ns(log, &up)
            .filter(|ready| *ready > sent_ns)
            .ok_or_else(|| format!("no new ready file for {up}: the model did not switch"))?;
        // Each mark is written (synchronously, to the daemons' stderr files) before the step
        // after it begins, so all of them are in the files once the first byte is here.
        let supervisor_log = stack.supervisor_stderr();
        let proxy_log = stack.proxy_stderr();
        let marks = [
            Some(ready_ns),
            log_mark(&supervisor_log, "ready file seen", sent_ns),
            last_arrival_ns(log, "health", &up).filter(|ns| *ns > sent_ns),
            log_mark(&supervisor_log, "health check passed", sent_ns),
            log_mark(&supervisor_log, "switch grant sent", sent_ns),
            log_mark(&proxy_log, "switch grant received", sent_ns),
            last_arrival_ns(log, "request", &up).filter(|ns| *ns > sent_ns),
            Some(first_ns),
        ];
        let steps = marks
            .iter()
            .copied()
            .collect::<Option<Vec<u128>>>()
            .map(|marks| {
                marks
                    .windows(2)
                    .map(|pair| pair[1].saturating_sub(pair[0]) as f64 / 1e6)
                    .collect()
            });
        out.push(Switch {
            overhead_ms: (first_ns.saturating_sub(ready_ns)) as f64 / 1e6,
            total_ms: (first_ns.saturating_sub(sent_ns)) as f64 / 1e6,
            steps,
            stop_ms: stop_ms_after(&supervisor_log, sent_ns),
        });
    }
    Ok(out)
}

// ---- setup ----------------------------------------------------------------------------------

/// Raises the soft open-file limit to the hard one (the waiting clients need thousands) and
/// returns it.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    }
}

fn wait_ready_file(path: &Path, daemon: &mut Daemon) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        if let Some(status) = daemon.try_exit() {
            return Err(format!(
                "bench-upstream exited with {status}\n{}",
                daemon.stderr_report()
            ));
        }
        if Instant::now() >= deadline {
            return Err("bench-upstream did not write its ready file".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A direct upstream of `kind` on a free port.
fn start_direct(dir: &TempDir, kind: Kind) -> Result<(Daemon, SocketAddr), String> {
    let name = format!("direct-{}", kind.model());
    let profile = dir.join(format!("{name}.json"));
    let ready = dir.join(format!("{name}.ready"));
    std::fs::write(
        &profile,
        json!({"model_name": kind.upstream_name(), "bench": {"http": kind.http()}}).to_string(),
    )
    .map_err(|err| format!("write {}: {err}", profile.display()))?;
    let port = free_port();
    let mut command = Command::new(UPSTREAM_BIN);
    command
        .arg("--config")
        .arg(&profile)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .arg("--ready-file")
        .arg(&ready);
    let mut daemon = Daemon::spawn(&name, command, dir.path());
    wait_ready_file(&ready, &mut daemon)?;
    Ok((daemon, SocketAddr::from(([127, 0, 0, 1], port))))
}

fn bench_config(tag: &str) -> ConfigBuilder {
    ConfigBuilder::new(tag)
        .set("python", UPSTREAM_BIN)
        .wait_when_busy(true)
        .set("cache_lookup_ms", 0)
        .startup_ms(30_000)
}

/// The router for `kind`: one model whose backend is a `bench-upstream` of that kind.
fn start_router(kind: Kind) -> Stack {
    let config = bench_config(&format!("bench-{}", kind.model()))
        .set("max_pending", 4096)
        .model(ModelSpec::new(kind.model()).profile_key("bench", json!({"http": kind.http()})))
        .build();
    Stack::start(config)
}

/// The router for waiting clients and switches: two models, one slot.
fn start_switch_router() -> Stack {
    let spec = |id: &str| {
        ModelSpec::new(id).profile_key(
            "bench",
            json!({"http": "1.0", "load_ms": 100, "load_jitter_ms": 100}),
        )
    };
    let config = bench_config("bench-sw")
        .set("max_pending", 1)
        .model(spec("sw-a"))
        .model(spec("sw-b"))
        .build();
    // STRATA_BENCH_SWITCH_LOG=info: the same run without the marks (what they cost).
    let level = std::env::var("STRATA_BENCH_SWITCH_LOG").unwrap_or_else(|_| SWITCH_LOG.into());
    Stack::start_logging(config, &level)
}

fn router_probe(stack: &Stack) -> Probe {
    Probe {
        procs: vec![
            ("proxy", stack.proxy_pid()),
            ("supervisor", stack.supervisor_pid()),
        ],
    }
}

fn machine_notes() -> Vec<String> {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_default();
    vec![format!("{cpus} CPUs ({model}), Linux {kernel}")]
}

// ---- the run --------------------------------------------------------------------------------

/// nginx, its listener per upstream kind, and its version.
struct NginxTarget {
    nginx: Nginx,
    listens: Vec<(Kind, SocketAddr)>,
    version: String,
}

struct World {
    _dir: TempDir,
    direct: Vec<(Kind, Daemon, SocketAddr)>,
    nginx: Option<NginxTarget>,
    routers: Vec<(Kind, Stack)>,
    switch: Stack,
}

impl World {
    fn endpoints(&self) -> Vec<(Kind, Target, Endpoint)> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            let (_, _, addr) = self
                .direct
                .iter()
                .find(|(k, _, _)| *k == kind)
                .expect("direct");
            out.push((
                kind,
                Target::Direct,
                Endpoint {
                    addr: *addr,
                    kind,
                    probe: Probe { procs: Vec::new() },
                },
            ));
            if let Some(NginxTarget { nginx, listens, .. }) = &self.nginx {
                let addr = listens
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .expect("nginx listener")
                    .1;
                let procs = nginx.workers().iter().map(|pid| ("worker", *pid)).collect();
                out.push((
                    kind,
                    Target::Nginx,
                    Endpoint {
                        addr,
                        kind,
                        probe: Probe { procs },
                    },
                ));
            }
            let (_, stack) = self
                .routers
                .iter()
                .find(|(k, _)| *k == kind)
                .expect("router");
            out.push((
                kind,
                Target::Router,
                Endpoint {
                    addr: stack.addr(),
                    kind,
                    probe: router_probe(stack),
                },
            ));
        }
        out
    }

    fn stop(self) {
        for (_, stack) in self.routers {
            stack.stop();
        }
        self.switch.stop();
        if let Some(target) = self.nginx {
            target.nginx.stop();
        }
        drop(self.direct);
    }
}

fn start_world(opts: &Options) -> Result<World, String> {
    let dir = TempDir::new("bench");
    let mut direct = Vec::new();
    for kind in Kind::ALL {
        let (daemon, addr) = start_direct(&dir, kind)?;
        direct.push((kind, daemon, addr));
    }
    let nginx = match nginx::find_nginx().filter(|_| opts.nginx) {
        Some(binary) => {
            let nginx_dir = dir.subdir("nginx", 0o700);
            let listens: Vec<(Kind, SocketAddr)> = Kind::ALL
                .iter()
                .map(|kind| (*kind, SocketAddr::from(([127, 0, 0, 1], free_port()))))
                .collect();
            let routes: Vec<(SocketAddr, SocketAddr)> = listens
                .iter()
                .map(|(kind, listen)| {
                    let upstream = direct.iter().find(|(k, _, _)| k == kind).expect("direct").2;
                    (*listen, upstream)
                })
                .collect();
            let version = nginx::version(&binary);
            let nginx = Nginx::start(&binary, &nginx_dir, &routes)?;
            Some(NginxTarget {
                nginx,
                listens,
                version,
            })
        }
        None => None,
    };
    let routers = Kind::ALL
        .iter()
        .map(|kind| (*kind, start_router(*kind)))
        .collect();
    let switch = start_switch_router();
    Ok(World {
        _dir: dir,
        direct,
        nginx,
        routers,
        switch,
    })
}

const PHASES: [&str; 7] = ["c=1", "c=16", "c=64", "sse", "paced", "bulk", "16 streams"];

async fn run_phase(
    phase: &str,
    ep: &Endpoint,
    target: Target,
    opts: &Options,
    res: &mut Results,
) -> Result<(), Error> {
    match phase {
        "c=1" => {
            nonstream(
                ep,
                target,
                1,
                opts.phase,
                res,
                ("c1_p50", "c1_p99", "c1_rate", "cpu_c1"),
            )
            .await
        }
        "c=16" => {
            nonstream(
                ep,
                target,
                16,
                opts.phase,
                res,
                ("c16_p50", "c16_p99", "c16_rate", "cpu_c16"),
            )
            .await
        }
        "c=64" => {
            nonstream(
                ep,
                target,
                64,
                opts.phase,
                res,
                ("c64_p50", "c64_p99", "c64_rate", "cpu_c64"),
            )
            .await
        }
        "sse" => sse(ep, target, opts, res).await,
        "paced" => paced(ep, target, opts, res).await,
        "bulk" => bulk(ep, target, opts, res).await,
        "16 streams" => streams16(ep, target, opts, res).await,
        other => unreachable!("unknown phase {other}"),
    }
}

struct RouterExtras {
    waiting: Waiting,
    switches: Vec<Switch>,
    switch_idle_proxy_kib: u64,
    /// Round trip between two threads over a Unix socket pair, p50 µs: back to back, and
    /// each after 200 ms idle (what every hop of a switch pays after the load's wait).
    wakeup_busy_us: f64,
    wakeup_idle_us: f64,
}

/// The p50 round trip, in µs, of one byte between two threads over a Unix socket pair, each
/// round trip after `idle` without any.
fn wakeup_round_trip_us(idle: Duration, n: usize) -> f64 {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let (mut here, mut there) = UnixStream::pair().expect("a socket pair");
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        while there.read_exact(&mut byte).is_ok() {
            if there.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let mut samples = Vec::with_capacity(n);
    let mut byte = [0u8; 1];
    for _ in 0..n {
        if !idle.is_zero() {
            std::thread::sleep(idle);
        }
        let started = Instant::now();
        here.write_all(b"x").expect("write to the echo thread");
        here.read_exact(&mut byte)
            .expect("read from the echo thread");
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    drop(here);
    let _ = echo.join();
    median(&samples).unwrap_or(f64::NAN)
}

fn run(
    opts: &Options,
    runtime: &tokio::runtime::Runtime,
    world: &World,
) -> Result<(Results, RouterExtras), Error> {
    let endpoints = world.endpoints();
    let mut res = Results::default();
    eprintln!("checking and warming up {} targets", endpoints.len());
    for (kind, target, ep) in &endpoints {
        runtime
            .block_on(check_and_warm(ep))
            .map_err(|err| format!("{} ({}): {err}", target.name(), kind.title()))?;
    }
    std::thread::sleep(Duration::from_millis(200));
    for (kind, target, ep) in &endpoints {
        if !ep.probe.procs.is_empty() {
            res.rss_idle.insert((*kind, *target), ep.probe.rss_kib());
        }
        if *target == Target::Router {
            for (label, pid) in &ep.probe.procs {
                res.router_rss_idle
                    .insert((*kind, *label), procstat::rss_kib(*pid).unwrap_or(0));
            }
        }
    }
    for round in 1..=opts.rounds {
        let started = Instant::now();
        for phase in &opts.phases {
            for (kind, target, ep) in &endpoints {
                runtime
                    .block_on(run_phase(phase, ep, *target, opts, &mut res))
                    .map_err(|err| {
                        format!(
                            "round {round}, {phase}, {} ({}): {err}",
                            target.name(),
                            kind.title()
                        )
                    })?;
            }
        }
        eprintln!(
            "round {round}/{} done in {:.1} s",
            opts.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    for (kind, target, ep) in &endpoints {
        if !ep.probe.procs.is_empty() {
            res.rss_peak
                .insert((*kind, *target), ep.probe.peak_rss_kib());
        }
    }

    let sw = &world.switch;
    let proxy = sw.proxy_pid();
    let supervisor = sw.supervisor_pid();
    eprintln!("waiting clients: {}", opts.waiting);
    let extras = runtime.block_on(async {
        // Load sw-a first.
        let mut conn = Conn::new(sw.addr());
        let head = conn
            .post(&wire::chat_request("sw-a", false, JSON_SHAPE))
            .await?;
        conn.read_json(&head, JSON_SHAPE.json_len("up-sw-a"))
            .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let switch_idle_proxy_kib = procstat::rss_kib(proxy).unwrap_or(0);
        let waiting = waiting(sw.addr(), proxy, supervisor, opts.waiting).await?;
        eprintln!("model switches: {}", opts.switches);
        let switches = switches(sw, opts.switches).await?;
        let idle_samples = if opts.switches > 2 { 20 } else { 5 };
        Ok::<_, Error>(RouterExtras {
            waiting,
            switches,
            switch_idle_proxy_kib,
            wakeup_busy_us: wakeup_round_trip_us(Duration::ZERO, 200),
            wakeup_idle_us: wakeup_round_trip_us(Duration::from_millis(200), idle_samples),
        })
    })?;
    Ok((res, extras))
}

// ---- report ---------------------------------------------------------------------------------

struct Row {
    metric: &'static str,
    label: String,
    unit: Unit,
}

fn rows(opts: &Options) -> Vec<Row> {
    let row = |metric, label: &str, unit| Row {
        metric,
        label: label.to_owned(),
        unit,
    };
    let sse = opts.sse_shape();
    let paced = opts.paced_shape();
    let bulk = opts.bulk_shape();
    let s16 = opts.streams16_shape();
    vec![
        row("c1_p50", "non-stream c=1 p50", Unit::Micros),
        row("c1_p99", "non-stream c=1 p99", Unit::Micros),
        row("c1_rate", "non-stream c=1 req/s", Unit::Rate),
        row("c16_p50", "non-stream c=16 p50", Unit::Micros),
        row("c16_p99", "non-stream c=16 p99", Unit::Micros),
        row("c16_rate", "non-stream c=16 req/s", Unit::Rate),
        row("c64_p50", "non-stream c=64 p50", Unit::Micros),
        row("c64_p99", "non-stream c=64 p99", Unit::Micros),
        row("c64_rate", "non-stream c=64 req/s", Unit::Rate),
        row("cpu_c1", "CPU per request, c=1", Unit::Micros),
        row("cpu_c16", "CPU per request, c=16", Unit::Micros),
        row("cpu_c64", "CPU per request, c=64", Unit::Micros),
        row("sse_first", "SSE time to first event p50", Unit::Micros),
        row(
            "sse_total",
            &format!("SSE full stream p50 ({} × {} B)", sse.chunks, sse.bytes),
            Unit::Micros,
        ),
        row(
            "cpu_sse",
            "CPU per SSE event (sequential streams)",
            Unit::Micros,
        ),
        row(
            "paced_gap",
            &format!(
                "paced max inter-event gap ({} × {} ms, {} streams)",
                paced.chunks,
                paced.pace_ms,
                opts.paced_streams()
            ),
            Unit::Millis,
        ),
        row(
            "bulk",
            &format!(
                "bulk MB/s ({} MiB in {} KiB frames)",
                u64::from(bulk.chunks) * u64::from(bulk.bytes) / (1024 * 1024),
                bulk.bytes / 1024
            ),
            Unit::Rate,
        ),
        row("cpu_bulk", "CPU per MiB bulk", Unit::Micros),
        row(
            "s16_rate",
            &format!(
                "16 concurrent streams, events/s ({} × {} B each)",
                s16.chunks, s16.bytes
            ),
            Unit::Rate,
        ),
        row("cpu_s16", "CPU per event, 16 streams", Unit::Micros),
    ]
}

fn report(opts: &Options, world: &World, res: &Results, extras: &RouterExtras) -> String {
    let has_nginx = world.nginx.is_some();
    let mut targets = vec![Target::Direct];
    if has_nginx {
        targets.push(Target::Nginx);
    }
    targets.push(Target::Router);
    let mut header = vec!["metric"];
    header.extend(targets.iter().map(|t| t.name()));
    if has_nginx {
        header.extend(["nginx/direct", "router/direct", "router/nginx"]);
    } else {
        header.push("router/direct");
    }
    let mut tables = Vec::new();
    for kind in Kind::ALL {
        let mut table = Table::new(kind.title(), &header);
        let mut push = |label: String, values: Vec<Option<f64>>, unit: Unit| {
            let mut cells = vec![label];
            cells.extend(
                values
                    .iter()
                    .map(|v| v.map_or("—".into(), |v| format_value(v, unit))),
            );
            let get = |t: Target| targets.iter().position(|x| *x == t).and_then(|i| values[i]);
            if has_nginx {
                cells.push(format_ratio(get(Target::Nginx), get(Target::Direct)));
            }
            cells.push(format_ratio(get(Target::Router), get(Target::Direct)));
            if has_nginx {
                cells.push(format_ratio(get(Target::Router), get(Target::Nginx)));
            }
            table.row(cells);
        };
        for row in rows(opts) {
            let values = targets
                .iter()
                .map(|t| res.value(kind, *t, row.metric))
                .collect();
            push(row.label, values, row.unit);
        }
        let rss = |map: &BTreeMap<(Kind, Target), u64>| -> Vec<Option<f64>> {
            targets
                .iter()
                .map(|t| map.get(&(kind, *t)).map(|kib| *kib as f64))
                .collect()
        };
        push(
            "RSS idle, after warm-up (all processes)".into(),
            rss(&res.rss_idle),
            Unit::MiB,
        );
        push(
            "RSS peak (VmHWM) after the rounds".into(),
            rss(&res.rss_peak),
            Unit::MiB,
        );
        tables.push(table);
    }

    // The router's CPU and memory, per daemon.
    let mut split = Table::new(
        "router: CPU per unit and RSS by daemon",
        &["metric", "upstream", "proxy", "supervisor"],
    );
    for kind in Kind::ALL {
        for row in rows(opts)
            .into_iter()
            .filter(|r| r.metric.starts_with("cpu_"))
        {
            if let Some(sum) = res.cpu.get(&(kind, Target::Router, row.metric)) {
                let cell = |label| {
                    sum.labels
                        .iter()
                        .position(|l| *l == label)
                        .and_then(|i| cpu_micros(sum, Some(i)))
                        .map_or("—".into(), |v| format_value(v, Unit::Micros))
                };
                split.row(vec![
                    row.label.clone(),
                    kind.model().into(),
                    cell("proxy"),
                    cell("supervisor"),
                ]);
            }
        }
        let rss = |label| {
            res.router_rss_idle
                .get(&(kind, label))
                .map_or("—".into(), |kib| format_value(*kib as f64, Unit::MiB))
        };
        split.row(vec![
            "RSS idle".into(),
            kind.model().into(),
            rss("proxy"),
            rss("supervisor"),
        ]);
    }

    let w = &extras.waiting;
    let per_client = |before: u64, after: u64| {
        format_value(
            after.saturating_sub(before) as f64 / w.clients as f64,
            Unit::KiB,
        )
    };
    let mut router = Table::new(
        "router only: waiting clients and model switches",
        &["metric", "value"],
    );
    router.row(vec![
        format!(
            "proxy RSS idle → with {} waiting streaming clients",
            w.clients
        ),
        format!(
            "{} → {}",
            format_value(w.proxy_before_kib as f64, Unit::MiB),
            format_value(w.proxy_after_kib as f64, Unit::MiB)
        ),
    ]);
    router.row(vec![
        "proxy RSS per waiting client".into(),
        per_client(w.proxy_before_kib, w.proxy_after_kib),
    ]);
    router.row(vec![
        "supervisor RSS per waiting client".into(),
        per_client(w.supervisor_before_kib, w.supervisor_after_kib),
    ]);
    router.row(vec![
        "proxy / supervisor RSS 3 s after every waiting client was served".into(),
        format!(
            "{} / {}",
            format_value(w.proxy_finished_kib as f64, Unit::MiB),
            format_value(w.supervisor_finished_kib as f64, Unit::MiB)
        ),
    ]);
    router.row(vec![
        "proxy RSS of that router before the busy stream (model loaded, idle)".into(),
        format_value(extras.switch_idle_proxy_kib as f64, Unit::MiB),
    ]);
    let overheads: Vec<f64> = extras.switches.iter().map(|s| s.overhead_ms).collect();
    let totals: Vec<f64> = extras.switches.iter().map(|s| s.total_ms).collect();
    let max = overheads.iter().copied().fold(f64::NAN, f64::max);
    let min = overheads.iter().copied().fold(f64::NAN, f64::min);
    router.row(vec![
        format!(
            "model-switch overhead p50 (ready file → first byte at the client, {} switches)",
            overheads.len()
        ),
        median(&overheads).map_or("—".into(), |v| format_value(v, Unit::Millis)),
    ]);
    router.row(vec![
        "model-switch overhead min / max".into(),
        format!(
            "{} / {}",
            format_value(min, Unit::Millis),
            format_value(max, Unit::Millis)
        ),
    ]);
    router.row(vec![
        "model switch, request → first byte p50 (stop, spawn, 100–200 ms load)".into(),
        median(&totals).map_or("—".into(), |v| format_value(v, Unit::Millis)),
    ]);
    let broken_down: Vec<&Vec<f64>> = extras
        .switches
        .iter()
        .filter_map(|s| s.steps.as_ref())
        .collect();
    for (i, step) in SWITCH_STEPS.iter().enumerate() {
        let values: Vec<f64> = broken_down.iter().map(|steps| steps[i]).collect();
        router.row(vec![
            format!(
                "switch step {}: {step}, p50 ({} switches)",
                i + 1,
                values.len()
            ),
            median(&values).map_or("—".into(), |v| format_value(v, Unit::Millis)),
        ]);
    }
    router.row(vec![
        "the machine: thread-to-thread Unix-socket round trip p50, back to back / after 200 ms idle"
            .into(),
        format!(
            "{} / {}",
            format_value(extras.wakeup_busy_us / 1000.0, Unit::Millis),
            format_value(extras.wakeup_idle_us / 1000.0, Unit::Millis)
        ),
    ]);
    let stops: Vec<f64> = extras.switches.iter().filter_map(|s| s.stop_ms).collect();
    router.row(vec![
        format!(
            "old backend stop, SIGTERM → group reaped p50 / max ({} stops)",
            stops.len()
        ),
        format!(
            "{} / {}",
            median(&stops).map_or("—".into(), |v| format_value(v, Unit::Millis)),
            format_value(stops.iter().copied().fold(f64::NAN, f64::max), Unit::Millis)
        ),
    ]);

    let mut notes = machine_notes();
    notes.push(match &world.nginx {
        Some(NginxTarget { nginx, version, .. }) => {
            format!(
                "{version}, worker_processes auto ({} workers), upstream keepalive 64, \
                 proxy_buffering off, access_log off",
                nginx.workers().len()
            )
        }
        None => "nginx: not found on PATH (or --no-nginx), not measured".into(),
    });
    notes.push(format!(
        "{} round(s), {} ms per timed phase, medians of rounds; CPU summed over rounds; mode: {}",
        opts.rounds,
        opts.phase.as_millis(),
        if opts.quick { "quick" } else { "full" }
    ));
    let mut out = String::new();
    if opts.markdown {
        for note in &notes {
            out.push_str(&format!("- {note}\n"));
        }
        out.push('\n');
        for table in tables.iter().chain([&split, &router]) {
            out.push_str(&table.render_markdown());
            out.push('\n');
        }
    } else {
        for note in &notes {
            out.push_str(&format!("{note}\n"));
        }
        out.push('\n');
        for table in tables.iter().chain([&split, &router]) {
            out.push_str(&table.render_text());
            out.push('\n');
        }
    }
    out
}

fn main() -> ExitCode {
    let opts = match Options::parse() {
        Ok(opts) => opts,
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::from(2);
        }
    };
    let mut opts = opts;
    // This process and the proxy each hold one descriptor per waiting client, plus the rest.
    let fd_limit = raise_nofile();
    let budget = usize::try_from(fd_limit.saturating_sub(1000)).unwrap_or(usize::MAX);
    if opts.waiting > budget {
        eprintln!(
            "open-file limit {fd_limit}: holding {budget} waiting clients instead of {}",
            opts.waiting
        );
        opts.waiting = budget.max(1);
    }
    if let Err(err) = strata_e2e::bench::build_daemons() {
        eprintln!("router bench: {err}");
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let world = match start_world(&opts) {
        Ok(world) => world,
        Err(err) => {
            eprintln!("router bench: setup failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = run(&opts, &runtime, &world);
    let code = match outcome {
        Ok((res, extras)) => {
            print!("{}", report(&opts, &world, &res, &extras));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("router bench failed: {err}");
            ExitCode::FAILURE
        }
    };
    drop(runtime);
    world.stop();
    eprintln!("router bench: {:.1} s", started.elapsed().as_secs_f64());
    code
}
