//! The swap benchmark: a model switch whose new backend reads its whole weights file before it
//! reports ready, with the file cold (evicted from the page cache) against after the weights
//! prefetch (docs/backend.md#faster-swaps-the-weights-prefetch-and-learned-load-times) and
//! after the predicted prefetch (`prefetch_predict`), in one interleaved run.
//!
//! ```sh
//! cargo bench -p strata-e2e --bench swap                 # 1.5 GiB of weights, 5 rounds
//! cargo bench -p strata-e2e --bench swap -- --quick      # 64 MiB, 1 round (seconds)
//! ```
//!
//! It makes a weights file (`--weights-mib N`, 1536 [64]) on disk in the target directory,
//! then measures the machine: the file read whole right after `posix_fadvise(DONTNEED)`
//! (disk) and again (page cache). Three routers (the real daemons, the Python fake Strata) run
//! side by side with the same two models: A, and B whose fake reads the file whole (8 MiB
//! reads) before it opens its port, as an engine reads its weights; `model_grace_ms` 0. One
//! router has `prefetch` on (the default), one `prefetch: false`, one `prefetch_predict: true`;
//! each serves B once before the first round. Each round, for each router in turn: evict the
//! file, load A, start a request for A that takes `--hold-ms` (default: three times the cold
//! read, at least 1 s), queue a streaming request for B behind it (the predicted router: send
//! it only once A's response has ended, so nobody asks for B before), and take the time from
//! A's response (read whole at the client) to B's first data frame: the swap (stop A, spawn B,
//! B reads its weights, readiness, the grant, the first token). The
//! file's residency when A ends (`mincore`), what B's fake logged for its own read and the
//! router's `strata_router_load_resident_ratio` are shown beside it. No thresholds; a request
//! that fails fails the run (exit 1). On a file system that keeps every page resident (tmpfs)
//! a cold file cannot be made: the run says so and exits 0.
//!
//! Flags: `--quick`, `--weights-mib N`, `--rounds N` (5 [1]), `--hold-ms N`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::accounting::chat_request;
use strata_e2e::http::{self, Frame};
use strata_e2e::stack::Stack;
use strata_e2e::weights::WeightsFile as Weights;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};

const A: &str = "flash-a";
const B: &str = "flash-b";

struct Options {
    weights_mib: u64,
    rounds: usize,
    hold_ms: Option<u64>,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut quick = false;
        let mut weights_mib = None;
        let mut rounds = None;
        let mut hold_ms = None;
        let mut args = std::env::args().skip(1);
        let number = |name: &str, value: Option<String>| -> Result<u64, String> {
            value
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} takes a number"))
        };
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => quick = true,
                "--weights-mib" => weights_mib = Some(number("--weights-mib", args.next())?),
                "--rounds" => rounds = Some(number("--rounds", args.next())? as usize),
                "--hold-ms" => hold_ms = Some(number("--hold-ms", args.next())?),
                // cargo bench passes --bench.
                "--bench" => {}
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; usage: swap [--quick] [--weights-mib N] \
                         [--rounds N] [--hold-ms N]"
                    ));
                }
            }
        }
        Ok(Options {
            weights_mib: weights_mib.unwrap_or(if quick { 64 } else { 1536 }).max(1),
            rounds: rounds.unwrap_or(if quick { 1 } else { 5 }).max(1),
            hold_ms,
        })
    }
}

/// Reads the whole file (8 MiB reads, like the fake) and returns the seconds it took.
fn read_all(weights: &Weights) -> f64 {
    let started = Instant::now();
    let mut file = File::open(&weights.path).expect("open the weights file");
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).expect("read the weights file");
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    assert_eq!(total, weights.len);
    started.elapsed().as_secs_f64()
}

fn resident_fraction(weights: &Weights) -> f64 {
    weights.resident() as f64 / weights.len as f64
}

/// How a router reads B's weights ahead, if at all.
#[derive(Clone, Copy, PartialEq)]
enum Ahead {
    /// `prefetch: false`.
    Cold,
    /// The default: while B's request waits.
    Prefetched,
    /// `prefetch_predict: true`, and B's request sent only once A's response ended.
    Predicted,
}

