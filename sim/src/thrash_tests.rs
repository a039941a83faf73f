//! The property behind the hold bound's floor: on random workloads of two
//! to four busy models with different load times, the router with any
//! positive `model_hold_max_ms` never makes more swaps than FIFO on the same
//! workload. Without the floor (a bound at or below a load time) three or
//! more saturated models thrashed: `bursty` with a 5 s bound made about
//! three times FIFO's swaps.

use std::time::Duration;

use strata_scheduler::{Mode, Rules};

use crate::generate::{Params, generate};
use crate::rng::Rng;
use crate::run::{Policy, Settings, simulate};
use crate::workload::Workload;

/// The rules of the example config's wait-first mode, with `bound`: one
/// generation at a time (`cache_max_active` 1, as the real Strata server
/// runs), so busy models saturate the slot.
fn settings(bound: Duration) -> Settings {
    Settings {
        rules: Rules {
            mode: Mode::WaitFirst,
            max_pending: 16,
            cache_max_active: Some(1),
            grace: Duration::from_secs(3),
            idle: Duration::from_secs(600),
            cache_lookup: true,
            hold_max: Some(bound),
            // A tenth of the default 120 s startup_ms.
            unlearned_load: Duration::from_secs(12),
        },
        queue_timeout: None,
        cooldown: Duration::from_secs(30),
        header_delay: Duration::from_millis(50),
        // Every load cold: the property is about the order alone.
        read_ahead: None,
    }
}

/// A built-in workload over `models` models whose load times are drawn from
/// 5 to 60 s.
fn workload(name: &str, models: u64, seed: u64) -> Workload {
    let mut params = Params::parse(&[]).expect("no parameters");
    params.set("models", models);
    params.set("seed", seed);
    if name == "bursty" {
        // Fewer bursts than the default 100 keep the test quick; still
        // hundreds of requests.
        params.set("bursts", 40);
    } else {
        params.set("agents", models.max(3));
        params.set("steps", 20);
    }
    let mut workload = generate(name, &params, &[]).expect("a built-in workload");
    let mut rng = Rng::new(seed ^ 0x5eed);
    for model in workload.models.values_mut() {
        model.load = rng.between(Duration::from_secs(5), Duration::from_secs(60));
    }
    workload
}

#[test]
fn with_any_positive_bound_the_router_never_swaps_more_than_fifo() {
    let bounds = [1, 5, 20, 45, 90].map(Duration::from_secs);
    for name in ["bursty", "agents"] {
        for models in 2..=4 {
            for seed in 1..=16 {
                let workload = workload(name, models, seed);
                let fifo = simulate(&workload, &settings(bounds[0]), Policy::Fifo)
                    .loads
                    .len();
                for bound in bounds {
                    let router = simulate(&workload, &settings(bound), Policy::Router)
                        .loads
                        .len();
                    assert!(
                        router <= fifo,
                        "{name}, {models} models, seed {seed}, bound {bound:?}: the router \
                         swapped {router} times, FIFO {fifo}"
                    );
                }
            }
        }
    }
}
