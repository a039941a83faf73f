//! The built-in workloads: seeded generators with documented parameters.
//!
//! | workload | what | parameters (default) |
//! |---|---|---|
//! | `agents` | N agents in a closed loop (request, generation, tool gap, next request), agent `i` bound to model `i mod M` | `agents` (3), `models` (2), `steps` per agent (40), `gap_min_ms`/`gap_max_ms` (500/3000), `gen_min_ms`/`gen_max_ms` (2000/20000), `load_ms` (20000), `start_max_ms` (5000: each agent starts at a random instant up to this), `seed` (1) |
//! | `interactive-batch` | a priority user on model 0 in bursts, a flex batch on model 1, and default-tier agents over both | `bursts` (8), `burst` requests each (3), `read_min_ms`/`read_max_ms` between them (5000/20000), `think_min_ms`/`think_max_ms` between bursts (60000/180000), `batch` requests (120), `batch_workers` (2), `agents` (2) with the `agents` gaps, generations and `steps` (20), `gen_min_ms`/`gen_max_ms` (2000/20000), `load_ms` (20000), `seed` (1) |
//! | `bursty` | open-loop bursts over 4 models: bursts arrive as a Poisson process, each for one random model, its requests spread over 2 s | `models` (4), `bursts` (100), `burst_min`/`burst_max` requests (1/8), `burst_gap_ms` mean (30000), `gen_min_ms`/`gen_max_ms` (1000/10000), `patience_ms` (0: none), `load_ms` (20000), `seed` (1) |
//!
//! Every workload also takes `warm_load_ms` (default: `load_ms`, so every
//! load is cold), a model's load time with its weights in the page cache,
//! and `weights_mb`
//! ([`DEFAULT_WEIGHTS_MB`](crate::workload::DEFAULT_WEIGHTS_MB)), what the
//! router's prefetch reads to get them there (`sim/src/prefetch.rs`);
//! every model gets the same.
//!
//! A generator takes the model names to use (a config's enabled models
//! when one is given); when fewer are given than it needs, the rest are
//! named `model-a`, `model-b`, ...
//!
//! Every parameter is checked, naming it: `models` 1 to 26; `agents` (of
//! `agents`), `steps`, `burst`, `batch_workers`, `bursts` (of `bursty`),
//! `burst_min` and `burst_max` at least 1; every `_ms` at most
//! [`MAX_MS`] (365 days); each `_min` at most its `_max`, and
//! `warm_load_ms` at most `load_ms`; `weights_mb` from 1 to
//! [`MAX_WEIGHTS_MB`](crate::workload::MAX_WEIGHTS_MB); at most
//! [`MAX_REQUESTS`] requests in all; `bursty`'s arrivals within
//! [`MAX_MS`]. A key twice is refused too.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::wire::ServiceTier;

pub use crate::params::{MAX_REQUESTS, Params};
use crate::params::{SEED, Spec, Values, WARM_LOAD, WEIGHTS, count, millis, models};
use crate::rng::Rng;
use crate::workload::{Agent, MAX_MS, ModelParams, Request, Step, WarmLoad, Workload};

/// The built-in workloads, in the order `simulate` lists them.
pub const BUILT_IN: [&str; 3] = ["agents", "interactive-batch", "bursty"];

/// Model names: `given` first, then `model-a`, `model-b`, ...
fn names(given: &[String], count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            given.get(i).cloned().unwrap_or_else(|| {
                let letter = (b'a' + (i % 26) as u8) as char;
                format!("model-{letter}")
            })
        })
        .collect()
}

fn declare(models: &[String], params: &Values) -> BTreeMap<String, ModelParams> {
    models
        .iter()
        .map(|model| {
            let model_params = ModelParams {
                load: params.ms("load_ms"),
                fail_rate: 0.0,
            };
            (model.clone(), model_params)
        })
        .collect()
}

