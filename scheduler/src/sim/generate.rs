//! The built-in workloads: seeded generators with documented parameters.
//!
//! | workload | what | parameters (default) |
//! |---|---|---|
//! | `agents` | N agents in a closed loop (request, generation, tool gap, next request), agent `i` bound to model `i mod M` | `agents` (3), `models` (2), `steps` per agent (40), `gap_min_ms`/`gap_max_ms` (500/3000), `gen_min_ms`/`gen_max_ms` (2000/20000), `load_ms` (20000), `start_max_ms` (5000: each agent starts at a random instant up to this), `seed` (1) |
//! | `interactive-batch` | a priority user on model 0 in bursts, a flex batch on model 1, and default-tier agents over both | `bursts` (8), `burst` requests each (3), `read_min_ms`/`read_max_ms` between them (5000/20000), `think_min_ms`/`think_max_ms` between bursts (60000/180000), `batch` requests (120), `batch_workers` (2), `agents` (2) with the `agents` gaps, generations and `steps` (20), `gen_min_ms`/`gen_max_ms` (2000/20000), `load_ms` (20000), `seed` (1) |
//! | `bursty` | open-loop bursts over 4 models: bursts arrive as a Poisson process, each for one random model, its requests spread over 2 s | `models` (4), `bursts` (100), `burst_min`/`burst_max` requests (1/8), `burst_gap_ms` mean (30000), `gen_min_ms`/`gen_max_ms` (1000/10000), `patience_ms` (0: none), `load_ms` (20000), `seed` (1) |
//!
//! A generator takes the model names to use (a config's enabled models
//! when one is given); when fewer are given than it needs, the rest are
//! named `model-a`, `model-b`, ...

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::wire::ServiceTier;

use super::rng::Rng;
use super::workload::{Agent, ModelParams, Request, Step, Workload};

/// The built-in workloads, in the order `simulate` lists them.
pub const BUILT_IN: [&str; 3] = ["agents", "interactive-batch", "bursty"];

/// Parameters given as `KEY=VALUE` (all numbers); each generator refuses a
/// key it does not know.
#[derive(Debug, Clone, Default)]
pub struct Params(BTreeMap<String, u64>);

impl Params {
    pub fn parse(pairs: &[String]) -> Result<Params, String> {
        let mut params = BTreeMap::new();
        for pair in pairs {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--param {pair:?}: expected KEY=VALUE"))?;
            let value = value
                .parse()
                .map_err(|_| format!("--param {key}: {value:?} is not a whole number"))?;
            params.insert(key.to_owned(), value);
        }
        Ok(Params(params))
    }

    pub fn set(&mut self, key: &str, value: u64) {
        self.0.insert(key.to_owned(), value);
    }

    fn get(&self, key: &str, default: u64) -> u64 {
        self.0.get(key).copied().unwrap_or(default)
    }

    fn ms(&self, key: &str, default: u64) -> Duration {
        Duration::from_millis(self.get(key, default))
    }

    fn check(&self, workload: &str, known: &[&str]) -> Result<(), String> {
        match self.0.keys().find(|key| !known.contains(&key.as_str())) {
            Some(key) => Err(format!(
                "workload {workload} has no parameter {key:?} (it takes: {})",
                known.join(", ")
            )),
            None => Ok(()),
        }
    }
}

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