fn start_router(tag: &str, weights: &Weights, ahead: Ahead) -> Stack {
    let b = ModelSpec::new(B)
        .entry_key("weights", json!([weights.path]))
        .fake("read_weights", json!(weights.path));
    let config = ConfigBuilder::new(tag)
        .wait_when_busy(true)
        .model_grace_ms(0)
        .set("prefetch", ahead != Ahead::Cold)
        .set("prefetch_predict", ahead == Ahead::Predicted)
        .model(ModelSpec::new(A))
        .model(b)
        .build();
    Stack::start(config)
}

/// One swap of one router.
struct Swap {
    /// A's response read whole → B's first data frame.
    swap_s: f64,
    /// The weights' resident fraction when A's response ended.
    resident_at_end: f64,
    /// What B's fake logged for reading its weights.
    backend_read_s: f64,
    /// `strata_router_load_resident_ratio{model="flash-b"}` after B's load.
    ratio_at_load: f64,
}

fn prometheus(stack: &Stack) -> BTreeMap<String, f64> {
    let response = stack.get("/metrics?format=prometheus");
    String::from_utf8_lossy(&response.body)
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn held(stack: &Stack, model: &str, stage: &str) -> bool {
    stack
        .metrics()
        .in_flight_requests
        .iter()
        .flatten()
        .any(|request| request.model == model && request.stage == stage)
}

fn swap(
    stack: &Stack,
    weights: &Weights,
    hold: Duration,
    round: usize,
    ahead: Ahead,
) -> Result<Swap, String> {
    let addr = stack.addr();
    // The weights made cold (B's load the round before read them), then A loaded (from B):
    // from here only a prefetch reads them.
    if !weights.evict() {
        return Err("the weights stay resident after DONTNEED".into());
    }
    let warm = http::chat(addr, &chat_request(A, false, "warm", Value::Null));
    if warm.status != 200 {
        return Err(format!("loading A: {warm}"));
    }
    let reads_before = stack.fake_log().events_named("weights_read").len();
    let delay_ms = 50;
    let tokens = (hold.as_millis() as u64).div_ceil(delay_ms).max(1);
    let a_body = chat_request(
        A,
        false,
        &format!("hold-{round}"),
        json!({"tokens": tokens, "token_delay_ms": delay_ms}),
    );
    let a = std::thread::spawn(move || {
        let response = http::chat(addr, &a_body);
        (response, Instant::now())
    });
    poll_until(DEADLINE, "A's request leased", || held(stack, A, "leased"));
    let b_body = chat_request(B, true, &format!("swap-{round}"), Value::Null);
    let (a_done, a_wait) = std::sync::mpsc::channel::<()>();
    let b = std::thread::spawn(move || {
        if ahead == Ahead::Predicted {
            // Nobody asks for B before A's response has ended.
            let _ = a_wait.recv();
        }
        let mut stream = http::open_chat(addr, &b_body);
        stream.frames_until(Duration::from_secs(300), "B's first data", Frame::is_data);
        let first = Instant::now();
        let rest = stream.remaining_frames(Duration::from_secs(60));
        (first, rest.last().is_some_and(Frame::is_done))
    });
    let (a_response, a_end) = a.join().map_err(|_| "A's client panicked")?;
    let _ = a_done.send(());
    let resident_at_end = resident_fraction(weights);
    if a_response.status != 200 {
        return Err(format!("A: {a_response}"));
    }
    let (b_first, b_done) = b.join().map_err(|_| "B's client panicked")?;
    if !b_done {
        return Err("B's stream did not end with [DONE]".into());
    }
    let reads = stack.fake_log().events_named("weights_read");
    let backend_read_s = reads
        .get(reads_before)
        .and_then(|event| event["seconds"].as_f64())
        .ok_or("B's fake logged no weights_read")?;
    let ratio_at_load = prometheus(stack)
        .get(&format!(
            "strata_router_load_resident_ratio{{model=\"{B}\"}}"
        ))
        .copied()
        .ok_or("no strata_router_load_resident_ratio for B")?;
    Ok(Swap {
        swap_s: b_first.saturating_duration_since(a_end).as_secs_f64(),
        resident_at_end,
        backend_read_s,
        ratio_at_load,
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn run(opts: &Options) -> Result<(), String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("swap-bench");
    let weights = Weights::create(&dir, "weights", opts.weights_mib << 20);
    if !weights.evict() {
        println!(
            "skipped: {} stays resident after posix_fadvise(DONTNEED) (tmpfs?): no cold file",
            weights.path.display()
        );
        return Ok(());
    }
    let mib = opts.weights_mib as f64;
    let disk_s = read_all(&weights);
    let memory_s = read_all(&weights);
    let hold = Duration::from_millis(
        opts.hold_ms
            .unwrap_or(((disk_s * 3.0 * 1000.0) as u64).max(1000)),
    );
    eprintln!(
        "weights {mib} MiB: disk {:.0} MiB/s, page cache {:.0} MiB/s; A holds {hold:?}",
        mib / disk_s,
        mib / memory_s
    );

    let routers = [Ahead::Cold, Ahead::Prefetched, Ahead::Predicted];
    let names = ["cold", "prefetched", "predicted"];
    let stacks = routers.map(|ahead| {
        let stack = start_router(&format!("swap-{}", names[ahead as usize]), &weights, ahead);
        // B was asked for once: what the predicted router's forecast goes by.
        stack.warm(B);
        stack
    });
    let mut results: [Vec<Swap>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..opts.rounds {
        for (i, stack) in stacks.iter().enumerate() {
            let swap = swap(stack, &weights, hold, round, routers[i])?;
            eprintln!(
                "round {round} {}: swap {:.3} s, resident at A's end {:.2}, B's read {:.3} s, ratio at load {:.2}",
                names[i],
                swap.swap_s,
                swap.resident_at_end,
                swap.backend_read_s,
                swap.ratio_at_load
            );
            results[i].push(swap);
        }
    }
    for stack in stacks {
        stack.stop();
    }

    let summary = |swaps: &[Swap], pick: fn(&Swap) -> f64| {
        let mut values: Vec<f64> = swaps.iter().map(pick).collect();
        median(&mut values)
    };
    println!(
        "\n### swap with the weights cold vs prefetched vs predicted ({} MiB, {} rounds, medians)\n",
        opts.weights_mib, opts.rounds
    );
    println!(
        "| metric | cold (`prefetch: false`) | prefetched | predicted (`prefetch_predict`) | cold / prefetched | cold / predicted |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let row = |label: &str, pick: fn(&Swap) -> f64, unit: &str, ratios: bool| {
        let [cold, prefetched, predicted] = results.each_ref().map(|swaps| summary(swaps, pick));
        let (to_prefetched, to_predicted) = if ratios {
            (
                format!("{:.2}x", cold / prefetched),
                format!("{:.2}x", cold / predicted),
            )
        } else {
            Default::default()
        };
        println!(
            "| {label} | {cold:.3}{unit} | {prefetched:.3}{unit} | {predicted:.3}{unit} | {to_prefetched} | {to_predicted} |"
        );
    };
    row(
        "swap: A's response ends → B's first data frame",
        |s| s.swap_s,
        " s",
        true,
    );
    row(
        "B's backend reading its weights",
        |s| s.backend_read_s,
        " s",
        true,
    );
    row(
        "weights resident when A ends (mincore)",
        |s| s.resident_at_end,
        "",
        false,
    );
    row(
        "`strata_router_load_resident_ratio` at B's load",
        |s| s.ratio_at_load,
        "",
        false,
    );
    println!("\n| the machine, same file | value |");
    println!("| --- | ---: |");
    println!(
        "| read after DONTNEED (disk) | {:.0} MiB/s ({disk_s:.3} s) |",
        mib / disk_s
    );
    println!(
        "| read again (page cache) | {:.0} MiB/s ({memory_s:.3} s) |",
        mib / memory_s
    );
    println!("| page cache / disk | {:.1}x |", disk_s / memory_s);
    Ok(())
}

fn main() -> ExitCode {
    let opts = match Options::parse() {
        Ok(opts) => opts,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Err(err) = strata_e2e::bench::build_daemons() {
        eprintln!("{err}");
        return ExitCode::FAILURE;
    }
    let started = Instant::now();
    let result = run(&opts);
    eprintln!("swap bench: {:.1} s", started.elapsed().as_secs_f64());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("swap bench failed: {message}");
            ExitCode::FAILURE
        }
    }
}