/// Every model's warm load, when `warm_load_ms` or `weights_mb` is given
/// (otherwise none: the workload is the same as before either existed).
fn warm(models: &[String], params: &Values, given: &Params) -> BTreeMap<String, WarmLoad> {
    if !["warm_load_ms", "weights_mb"]
        .iter()
        .any(|key| given.gives(key))
    {
        return BTreeMap::new();
    }
    let warm = WarmLoad {
        load: params.ms("warm_load_ms"),
        weights_mb: params.get("weights_mb"),
    };
    models
        .iter()
        .map(|model| (model.clone(), warm.clone()))
        .collect()
}

/// The description's note of a warm load time, when one is shorter.
fn warm_note(params: &Values) -> String {
    let (cold, warm) = (params.get("load_ms"), params.get("warm_load_ms"));
    if warm < cold {
        format!(
            ", loads {} s cold and {} s warm ({} MB of weights)",
            seconds(cold),
            seconds(warm),
            params.get("weights_mb")
        )
    } else {
        String::new()
    }
}

/// Milliseconds as seconds, without a fraction when whole.
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{:.1}", ms as f64 / 1000.0)
    }
}

/// Builds the built-in workload `name`.
pub fn generate(name: &str, params: &Params, models: &[String]) -> Result<Workload, String> {
    match name {
        "agents" => agents(params, models),
        "interactive-batch" => interactive_batch(params, models),
        "bursty" => bursty(params, models),
        other => Err(format!(
            "no built-in workload {other:?} (built in: {}; or give a workload file's path)",
            BUILT_IN.join(", ")
        )),
    }
}

const AGENTS: [Spec; 12] = [
    count("agents", 3, 1),
    models(2),
    count("steps", 40, 1),
    millis("gap_min_ms", 500),
    millis("gap_max_ms", 3_000),
    millis("gen_min_ms", 2_000),
    millis("gen_max_ms", 20_000),
    millis("load_ms", 20_000),
    WARM_LOAD,
    WEIGHTS,
    millis("start_max_ms", 5_000),
    SEED,
];

const INTERACTIVE_BATCH: [Spec; 19] = [
    count("bursts", 8, 0),
    count("burst", 3, 1),
    millis("read_min_ms", 5_000),
    millis("read_max_ms", 20_000),
    millis("think_min_ms", 60_000),
    millis("think_max_ms", 180_000),
    count("batch", 120, 0),
    count("batch_workers", 2, 1),
    count("agents", 2, 0),
    count("steps", 20, 1),
    millis("gap_min_ms", 500),
    millis("gap_max_ms", 3_000),
    millis("gen_min_ms", 2_000),
    millis("gen_max_ms", 20_000),
    millis("load_ms", 20_000),
    WARM_LOAD,
    WEIGHTS,
    millis("start_max_ms", 5_000),
    SEED,
];

const BURSTY: [Spec; 12] = [
    models(4),
    count("bursts", 100, 1),
    count("burst_min", 1, 1),
    count("burst_max", 8, 1),
    millis("burst_gap_ms", 30_000),
    millis("gen_min_ms", 1_000),
    millis("gen_max_ms", 10_000),
    millis("patience_ms", 0),
    millis("load_ms", 20_000),
    WARM_LOAD,
    WEIGHTS,
    SEED,
];

/// One agent's closed loop: `steps` requests with gaps and generations
/// drawn from the parameters.
fn agent_loop(rng: &mut Rng, params: &Values, model: &str, tier: ServiceTier, steps: u64) -> Agent {
    let start = rng.between(Duration::ZERO, params.ms("start_max_ms"));
    let steps = (0..steps)
        .map(|_| Step {
            gap: rng.between(params.ms("gap_min_ms"), params.ms("gap_max_ms")),
            service: rng.between(params.ms("gen_min_ms"), params.ms("gen_max_ms")),
            patience: None,
            cache_rank: None,
        })
        .collect();
    Agent {
        model: model.to_owned(),
        tier,
        start,
        steps,
    }
}

