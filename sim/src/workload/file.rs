//! The workload file, version 1: JSON lines that hold a [`Workload`]
//! ([`Workload::parse`] reads one, [`Workload::to_file`] writes one).
//!
//! One JSON object per line; blank lines are ignored. The first line is the
//! header, every other line declares one model, one request or one agent:
//!
//! ```text
//! {"strata_workload": {"version": 1, "name": "two agents", "seed": 1}}
//! {"model": {"id": "a", "load_ms": 20000, "fail_rate": 0.0, "warm_load_ms": 8000, "weights_mb": 16000}}
//! {"request": {"at_ms": 0, "model": "a", "tier": "default", "service_ms": 5000, "patience_ms": null, "cache_rank": null}}
//! {"agent": {"model": "a", "tier": "default", "start_ms": 0, "steps": [{"gap_ms": 0, "service_ms": 4000}, {"gap_ms": 1500, "service_ms": 9000}]}}
//! ```
//!
//! - `model`: `load_ms` is how long a load of it takes (the old backend's
//!   stop included); `fail_rate` (default 0) the chance that a load fails,
//!   drawn from the header's `seed`. `warm_load_ms` (default: `load_ms`)
//!   is how long a load takes when every weight is already in the page
//!   cache, and `weights_mb` (default [`DEFAULT_WEIGHTS_MB`]) how many
//!   megabytes (10^6 bytes) of weights the router's prefetch reads for
//!   it; a load the prefetch read a part of ahead takes in between
//!   (`sim/src/prefetch.rs`). With neither key the model always loads in
//!   `load_ms`.
//! - `request`: arrives at `at_ms`; once granted it generates for
//!   `service_ms`. `tier` is `priority`, `default` (the default) or `flex`.
//!   `patience_ms` (default null: forever) is when, counted from arrival,
//!   its client gives up, waiting or not. `cache_rank` (default null: 0) is
//!   its cached/input fraction, what a cache lookup would report.
//! - `agent`: a closed loop on one model: its first request at `start_ms`,
//!   each next one `gap_ms` after the previous one ended (however it
//!   ended); the first step's `gap_ms` is ignored. Steps take the request
//!   keys `service_ms`, `patience_ms` and `cache_rank`.
//!
//! Every model a request or agent names must be declared. Every
//! millisecond value is a whole number from 0 to [`MAX_MS`] (365 days),
//! `cache_rank` and `fail_rate` are from 0 to 1, `warm_load_ms` at most
//! `load_ms`, `weights_mb` from 1 to [`MAX_WEIGHTS_MB`]. Unknown keys, a
//! missing header, another version, a value out of range or any bad line
//! refuse the whole file, naming the line. The keys `warm_load_ms` and
//! `weights_mb` came later within version 1: a file without them reads as
//! before (every load cold), and only a model with a warm load writes
//! them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    Agent, DEFAULT_WEIGHTS_MB, MAX_MS, MAX_WEIGHTS_MB, ModelParams, Request, Step,
    WORKLOAD_VERSION, WarmLoad, Workload, WorkloadError, parse_tier, tier_name,
};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    StrataWorkload(HeaderLine),
    Model(ModelLine),
    Request(RequestLine),
    Agent(AgentLine),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderLine {
    version: u32,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    seed: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelLine {
    id: String,
    load_ms: u64,
    #[serde(default)]
    fail_rate: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    warm_load_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weights_mb: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestLine {
    at_ms: u64,
    model: String,
    #[serde(default = "default_tier")]
    tier: String,
    service_ms: u64,
    #[serde(default)]
    patience_ms: Option<u64>,
    #[serde(default)]
    cache_rank: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentLine {
    model: String,
    #[serde(default = "default_tier")]
    tier: String,
    #[serde(default)]
    start_ms: u64,
    steps: Vec<StepLine>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepLine {
    #[serde(default)]
    gap_ms: u64,
    service_ms: u64,
    #[serde(default)]
    patience_ms: Option<u64>,
    #[serde(default)]
    cache_rank: Option<f64>,
}

fn default_tier() -> String {
    "default".into()
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn to_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Refuses a millisecond value past [`MAX_MS`].
fn check_ms(name: &str, value: u64) -> Result<u64, String> {
    if value > MAX_MS {
        return Err(format!(
            "{name} {value} is out of range (0 to {MAX_MS} ms, 365 days)"
        ));
    }
    Ok(value)
}

/// Refuses a `cache_rank` outside 0 to 1.
fn check_rank(name: &str, value: Option<f64>) -> Result<Option<f64>, String> {
    match value {
        Some(rank) if !(0.0..=1.0).contains(&rank) => {
            Err(format!("{name} {rank} is out of range (0 to 1)"))
        }
        _ => Ok(value),
    }
}

/// A model line's warm load, if it gives one: `warm_load_ms` at most its
/// `load_ms` (which is checked already), `weights_mb` from 1 to
/// [`MAX_WEIGHTS_MB`].
fn warm_load(line: &ModelLine) -> Result<Option<WarmLoad>, String> {
    if line.warm_load_ms.is_none() && line.weights_mb.is_none() {
        return Ok(None);
    }
    let load = line.warm_load_ms.unwrap_or(line.load_ms);
    if load > line.load_ms {
        return Err(format!(
            "warm_load_ms {load} is more than load_ms {} (a warm load is never slower)",
            line.load_ms
        ));
    }
    let weights_mb = line.weights_mb.unwrap_or(DEFAULT_WEIGHTS_MB);
    if !(1..=MAX_WEIGHTS_MB).contains(&weights_mb) {
        return Err(format!(
            "weights_mb {weights_mb} is out of range (1 to {MAX_WEIGHTS_MB})"
        ));
    }
    Ok(Some(WarmLoad {
        load: ms(load),
        weights_mb,
    }))
}

impl Workload {
    /// Reads a workload file's text.
    pub fn parse(text: &str) -> Result<Workload, WorkloadError> {
        let mut workload = Workload::default();
        let mut header = false;
        let mut uses: Vec<(usize, String)> = Vec::new();
        let fail = |line: usize, reason: String| WorkloadError { line, reason };
        for (index, text) in text.lines().enumerate() {
            let number = index + 1;
            if text.trim().is_empty() {
                continue;
            }
            let line: Line =
                serde_json::from_str(text).map_err(|err| fail(number, err.to_string()))?;
            let tier = |name: &str| {
                parse_tier(name).ok_or_else(|| {
                    fail(
                        number,
                        format!("unknown tier {name:?} (priority, default or flex)"),
                    )
                })
            };
            match line {
                Line::StrataWorkload(_) if header => {
                    return Err(fail(number, "a second header".into()));
                }
                Line::StrataWorkload(line) => {
                    if line.version != WORKLOAD_VERSION {
                        return Err(fail(
                            number,
                            format!(
                                "workload version {} (this build reads version {WORKLOAD_VERSION})",
                                line.version
                            ),
                        ));
                    }
                    header = true;
                    workload.name = line.name;
                    workload.description = line.description;
                    workload.seed = line.seed;
                }
                _ if !header => {
                    return Err(fail(
                        number,
                        "the first line must be the header {\"strata_workload\": {\"version\": 1, ...}}"
                            .into(),
                    ));
                }
                Line::Model(line) => {
                    if !(0.0..=1.0).contains(&line.fail_rate) {
                        return Err(fail(number, "fail_rate must be between 0 and 1".into()));
                    }
                    let at = |reason| fail(number, reason);
                    let params = ModelParams {
                        load: ms(check_ms("load_ms", line.load_ms).map_err(at)?),
                        fail_rate: line.fail_rate,
                    };
                    if let Some(warm) = warm_load(&line).map_err(at)? {
                        workload.warm.insert(line.id.clone(), warm);
                    }
                    if workload.models.insert(line.id.clone(), params).is_some() {
                        return Err(fail(number, format!("model {:?} declared twice", line.id)));
                    }
                }
                Line::Request(line) => {
                    let at = |reason| fail(number, reason);
                    let request = Request {
                        at: ms(check_ms("at_ms", line.at_ms).map_err(at)?),
                        tier: tier(&line.tier)?,
                        model: line.model,
                        service: ms(check_ms("service_ms", line.service_ms).map_err(at)?),
                        patience: match line.patience_ms {
                            Some(value) => Some(ms(check_ms("patience_ms", value).map_err(at)?)),
                            None => None,
                        },
                        cache_rank: check_rank("cache_rank", line.cache_rank).map_err(at)?,
                    };
                    uses.push((number, request.model.clone()));
                    workload.requests.push(request);
                }
                Line::Agent(line) => {
                    if line.steps.is_empty() {
                        return Err(fail(number, "an agent needs at least one step".into()));
                    }
                    let at = |reason| fail(number, reason);
                    let mut steps = Vec::with_capacity(line.steps.len());
                    for (i, step) in line.steps.into_iter().enumerate() {
                        let name = |key: &str| format!("steps[{i}].{key}");
                        steps.push(Step {
                            gap: ms(check_ms(&name("gap_ms"), step.gap_ms).map_err(at)?),
                            service: ms(
                                check_ms(&name("service_ms"), step.service_ms).map_err(at)?
                            ),
                            patience: match step.patience_ms {
                                Some(value) => {
                                    Some(ms(check_ms(&name("patience_ms"), value).map_err(at)?))
                                }
                                None => None,
                            },
                            cache_rank: check_rank(&name("cache_rank"), step.cache_rank)
                                .map_err(at)?,
                        });
                    }
                    uses.push((number, line.model.clone()));
                    workload.agents.push(Agent {
                        tier: tier(&line.tier)?,
                        model: line.model,
                        start: ms(check_ms("start_ms", line.start_ms).map_err(at)?),
                        steps,
                    });
                }
            }
        }
        if !header {
            return Err(fail(0, "an empty workload file (no header)".into()));
        }
        for (number, model) in uses {
            if !workload.models.contains_key(&model) {
                return Err(fail(
                    number,
                    format!("model {model:?} is not declared by a model line"),
                ));
            }
        }
        workload.requests.sort_by_key(|request| request.at);
        Ok(workload)
    }

    /// The workload as a file [`Workload::parse`] reads back unchanged.
    pub fn to_file(&self) -> String {
        let mut lines = vec![Line::StrataWorkload(HeaderLine {
            version: WORKLOAD_VERSION,
            name: self.name.clone(),
            description: self.description.clone(),
            seed: self.seed,
        })];
        for (id, params) in &self.models {
            let warm = self.warm.get(id);
            lines.push(Line::Model(ModelLine {
                id: id.clone(),
                load_ms: to_ms(params.load),
                fail_rate: params.fail_rate,
                warm_load_ms: warm.map(|warm| to_ms(warm.load)),
                weights_mb: warm.map(|warm| warm.weights_mb),
            }));
        }
        for request in &self.requests {
            lines.push(Line::Request(RequestLine {
                at_ms: to_ms(request.at),
                model: request.model.clone(),
                tier: tier_name(request.tier).into(),
                service_ms: to_ms(request.service),
                patience_ms: request.patience.map(to_ms),
                cache_rank: request.cache_rank,
            }));
        }
        for agent in &self.agents {
            lines.push(Line::Agent(AgentLine {
                model: agent.model.clone(),
                tier: tier_name(agent.tier).into(),
                start_ms: to_ms(agent.start),
                steps: agent
                    .steps
                    .iter()
                    .map(|step| StepLine {
                        gap_ms: to_ms(step.gap),
                        service_ms: to_ms(step.service),
                        patience_ms: step.patience.map(to_ms),
                        cache_rank: step.cache_rank,
                    })
                    .collect(),
            }));
        }
        let mut text = String::new();
        for line in lines {
            text.push_str(&serde_json::to_string(&line).expect("plain data serializes"));
            text.push('\n');
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_protocol::wire::ServiceTier;

    const FILE: &str = r#"{"strata_workload": {"version": 1, "name": "t", "seed": 3}}
{"model": {"id": "a", "load_ms": 20000}}

{"model": {"id": "b", "load_ms": 5000, "fail_rate": 0.5, "warm_load_ms": 1000}}
{"request": {"at_ms": 900, "model": "b", "tier": "flex", "service_ms": 100, "patience_ms": 5000, "cache_rank": 0.5}}
{"request": {"at_ms": 0, "model": "a", "service_ms": 200}}
{"agent": {"model": "a", "steps": [{"service_ms": 1000}, {"gap_ms": 500, "service_ms": 2000}]}}
"#;

    #[test]
    fn a_file_reads_back_to_what_it_was_written_from() {
        let workload = Workload::parse(FILE).unwrap();
        assert_eq!(workload.models.len(), 2);
        assert_eq!(workload.request_count(), 4);
        assert_eq!(workload.requests[0].model, "a", "sorted by arrival");
        assert_eq!(workload.requests[1].tier, ServiceTier::Flex);
        assert_eq!(workload.requests[1].patience, Some(Duration::from_secs(5)));
        assert_eq!(workload.agents[0].steps[1].gap, Duration::from_millis(500));
        // A model without warm keys loads cold; one with them takes the
        // default weights size when it gives none.
        assert_eq!(workload.warm_load_time("a"), Duration::from_secs(20));
        let warm = &workload.warm["b"];
        assert_eq!(
            (warm.load, warm.weights_mb),
            (Duration::from_secs(1), DEFAULT_WEIGHTS_MB)
        );
        assert!(!workload.warm.contains_key("a"));
        assert_eq!(Workload::parse(&workload.to_file()).unwrap(), workload);
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        let cases = [
            ("", 0, "no header"),
            (
                r#"{"model": {"id": "a", "load_ms": 1}}"#,
                1,
                "the first line must be the header",
            ),
            (
                r#"{"strata_workload": {"version": 2}}"#,
                1,
                "workload version 2",
            ),
            (
                "{\"strata_workload\": {\"version\": 1}}\n{\"request\": {\"at_ms\": 0, \"model\": \"x\", \"service_ms\": 1}}",
                2,
                "not declared",
            ),
            (
                "{\"strata_workload\": {\"version\": 1}}\n{\"model\": {\"id\": \"a\", \"load_ms\": 1, \"speed\": 2}}",
                2,
                "unknown field",
            ),
            (
                "{\"strata_workload\": {\"version\": 1}}\n\n{\"model\": {\"id\": \"a\", \"load_ms\": 1}}\n{\"request\": {\"at_ms\": 0, \"model\": \"a\", \"tier\": \"fast\", \"service_ms\": 1}}",
                4,
                "unknown tier",
            ),
            (
                "{\"strata_workload\": {\"version\": 1}}\n{\"model\": {\"id\": \"a\", \"load_ms\": 1}}\n{\"request\": {\"at_ms\": 0, \"mod",
                3,
                "EOF",
            ),
        ];
        for (text, line, reason) in cases {
            let err = Workload::parse(text).unwrap_err();
            assert_eq!(err.line, line, "{text}: {err}");
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn a_value_out_of_range_is_refused_with_its_line() {
        let head = "{\"strata_workload\": {\"version\": 1}}\n{\"model\": {\"id\": \"a\", \"load_ms\": 1}}\n";
        let request = |fields: &str| {
            format!("{head}{{\"request\": {{\"model\": \"a\", \"service_ms\": 1, {fields}}}}}\n")
        };
        let agent = |step: &str| {
            format!(
                "{head}{{\"agent\": {{\"model\": \"a\", \"steps\": [{{\"service_ms\": 1}}, {step}]}}}}\n"
            )
        };
        let past = MAX_MS + 1;
        let cases = [
            (
                request("\"at_ms\": 0, \"cache_rank\": -1"),
                "cache_rank -1 is out of range (0 to 1)",
            ),
            (
                request("\"at_ms\": 0, \"cache_rank\": 1.5"),
                "cache_rank 1.5 is out of range",
            ),
            (
                request(&format!("\"at_ms\": {past}")),
                "at_ms 31536000001 is out of range",
            ),
            (
                request(&format!("\"at_ms\": 0, \"patience_ms\": {}", u64::MAX)),
                "patience_ms 18446744073709551615 is out of range",
            ),
            (request("\"at_ms\": -1"), "invalid value: integer `-1`"),
            (
                format!("{head}{{\"model\": {{\"id\": \"b\", \"load_ms\": {past}}}}}\n"),
                "load_ms 31536000001 is out of range",
            ),
            (
                agent(&format!("{{\"gap_ms\": {past}, \"service_ms\": 1}}")),
                "steps[1].gap_ms 31536000001 is out of range",
            ),
            (
                agent("{\"service_ms\": 1, \"cache_rank\": -0.5}"),
                "steps[1].cache_rank -0.5 is out of range",
            ),
            (
                format!(
                    "{head}{{\"model\": {{\"id\": \"b\", \"load_ms\": 1000, \"warm_load_ms\": 1001}}}}\n"
                ),
                "warm_load_ms 1001 is more than load_ms 1000",
            ),
            (
                format!(
                    "{head}{{\"model\": {{\"id\": \"b\", \"load_ms\": 1, \"weights_mb\": 0}}}}\n"
                ),
                "weights_mb 0 is out of range (1 to 1000000000)",
            ),
        ];
        for (text, reason) in cases {
            let err = Workload::parse(&text).unwrap_err();
            assert_eq!(err.line, 3, "{text}: {err}");
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
        // The largest values are read.
        let text = request(&format!("\"at_ms\": {MAX_MS}, \"cache_rank\": 1"));
        assert_eq!(
            Workload::parse(&text).unwrap().requests[0].at.as_millis(),
            u128::from(MAX_MS)
        );
    }
}
