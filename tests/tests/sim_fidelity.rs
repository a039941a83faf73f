//! Fidelity of the simulator: a short generated `agents` trace played through the real stack
//! (both daemons, the fake backend with per-request generation times and short loads) loads
//! the same models in the same order, as many times, as `strata-ctl simulate` says for the
//! same trace and config, and every request waits as long as simulated, within a stated
//! tolerance. This is what lets a simulated figure be trusted.
//!
//! The trace: 3 agents over 2 models (two on one), 5 requests each, generations 200-600 ms, tool
//! gaps 900-1500 ms against a 300 ms grace (so each model group runs, then the other model
//! goes), 1 s loads. Its decisions do not hinge on a few milliseconds: the simulator gives the
//! same load sequence with loads 200 ms shorter or longer and generations and gaps 60 ms
//! shorter or longer (checked here before the real run). The simulated load time of each model
//! is the one the real run measured (its median `model_load_ms`), since a real start adds the
//! interpreter's own start to the fake's `load_ms`.
//!
//! A test binary of its own, not a module of `e2e/`: each real wait must match the simulated
//! one within 500 ms (or a quarter of it), which the trace was sized for with the machine to
//! itself, not with another test's daemons on the same two cores.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use strata_e2e::accounting::{all_records, chat_request};
use strata_e2e::http;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, ModelSpec};
use strata_protocol::config::Config;
use strata_sim::{Params, Policy, Settings, Workload, generate, simulate};

const A: &str = "flash-a";
const B: &str = "flash-b";
const LOAD_MS: u64 = 1000;

/// A simulated and a real wait agree if they differ by at most this much, or by at most a
/// quarter of the simulated wait: what a real start's variation (the interpreter's start, the
/// readiness poll) adds up to over the loads a request waits for. (Observed here: at most
/// about 100 ms.)
const TOLERANCE: Duration = Duration::from_millis(500);

fn trace() -> Workload {
    let mut params = Params::default();
    for (key, value) in [
        ("agents", 3),
        ("models", 2),
        ("steps", 5),
        ("gap_min_ms", 900),
        ("gap_max_ms", 1500),
        ("gen_min_ms", 200),
        ("gen_max_ms", 600),
        ("load_ms", LOAD_MS),
        ("start_max_ms", 300),
        ("seed", 3),
    ] {
        params.set(key, value);
    }
    generate("agents", &params, &[A.to_owned(), B.to_owned()]).expect("the agents workload")
}

/// The workload with every load, generation and gap shifted: for the margin check.
fn shifted(workload: &Workload, load: i64, service: i64, gap: i64) -> Workload {
    let shift =
        |d: Duration, by: i64| Duration::from_millis((d.as_millis() as i64 + by).max(1) as u64);
    let mut shifted = workload.clone();
    for model in shifted.models.values_mut() {
        model.load = shift(model.load, load);
    }
    for step in shifted
        .agents
        .iter_mut()
        .flat_map(|agent| agent.steps.iter_mut())
    {
        step.service = shift(step.service, service);
        step.gap = shift(step.gap, gap);
    }
    shifted
}

/// One request the real agents made: its agent, step and request ID.
struct Sent {
    agent: usize,
    step: usize,
    request_id: String,
}