fn agents(asked: &Params, given: &[String]) -> Result<Workload, String> {
    let params = asked.check("agents", &AGENTS)?;
    let (count, model_count) = (params.get("agents"), params.get("models"));
    let steps = params.get("steps");
    params.limit_requests(u128::from(count) * u128::from(steps), "agents x steps")?;
    let seed = params.get("seed");
    let models = names(given, model_count as usize);
    let mut rng = Rng::new(seed);
    let agents = (0..count as usize)
        .map(|i| {
            agent_loop(
                &mut rng,
                &params,
                &models[i % models.len()],
                ServiceTier::Default,
                steps,
            )
        })
        .collect();
    Ok(Workload {
        name: "agents".into(),
        description: format!(
            "{count} agents over {model_count} models, {steps} requests each{}, seed {seed}",
            warm_note(&params)
        ),
        seed,
        models: declare(&models, &params),
        warm: warm(&models, &params, asked),
        requests: Vec::new(),
        agents,
    })
}

fn interactive_batch(asked: &Params, given: &[String]) -> Result<Workload, String> {
    let params = asked.check("interactive-batch", &INTERACTIVE_BATCH)?;
    let wide = |key| u128::from(params.get(key));
    params.limit_requests(
        wide("bursts") * wide("burst") + wide("batch") + wide("agents") * wide("steps"),
        "bursts x burst + batch + agents x steps",
    )?;
    let seed = params.get("seed");
    let models = names(given, 2);
    let mut rng = Rng::new(seed);
    let mut agents = Vec::new();
    // The interactive user: bursts of questions, reading each answer,
    // thinking between bursts.
    let (bursts, burst) = (params.get("bursts"), params.get("burst"));
    let mut steps = Vec::new();
    for b in 0..bursts {
        for q in 0..burst {
            let gap = match (b, q) {
                (0, 0) => Duration::ZERO,
                (_, 0) => rng.between(params.ms("think_min_ms"), params.ms("think_max_ms")),
                _ => rng.between(params.ms("read_min_ms"), params.ms("read_max_ms")),
            };
            steps.push(Step {
                gap,
                service: rng.between(params.ms("gen_min_ms"), params.ms("gen_max_ms")),
                patience: None,
                cache_rank: None,
            });
        }
    }
    if !steps.is_empty() {
        agents.push(Agent {
            model: models[0].clone(),
            tier: ServiceTier::Priority,
            start: rng.between(Duration::ZERO, params.ms("start_max_ms")),
            steps,
        });
    }
    // The batch: workers that each take the next item at once.
    let (batch, workers) = (params.get("batch"), params.get("batch_workers"));
    for w in 0..workers {
        let share = batch / workers + u64::from(w < batch % workers);
        if share == 0 {
            continue;
        }
        let steps = (0..share)
            .map(|_| Step {
                gap: Duration::ZERO,
                service: rng.between(params.ms("gen_min_ms"), params.ms("gen_max_ms")),
                patience: None,
                cache_rank: None,
            })
            .collect();
        agents.push(Agent {
            model: models[1].clone(),
            tier: ServiceTier::Flex,
            start: Duration::ZERO,
            steps,
        });
    }
    // Default-tier agents beside them, over both models.
    let count = params.get("agents");
    let agent_steps = params.get("steps");
    for i in 0..count as usize {
        agents.push(agent_loop(
            &mut rng,
            &params,
            &models[i % 2],
            ServiceTier::Default,
            agent_steps,
        ));
    }
    Ok(Workload {
        name: "interactive-batch".into(),
        description: format!(
            "a priority user on {} ({bursts} bursts of {burst}), a flex batch of {batch} on {} ({workers} workers), {count} default agents{}, seed {seed}",
            models[0],
            models[1],
            warm_note(&params)
        ),
        seed,
        models: declare(&models, &params),
        warm: warm(&models, &params, asked),
        requests: Vec::new(),
        agents,
    })
}