fn declare(models: &[String], load: Duration) -> BTreeMap<String, ModelParams> {
    models
        .iter()
        .map(|model| {
            let params = ModelParams {
                load,
                fail_rate: 0.0,
            };
            (model.clone(), params)
        })
        .collect()
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

const AGENT_KEYS: [&str; 10] = [
    "agents",
    "models",
    "steps",
    "gap_min_ms",
    "gap_max_ms",
    "gen_min_ms",
    "gen_max_ms",
    "load_ms",
    "start_max_ms",
    "seed",
];

/// One agent's closed loop: `steps` requests with gaps and generations
/// drawn from the parameters.
fn agent_loop(rng: &mut Rng, params: &Params, model: &str, tier: ServiceTier, steps: u64) -> Agent {
    let start = rng.between(Duration::ZERO, params.ms("start_max_ms", 5_000));
    let steps = (0..steps)
        .map(|_| Step {
            gap: rng.between(params.ms("gap_min_ms", 500), params.ms("gap_max_ms", 3_000)),
            service: rng.between(
                params.ms("gen_min_ms", 2_000),
                params.ms("gen_max_ms", 20_000),
            ),
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

fn agents(params: &Params, given: &[String]) -> Result<Workload, String> {
    params.check("agents", &AGENT_KEYS)?;
    let (count, model_count) = (params.get("agents", 3), params.get("models", 2).max(1));
    let steps = params.get("steps", 40);
    let seed = params.get("seed", 1);
    let models = names(given, model_count as usize);
    let mut rng = Rng::new(seed);
    let agents = (0..count as usize)
        .map(|i| {
            agent_loop(
                &mut rng,
                params,
                &models[i % models.len()],
                ServiceTier::Default,
                steps,
            )
        })
        .collect();
    Ok(Workload {
        name: "agents".into(),
        description: format!(
            "{count} agents over {model_count} models, {steps} requests each, seed {seed}"
        ),
        seed,
        models: declare(&models, params.ms("load_ms", 20_000)),
        requests: Vec::new(),
        agents,
    })
}

fn interactive_batch(params: &Params, given: &[String]) -> Result<Workload, String> {
    params.check(
        "interactive-batch",
        &[
            "bursts",
            "burst",
            "read_min_ms",
            "read_max_ms",
            "think_min_ms",
            "think_max_ms",
            "batch",
            "batch_workers",
            "agents",
            "steps",
            "gap_min_ms",
            "gap_max_ms",
            "gen_min_ms",
            "gen_max_ms",
            "load_ms",
            "start_max_ms",
            "seed",
        ],
    )?;
    let seed = params.get("seed", 1);
    let models = names(given, 2);
    let mut rng = Rng::new(seed);
    let mut agents = Vec::new();
    // The interactive user: bursts of questions, reading each answer,
    // thinking between bursts.
    let (bursts, burst) = (params.get("bursts", 8), params.get("burst", 3).max(1));
    let mut steps = Vec::new();
    for b in 0..bursts {
        for q in 0..burst {
            let gap = match (b, q) {
                (0, 0) => Duration::ZERO,
                (_, 0) => rng.between(
                    params.ms("think_min_ms", 60_000),
                    params.ms("think_max_ms", 180_000),
                ),
                _ => rng.between(
                    params.ms("read_min_ms", 5_000),
                    params.ms("read_max_ms", 20_000),
                ),
            };
            steps.push(Step {
                gap,
                service: rng.between(
                    params.ms("gen_min_ms", 2_000),
                    params.ms("gen_max_ms", 20_000),
                ),
                patience: None,
                cache_rank: None,
            });
        }
    }
    if !steps.is_empty() {
        agents.push(Agent {
            model: models[0].clone(),
            tier: ServiceTier::Priority,
            start: rng.between(Duration::ZERO, params.ms("start_max_ms", 5_000)),
            steps,
        });
    }
    // The batch: workers that each take the next item at once.
    let (batch, workers) = (
        params.get("batch", 120),
        params.get("batch_workers", 2).max(1),
    );
    for w in 0..workers {
        let share = batch / workers + u64::from(w < batch % workers);
        if share == 0 {
            continue;
        }
        let steps = (0..share)
            .map(|_| Step {
                gap: Duration::ZERO,
                service: rng.between(
                    params.ms("gen_min_ms", 2_000),
                    params.ms("gen_max_ms", 20_000),
                ),
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
    let count = params.get("agents", 2);
    let agent_steps = params.get("steps", 20);
    for i in 0..count as usize {
        agents.push(agent_loop(
            &mut rng,
            params,
            &models[i % 2],
            ServiceTier::Default,
            agent_steps,
        ));
    }
    Ok(Workload {
        name: "interactive-batch".into(),
        description: format!(
            "a priority user on {} ({bursts} bursts of {burst}), a flex batch of {batch} on {} ({workers} workers), {count} default agents, seed {seed}",
            models[0], models[1]
        ),
        seed,
        models: declare(&models, params.ms("load_ms", 20_000)),
        requests: Vec::new(),
        agents,
    })
}

fn bursty(params: &Params, given: &[String]) -> Result<Workload, String> {
    params.check(
        "bursty",
        &[
            "models",
            "bursts",
            "burst_min",
            "burst_max",
            "burst_gap_ms",
            "gen_min_ms",
            "gen_max_ms",
            "patience_ms",
            "load_ms",
            "seed",
        ],
    )?;
    let seed = params.get("seed", 1);
    let model_count = params.get("models", 4).max(1) as usize;
    let models = names(given, model_count);
    let mut rng = Rng::new(seed);
    let bursts = params.get("bursts", 100);
    let (low, high) = (params.get("burst_min", 1), params.get("burst_max", 8));
    let patience = params.get("patience_ms", 0);
    let mut at = Duration::ZERO;
    let mut requests = Vec::new();
    for b in 0..bursts {
        if b > 0 {
            at += rng.exponential(params.ms("burst_gap_ms", 30_000));
        }
        let model = &models[rng.below(model_count)];
        let size = low + rng.below((high.max(low) - low + 1) as usize) as u64;
        for _ in 0..size {
            requests.push(Request {
                at: at + rng.between(Duration::ZERO, Duration::from_secs(2)),
                model: model.clone(),
                tier: ServiceTier::Default,
                service: rng.between(
                    params.ms("gen_min_ms", 1_000),
                    params.ms("gen_max_ms", 10_000),
                ),
                patience: (patience > 0).then(|| Duration::from_millis(patience)),
                cache_rank: None,
            });
        }
    }
    requests.sort_by_key(|request| request.at);
    Ok(Workload {
        name: "bursty".into(),
        description: format!(
            "{bursts} open-loop bursts of {low}-{high} requests over {model_count} models, seed {seed}"
        ),
        seed,
        models: declare(&models, params.ms("load_ms", 20_000)),
        requests,
        agents: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn parameters_must_be_whole_numbers_given_as_key_value() {
        assert!(Params::parse(&["agents=4".into()]).is_ok());
        assert!(Params::parse(&["agents".into()]).is_err());
        assert!(Params::parse(&["agents=x".into()]).is_err());
    }
}