#[test]
fn a_generated_agents_trace_plays_out_as_simulated() {
    let workload = trace();
    let test_config = ConfigBuilder::new("fidelity")
        .wait_when_busy(true)
        .model(ModelSpec::new(A).load_ms(LOAD_MS))
        .model(ModelSpec::new(B).load_ms(LOAD_MS))
        .model_grace_ms(300)
        .build();
    let config = Config::load(&test_config.path).expect("the test config");
    let settings = Settings::from_config(&config);
    let planned = simulate(&workload, &settings, Policy::Router);
    for (load, service, gap) in [(-200, 0, 0), (200, 0, 0), (0, -60, -60), (0, 60, 60)] {
        let other = simulate(
            &shifted(&workload, load, service, gap),
            &settings,
            Policy::Router,
        );
        assert_eq!(
            other.load_sequence(),
            planned.load_sequence(),
            "the trace's decisions must not hinge on {load}/{service}/{gap} ms"
        );
    }

    // The real run: each agent a thread, its requests non-streaming, generating for their
    // service time (the fake's delay before its answer), its gaps real time.
    let stack = Stack::start(test_config);
    let log = stack.fake_log();
    let addr = stack.addr();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let agents: Vec<_> = workload
        .agents
        .iter()
        .cloned()
        .enumerate()
        .map(|(index, agent)| {
            let sent = sent.clone();
            std::thread::spawn(move || {
                let start = t0 + agent.start;
                std::thread::sleep(start.saturating_duration_since(Instant::now()));
                for (step, spec) in agent.steps.iter().enumerate() {
                    if step > 0 {
                        std::thread::sleep(spec.gap);
                    }
                    let fake =
                        json!({"header_delay_ms": spec.service.as_millis() as u64, "tokens": 1});
                    let body = chat_request(&agent.model, false, &format!("{index}-{step}"), fake);
                    let response = http::chat(addr, &body);
                    assert_eq!(response.status, 200, "{response}");
                    let request_id = response.header("x-strata-request-id").unwrap().to_owned();
                    sent.lock().unwrap().push(Sent {
                        agent: index,
                        step,
                        request_id,
                    });
                }
            })
        })
        .collect();
    for agent in agents {
        agent.join().expect("an agent");
    }

    let up_a = stack.config().upstream(A);
    let real_sequence: Vec<&str> = log
        .starts()
        .iter()
        .map(|start| if start.model_name == up_a { A } else { B })
        .collect::<Vec<_>>();
    let records = all_records(addr);
    // The real load times, for the simulator's models.
    let mut measured = workload.clone();
    for (model, params) in measured.models.iter_mut() {
        let mut loads: Vec<u64> = records
            .iter()
            .filter(|r| r.model_resolved.as_deref() == Some(model.as_str()) && r.model_switch)
            .filter_map(|r| r.model_load_ms)
            .collect();
        loads.sort_unstable();
        assert!(!loads.is_empty(), "{model} loaded at least once");
        params.load = Duration::from_millis(loads[(loads.len() - 1) / 2]);
    }
    let simulated = simulate(&measured, &settings, Policy::Router);
    assert_eq!(
        real_sequence,
        simulated.load_sequence(),
        "the loaded models, in order"
    );
    assert_eq!(real_sequence.len(), simulated.loads.len(), "the swap count");

    // Per request: arrival to the start of its generation. Real: the record's arrival to the
    // upstream headers, less the fake's own delay before them (the generation).
    let sent = sent.lock().unwrap();
    let mut checked = 0;
    let mut largest = Duration::ZERO;
    for (agent_index, agent) in measured.agents.iter().enumerate() {
        for (step, spec) in agent.steps.iter().enumerate() {
            let request = sent
                .iter()
                .find(|s| s.agent == agent_index && s.step == step)
                .expect("every step was sent");
            let record = records
                .iter()
                .find(|r| r.request_id == request.request_id)
                .expect("every request has its record");
            let headers = record.upstream_headers_ms.expect("headers arrived");
            let real = Duration::from_millis(headers).saturating_sub(spec.service);
            let wait = simulated_wait_of(&simulated, &measured, agent_index, step);
            let bound = TOLERANCE.max(wait / 4);
            let difference = real.abs_diff(wait);
            largest = largest.max(difference);
            assert!(
                difference <= bound,
                "agent {agent_index} step {step}: real wait {real:?}, simulated {wait:?} (tolerance {bound:?})"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, workload.request_count());
    eprintln!(
        "fidelity: {} loads as simulated, {checked} waits within {largest:?} of the simulator's",
        real_sequence.len()
    );
    stack.stop();
}

/// The simulated wait of an agent's step. The timeline does not name agents, so the agent's
/// requests are found by following its chain: its first arrives at its start, each next one
/// at the previous one's end plus the step's gap.
fn simulated_wait_of(
    timeline: &strata_sim::Timeline,
    workload: &Workload,
    agent: usize,
    step: usize,
) -> Duration {
    let spec = &workload.agents[agent];
    let mut arrival = spec.start;
    for (k, s) in spec.steps.iter().enumerate() {
        if k > 0 {
            arrival += s.gap;
        }
        let request = timeline
            .requests
            .iter()
            .find(|r| r.model == spec.model && r.arrival == arrival)
            .unwrap_or_else(|| panic!("agent {agent} step {k} at {arrival:?} in the timeline"));
        if k == step {
            return request.wait().expect("it started");
        }
        arrival = request.end;
    }
    unreachable!("step {step} of agent {agent}")
}