fn bursty(asked: &Params, given: &[String]) -> Result<Workload, String> {
    let params = asked.check("bursty", &BURSTY)?;
    let bursts = params.get("bursts");
    let (low, high) = (params.get("burst_min"), params.get("burst_max"));
    params.limit_requests(u128::from(bursts) * u128::from(high), "bursts x burst_max")?;
    let seed = params.get("seed");
    let model_count = params.get("models") as usize;
    let models = names(given, model_count);
    let mut rng = Rng::new(seed);
    let patience = params.get("patience_ms");
    let mut at = Duration::ZERO;
    let mut requests = Vec::new();
    for b in 0..bursts {
        if b > 0 {
            at += rng.exponential(params.ms("burst_gap_ms"));
            // Each request comes up to 2 s after its burst.
            if at > Duration::from_millis(MAX_MS - 2_000) {
                return Err(format!(
                    "--param bursts={bursts} with burst_gap_ms={}: the arrivals go past {MAX_MS} ms (365 days)",
                    params.get("burst_gap_ms")
                ));
            }
        }
        let model = &models[rng.below(model_count)];
        let size = low + rng.below((high - low + 1) as usize) as u64;
        for _ in 0..size {
            requests.push(Request {
                at: at + rng.between(Duration::ZERO, Duration::from_secs(2)),
                model: model.clone(),
                tier: ServiceTier::Default,
                service: rng.between(params.ms("gen_min_ms"), params.ms("gen_max_ms")),
                patience: (patience > 0).then(|| Duration::from_millis(patience)),
                cache_rank: None,
            });
        }
    }
    requests.sort_by_key(|request| request.at);
    Ok(Workload {
        name: "bursty".into(),
        description: format!(
            "{bursts} open-loop bursts of {low}-{high} requests over {model_count} models{}, seed {seed}",
            warm_note(&params)
        ),
        seed,
        models: declare(&models, &params),
        warm: warm(&models, &params, asked),
        requests,
        agents: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::DEFAULT_WEIGHTS_MB;

    #[test]
    fn every_built_in_workload_is_seeded_and_takes_its_parameters() {
        for name in BUILT_IN {
            let a = generate(name, &Params::default(), &[]).unwrap();
            let b = generate(name, &Params::default(), &[]).unwrap();
            assert_eq!(a, b, "{name} is deterministic");
            assert!(a.request_count() > 0, "{name}");
            let mut other = Params::default();
            other.set("seed", 2);
            assert_ne!(
                a,
                generate(name, &other, &[]).unwrap(),
                "{name}: the seed counts"
            );
            let mut unknown = Params::default();
            unknown.set("speed", 1);
            let err = generate(name, &unknown, &[]).unwrap_err();
            assert!(err.contains("\"speed\""), "{err}");
        }
        assert!(generate("nope", &Params::default(), &[]).is_err());
    }

    #[test]
    fn agents_are_bound_to_models_in_turn_and_draw_within_the_bounds() {
        let given = ["x".to_owned()];
        let workload = generate("agents", &Params::default(), &given).unwrap();
        let models: Vec<&str> = workload.agents.iter().map(|a| a.model.as_str()).collect();
        assert_eq!(models, ["x", "model-b", "x"]);
        assert_eq!(workload.request_count(), 120);
        for step in workload.agents.iter().flat_map(|a| &a.steps) {
            assert!((500..=3000).contains(&step.gap.as_millis()));
            assert!((2000..=20000).contains(&step.service.as_millis()));
        }
        assert_eq!(workload.load_time("x"), Duration::from_secs(20));
    }

    #[test]
    fn warm_loads_are_given_to_every_model_only_when_asked_for() {
        let with = |pairs: &[&str]| {
            let pairs: Vec<String> = pairs.iter().map(|pair| pair.to_string()).collect();
            generate("bursty", &Params::parse(&pairs).unwrap(), &[]).unwrap()
        };
        let cold = with(&[]);
        assert!(cold.warm.is_empty());
        assert!(!cold.description.contains("warm"), "{}", cold.description);
        // warm_load_ms follows a given load_ms when not given itself.
        assert!(with(&["load_ms=5000"]).warm.is_empty());
        let warm = with(&["warm_load_ms=8000"]);
        assert_eq!(warm.warm.len(), 4);
        for model in warm.models.keys() {
            assert_eq!(warm.warm_load_time(model), Duration::from_secs(8));
            assert_eq!(warm.warm[model].weights_mb, DEFAULT_WEIGHTS_MB);
        }
        assert!(
            warm.description
                .contains("loads 20 s cold and 8 s warm (16000 MB of weights)"),
            "{}",
            warm.description
        );
        // The requests are the same: only the loads differ.
        assert_eq!(warm.requests, cold.requests);
        let sized = with(&["weights_mb=4000"]);
        assert_eq!(sized.warm_load_time("model-a"), Duration::from_secs(20));
        assert_eq!(sized.warm["model-a"].weights_mb, 4000);
    }

    #[test]
    fn parameters_must_be_whole_numbers_given_as_key_value() {
        assert!(Params::parse(&["agents=4".into()]).is_ok());
        assert!(Params::parse(&["agents".into()]).is_err());
        assert!(Params::parse(&["agents=x".into()]).is_err());
    }

    fn refused(name: &str, pairs: &[&str]) -> String {
        let pairs: Vec<String> = pairs.iter().map(|pair| pair.to_string()).collect();
        let params = match Params::parse(&pairs) {
            Ok(params) => params,
            Err(err) => return err,
        };
        match generate(name, &params, &[]) {
            Ok(workload) => panic!(
                "{name} {pairs:?}: accepted ({} requests)",
                workload.request_count()
            ),
            Err(err) => err,
        }
    }

    #[test]
    fn every_parameter_is_checked_and_named() {
        let cases: [(&str, &[&str], &str); 16] = [
            (
                "bursty",
                &["burst_min=5", "burst_max=2"],
                "--param burst_min=5 is more than burst_max=2",
            ),
            (
                "agents",
                &["gen_min_ms=30000", "gen_max_ms=20000"],
                "gen_min_ms=30000 is more than gen_max_ms=20000",
            ),
            (
                "agents",
                &["gen_min_ms=30000"],
                "gen_min_ms=30000 is more than gen_max_ms=20000 (its default)",
            ),
            (
                "agents",
                &["gap_min_ms=4000"],
                "gap_min_ms=4000 is more than gap_max_ms=3000",
            ),
            (
                "interactive-batch",
                &["read_min_ms=30000"],
                "read_min_ms=30000 is more than read_max_ms",
            ),
            (
                "interactive-batch",
                &["think_max_ms=1"],
                "think_min_ms=60000 is more than think_max_ms=1",
            ),
            (
                "agents",
                &["models=0"],
                "--param models=0: out of range (1 to 26)",
            ),
            (
                "bursty",
                &["models=27"],
                "--param models=27: out of range (1 to 26)",
            ),
            (
                "agents",
                &["agents=0"],
                "--param agents=0: out of range (1 to 1000000)",
            ),
            (
                "interactive-batch",
                &["batch_workers=0"],
                "--param batch_workers=0: out of range",
            ),
            (
                "agents",
                &["load_ms=31536000001"],
                "--param load_ms=31536000001: out of range (0 to 31536000000 ms, 365 days)",
            ),
            (
                "agents",
                &["agents=1000", "steps=10000"],
                "agents x steps make 10000000 requests, more than 1000000",
            ),
            (
                "bursty",
                &["bursts=1000000", "burst_max=1", "burst_gap_ms=31536000000"],
                "the arrivals go past 31536000000 ms",
            ),
            (
                "agents",
                &["agents=2", "agents=3"],
                "--param agents: given twice",
            ),
            (
                "bursty",
                &["warm_load_ms=20001"],
                "--param warm_load_ms=20001 is more than load_ms=20000 (its default)",
            ),
            (
                "interactive-batch",
                &["weights_mb=0"],
                "--param weights_mb=0: out of range (1 to 1000000000)",
            ),
        ];
        for (name, pairs, message) in cases {
            let err = refused(name, pairs);
            assert!(err.contains(message), "{name} {pairs:?}: {err}");
        }
        // The bounds themselves are taken.
        let mut params = Params::default();
        params.set("models", 26);
        params.set("gen_min_ms", 20_000);
        params.set("load_ms", MAX_MS);
        let workload = generate("agents", &params, &[]).unwrap();
        assert_eq!(workload.load_time("model-a"), Duration::from_millis(MAX_MS));
    }
}
