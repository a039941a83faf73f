//! The gauges of the Gateway API Inference Extension's "Model Server
//! Protocol", so its endpoint picker can balance a fleet of routers (one per
//! GPU host): total queued requests, total running requests and the LoRA
//! info gauge, named like vLLM's under the `strata_router_` prefix. The
//! picker's flags name them (`docs/many-hosts.md`):
//!
//! - `--total-queued-requests-metric=strata_router_num_requests_waiting`
//! - `--total-running-requests-metric=strata_router_num_requests_running`
//! - `--lora-info-metric=strata_router_lora_requests_info`
//!
//! No KV-cache utilisation gauge: the Strata backend reports none, so the
//! router has no figure to pass on and writes none (a made-up value would
//! steer the picker wrong).
//!
//! The router serves one model at a time, so the info gauge names the
//! loaded model as the one running "adapter" with `max_lora` 1: the
//! picker's adapter affinity then sends a model's requests to the host that
//! has it loaded, or that already waits for it. An alias is listed beside
//! the model it resolves to now (a request for `qwen3.8-flash-next` is
//! served by the loaded `qwen3.8-flash-next-q4_k_m` without a swap), since
//! the picker compares the name a request asks for.

use std::collections::BTreeMap;

use strata_protocol::api::Metrics;
use strata_protocol::config::{Config, Resolution};
use strata_protocol::wire::{RouterMetrics, RouterState};

use super::Exposition;

/// Appends the protocol's families. Without the supervisor the families
/// are listed without samples, like the others.
pub(super) fn render(
    out: &mut Exposition,
    config: &Config,
    doc: &Metrics,
    router: Option<&RouterState>,
    metrics: Option<&RouterMetrics>,
) {
    out.family(
        "num_requests_waiting",
        "gauge",
        "Requests waiting for admission, over every model (those waiting for their model to be \
         swapped in included); the Model Server Protocol's TotalQueuedRequests.",
    );
    if let Some(waiting) = doc.queue_depth {
        out.sample("num_requests_waiting", &[], waiting as f64);
    }
    out.family(
        "num_requests_running",
        "gauge",
        "Admitted requests (leased, or admitted to the load that serves them); the Model Server \
         Protocol's TotalRunningRequests.",
    );
    if let Some(running) = doc.in_flight {
        out.sample("num_requests_running", &[], running as f64);
    }
    out.family(
        "lora_requests_info",
        "gauge",
        "1, labelled with the loaded model as the running adapter and the models requests wait \
         for as waiting adapters (comma-separated); max_lora is 1: one model at a time.",
    );
    if let (Some(router), Some(metrics)) = (router, metrics) {
        let loaded = router.loaded.as_deref();
        let aliases: Vec<(&str, &str)> = config
            .registry
            .aliases()
            .filter_map(|alias| match config.registry.resolve(&alias.name, loaded) {
                Resolution::Alias { alias, model } => {
                    Some((alias.name.as_str(), model.id.as_str()))
                }
                _ => None,
            })
            .collect();
        let labels = adapter_labels(
            loaded,
            router.loading.as_deref(),
            &metrics.queue_depth_by_model,
            &aliases,
        );
        out.sample(
            "lora_requests_info",
            &[
                ("running_lora_adapters", &labels.running),
                ("waiting_lora_adapters", &labels.waiting),
                ("max_lora", "1"),
            ],
            1.0,
        );
    }
}

/// The info gauge's adapter lists, comma-separated as vLLM writes them.
#[derive(Debug, PartialEq, Eq)]
struct AdapterLabels {
    /// The loaded model and the aliases that resolve to it, or empty.
    running: String,
    /// The models with waiting requests and the model being loaded, without
    /// the loaded one, and the aliases that resolve to one of them.
    waiting: String,
}

/// `aliases` pairs each visible alias with the model it resolves to while
/// `loaded` is loaded. Lists are in name order.
fn adapter_labels(
    loaded: Option<&str>,
    loading: Option<&str>,
    waiting_by_model: &BTreeMap<String, u64>,
    aliases: &[(&str, &str)],
) -> AdapterLabels {
    let mut waiting: Vec<&str> = waiting_by_model
        .iter()
        .filter(|(_, count)| **count > 0)
        .map(|(model, _)| model.as_str())
        .chain(loading)
        .filter(|model| Some(*model) != loaded)
        .collect();
    let mut running: Vec<&str> = loaded.into_iter().collect();
    for (alias, model) in aliases {
        if Some(*model) == loaded {
            running.push(alias);
        } else if waiting.contains(model) {
            waiting.push(alias);
        }
    }
    for list in [&mut running, &mut waiting] {
        list.sort_unstable();
        list.dedup();
    }
    AdapterLabels {
        running: running.join(","),
        waiting: waiting.join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(counts: &[(&str, u64)]) -> BTreeMap<String, u64> {
        counts
            .iter()
            .map(|(model, count)| ((*model).to_owned(), *count))
            .collect()
    }

    #[test]
    fn the_loaded_model_runs_and_models_with_waiting_requests_wait() {
        let labels = adapter_labels(
            Some("a"),
            None,
            &waiting(&[("a", 2), ("b", 1), ("c", 0), ("d", 3)]),
            &[],
        );
        assert_eq!(
            labels,
            AdapterLabels {
                running: "a".to_owned(),
                waiting: "b,d".to_owned()
            }
        );
    }

    #[test]
    fn a_model_being_loaded_waits_and_nothing_runs() {
        let labels = adapter_labels(None, Some("b"), &waiting(&[("a", 1), ("b", 1)]), &[]);
        assert_eq!(
            labels,
            AdapterLabels {
                running: String::new(),
                waiting: "a,b".to_owned()
            }
        );
    }

    #[test]
    fn an_alias_is_listed_beside_the_model_it_resolves_to() {
        let labels = adapter_labels(
            Some("flash-q4"),
            None,
            &waiting(&[("a3b-q4", 1), ("flash-q4", 0)]),
            &[
                ("flash", "flash-q4"),
                ("a3b", "a3b-q4"),
                ("other", "idle-model"),
            ],
        );
        assert_eq!(
            labels,
            AdapterLabels {
                running: "flash,flash-q4".to_owned(),
                waiting: "a3b,a3b-q4".to_owned()
            }
        );
    }

    #[test]
    fn an_idle_router_writes_empty_lists_and_max_lora_1() {
        let labels = adapter_labels(None, None, &waiting(&[("a", 0)]), &[]);
        let mut out = Exposition::default();
        out.sample(
            "lora_requests_info",
            &[
                ("running_lora_adapters", &labels.running),
                ("waiting_lora_adapters", &labels.waiting),
                ("max_lora", "1"),
            ],
            1.0,
        );
        assert_eq!(
            out.finish(),
            "strata_router_lora_requests_info{running_lora_adapters=\"\",\
             waiting_lora_adapters=\"\",max_lora=\"1\"} 1\n"
        );
    }
}
