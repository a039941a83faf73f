//! The built-in workloads' parameters: `KEY=VALUE` pairs as given
//! ([`Params`]), each generator's list of what it takes ([`Spec`]: default
//! and range), and the checked values a generator reads ([`Values`]).
//! Every check names the parameter: a key a generator does not take, a
//! value out of range, a `_min` above its `_max`, `warm_load_ms` above
//! `load_ms`, too many requests.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::workload::{DEFAULT_WEIGHTS_MB, MAX_MS, MAX_WEIGHTS_MB};

/// The most requests a generator makes.
pub const MAX_REQUESTS: u64 = 1_000_000;

/// One parameter of a generator: its default and the values it takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    key: &'static str,
    default: u64,
    min: u64,
    max: u64,
}

/// A count of something that makes requests.
pub(crate) const fn count(key: &'static str, default: u64, min: u64) -> Spec {
    Spec {
        key,
        default,
        min,
        max: MAX_REQUESTS,
    }
}

pub(crate) const fn millis(key: &'static str, default: u64) -> Spec {
    Spec {
        key,
        default,
        min: 0,
        max: MAX_MS,
    }
}

/// Models are named `model-a` to `model-z` when not given.
pub(crate) const fn models(default: u64) -> Spec {
    Spec {
        key: "models",
        default,
        min: 1,
        max: 26,
    }
}

pub(crate) const SEED: Spec = Spec {
    key: "seed",
    default: 1,
    min: 0,
    max: u64::MAX,
};

/// `warm_load_ms`, whose default is the `load_ms` given (or its default):
/// `load_ms` comes before it in every generator's list.
pub(crate) const WARM_LOAD: Spec = millis("warm_load_ms", 0);

pub(crate) const WEIGHTS: Spec = Spec {
    key: "weights_mb",
    default: DEFAULT_WEIGHTS_MB,
    min: 1,
    max: MAX_WEIGHTS_MB,
};

/// The pairs of bounds: the first may not be more than the second.
const BOUNDS: [(&str, &str); 6] = [
    ("gap_min_ms", "gap_max_ms"),
    ("gen_min_ms", "gen_max_ms"),
    ("read_min_ms", "read_max_ms"),
    ("think_min_ms", "think_max_ms"),
    ("burst_min", "burst_max"),
    ("warm_load_ms", "load_ms"),
];

/// Parameters given as `KEY=VALUE` (all numbers); each generator refuses a
/// key it does not know and a value out of its range.
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
            if params.insert(key.to_owned(), value).is_some() {
                return Err(format!("--param {key}: given twice"));
            }
        }
        Ok(Params(params))
    }

    pub fn set(&mut self, key: &str, value: u64) {
        self.0.insert(key.to_owned(), value);
    }

    /// Whether `key` was given (not its default).
    pub(crate) fn gives(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Every parameter of the workload (`specs`), given or its default,
    /// each checked, and each pair of bounds.
    pub(crate) fn check(&self, workload: &str, specs: &[Spec]) -> Result<Values, String> {
        if let Some(key) = self
            .0
            .keys()
            .find(|key| !specs.iter().any(|spec| spec.key == key.as_str()))
        {
            let known: Vec<&str> = specs.iter().map(|spec| spec.key).collect();
            return Err(format!(
                "workload {workload} has no parameter {key:?} (it takes: {})",
                known.join(", ")
            ));
        }
        let mut values = BTreeMap::new();
        for spec in specs {
            let default = match spec.key {
                "warm_load_ms" => values["load_ms"],
                _ => spec.default,
            };
            let value = self.0.get(spec.key).copied().unwrap_or(default);
            if !(spec.min..=spec.max).contains(&value) {
                let unit = if spec.key.ends_with("_ms") {
                    " ms, 365 days"
                } else {
                    ""
                };
                return Err(format!(
                    "--param {}={value}: out of range ({} to {}{unit})",
                    spec.key, spec.min, spec.max
                ));
            }
            values.insert(spec.key, value);
        }
        for (low, high) in BOUNDS {
            if let (Some(&min), Some(&max)) = (values.get(low), values.get(high))
                && min > max
            {
                let given = |key: &str| {
                    if self.0.contains_key(key) {
                        ""
                    } else {
                        " (its default)"
                    }
                };
                return Err(format!(
                    "--param {low}={min} is more than {high}={max}{}",
                    given(high)
                ));
            }
        }
        Ok(Values(values))
    }
}

/// A generator's checked parameters.
pub(crate) struct Values(BTreeMap<&'static str, u64>);

impl Values {
    pub(crate) fn get(&self, key: &str) -> u64 {
        self.0[key]
    }

    pub(crate) fn ms(&self, key: &str) -> Duration {
        Duration::from_millis(self.get(key))
    }

    /// Refuses more than [`MAX_REQUESTS`] requests.
    pub(crate) fn limit_requests(&self, requests: u128, how: &str) -> Result<(), String> {
        if requests > u128::from(MAX_REQUESTS) {
            return Err(format!(
                "--param: {how} make {requests} requests, more than {MAX_REQUESTS}"
            ));
        }
        Ok(())
    }
}
