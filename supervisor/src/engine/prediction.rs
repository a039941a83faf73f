//! `prefetch_predict` in the engine: the [`Prediction`] the config asks
//! for (its candidates: enabled and prepared models with a weights list),
//! and what the prefetch is told after each round ([`wish`]), the plan's
//! next model first. The step itself, which the simulator runs too, is
//! `strata_scheduler::prediction`.

use std::collections::BTreeSet;

use strata_protocol::config::Config;
use strata_scheduler::prediction::{Facts, Prediction};
use tokio::time::Instant;

use super::backend_slot;
use crate::prefetch::Wish;

/// The prediction `config` asks for: `None` unless `prefetch` and
/// `prefetch_predict` are both on and some model can be read ahead.
pub fn from_config(config: &Config) -> Option<Prediction> {
    if !(config.prefetch.enabled && config.prefetch.predict) {
        return None;
    }
    let registry = &config.registry;
    let candidates: BTreeSet<String> = registry
        .models()
        .iter()
        .filter(|entry| !entry.weights_source().paths().is_empty())
        .filter(|entry| backend_slot::unlaunchable(registry, &entry.id).is_none())
        .map(|entry| entry.id.clone())
        .collect();
    if candidates.is_empty() {
        tracing::warn!(
            "prefetch_predict is on but no enabled model has weights to read: nothing is read ahead"
        );
        return None;
    }
    tracing::info!(
        models = ?candidates,
        "prefetch_predict: the model likely requested next is read ahead while nothing waits"
    );
    Some(Prediction::new(candidates))
}

/// What the prefetch reads after a round: the plan's `next` model, else
/// the prediction's (asked with `facts` only then), else nothing and why.
pub fn wish<'a>(
    next: Option<&'a str>,
    prediction: Option<&'a mut Prediction>,
    facts: impl FnOnce() -> Facts<'a>,
    now: Instant,
) -> Wish<'a> {
    match (next, prediction) {
        (Some(model), _) => Wish::Next(model),
        (None, None) => Wish::Nothing("nothing is next"),
        (None, Some(prediction)) => match prediction.next(&facts(), now) {
            Ok(model) => Wish::Predicted(model),
            Err(why) => Wish::Nothing(why.as_str()),
        },
    }
}

#[cfg(test)]
mod tests {
    use strata_test_support::config::{ConfigBuilder, ModelSpec, TestConfig};

    use super::*;

    /// Models a (no weights), b and c (weights), d (weights, not enabled).
    fn prediction(predict: bool, prefetch: bool) -> Option<Prediction> {
        let weights = |id: &str| ModelSpec::new(id).entry_key("weights", vec![format!("/w/{id}")]);
        let config: TestConfig = ConfigBuilder::new("prediction")
            .model(ModelSpec::new("a"))
            .model(weights("b"))
            .model(weights("c"))
            .model(weights("d"))
            .enabled_models(&["a", "b", "c"])
            .set("prefetch_predict", predict)
            .set("prefetch", prefetch)
            .build();
        from_config(&Config::load(&config.path).expect("a valid config"))
    }

    #[test]
    fn only_both_keys_and_a_model_with_weights_make_a_prediction() {
        assert!(prediction(false, true).is_none(), "prefetch_predict off");
        assert!(prediction(true, false).is_none(), "prefetch off");
        let on = prediction(true, true).expect("both on");
        assert_eq!(
            on.candidates()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["b", "c"],
            "a has no weights, d is not enabled"
        );
    }
}
