//! The weights prefetch: while the next model cannot start yet, its
//! weights are read into the page cache, so its load reads memory instead
//! of the disk.
//!
//! The engine says after every decision which model goes next without
//! starting yet ([`Prefetch::want`] with [`Wish::Next`]: the scheduler's
//! `strata_scheduler::next_switch`, or the model an operator `on` waits to
//! load), or, under `prefetch_predict` while nothing is next, the model
//! likely requested next ([`Wish::Predicted`], from the engine's
//! `prediction.rs`). A predicted read is a read like any other (same
//! bounds, same idle priority); the handle says when one starts and ends,
//! and why, and a real wish for the same model takes it over without
//! starting again. This handle passes a change on to one thread of its own
//! (`worker.rs`), which reads that model's files (`files.rs`) at idle I/O
//! priority, within `prefetch_max_bytes` and `prefetch_min_free_bytes`
//! (`mem_available.rs`), and stops between two chunks once the engine wants
//! something else, in particular as soon as any load starts
//! ([`Prefetch::load_starting`]), so it never competes with a load. When a
//! load starts, the fraction of its weights already resident is measured
//! (`residency.rs`, in bounded time) on a short thread of its own, at
//! normal priority, and kept for `/metrics`.
//!
//! Nothing here decides anything about scheduling, and nothing here can
//! fail a request: every problem is a log line (once per model and cause,
//! whichever thread meets it first: `Said`).

mod files;
mod mem_available;
mod residency;
mod worker;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_protocol::config::{Config, WeightsSource};

use crate::counters::Counters;
use worker::{Job, Shared, Worker};

/// The test hook that slows the prefetch down: a pause in milliseconds
/// after each chunk read, so that an end-to-end test can watch a prefetch
/// in progress and stop it. Unset in production.
pub const TEST_PAUSE_ENV: &str = "STRATA_TEST_PREFETCH_PAUSE_MS";

/// The engine's handle on the prefetch thread.
#[derive(Debug)]
pub struct Prefetch {
    /// Models with a weights list, by ID (their residency at load start is
    /// measured even with `prefetch` off).
    sources: BTreeMap<String, WeightsSource>,
    /// What the engine last asked for (kept also for a model without
    /// weights, so the engine's wish can be checked in tests).
    wanted: Option<Wanted>,
    shared: Option<Arc<Shared>>,
    counters: Arc<Counters>,
    said: Arc<Said>,
}

/// What the engine wants read ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wish<'a> {
    /// The plan names this model next (or an operator `on` waits to load
    /// it).
    Next(&'a str),
    /// Nothing is next; `prefetch_predict` expects this model.
    Predicted(&'a str),
    /// Nothing to read, and why (said when it ends a predicted read).
    Nothing(&'static str),
}

/// The model last wished for, and whether only predicted.
#[derive(Debug, Clone)]
struct Wanted {
    model: String,
    predicted: bool,
}

/// What was said once already, by (model, what): shared by the prefetch
/// thread and the residency measurements.
#[derive(Debug, Default)]
pub(crate) struct Said(Mutex<HashSet<(String, String)>>);

impl Said {
    /// True the first time `what` is said of `model`.
    pub(crate) fn first_time(&self, model: &str, what: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .insert((model.to_owned(), what.to_owned()))
    }
}

impl Prefetch {
    /// Starts the prefetch thread, unless `prefetch` is false or no model
    /// has a weights list (then nothing is ever read ahead).
    pub fn start(config: &Config, counters: Arc<Counters>) -> Prefetch {
        let sources: BTreeMap<String, WeightsSource> = config
            .registry
            .models()
            .iter()
            .map(|entry| (entry.id.clone(), entry.weights_source()))
            .filter(|(_, source)| !source.paths().is_empty())
            .collect();
        for (model, source) in &sources {
            tracing::debug!(model, source = %source.describe(), "weights to prefetch");
        }
        let said = Arc::new(Said::default());
        let shared = (config.prefetch.enabled && !sources.is_empty()).then(|| {
            let shared = Arc::new(Shared::default());
            let worker = Worker {
                shared: shared.clone(),
                counters: counters.clone(),
                bounds: config.prefetch.clone(),
                pause: test_pause(),
                said: said.clone(),
            };
            std::thread::Builder::new()
                .name("weights-prefetch".into())
                .spawn(move || worker.run())
                .expect("the prefetch thread starts");
            shared
        });
        Prefetch {
            sources,
            wanted: None,
            shared,
            counters,
            said,
        }
    }

    /// Tests: a prefetch that reads and measures nothing and starts no
    /// thread; it only keeps what the engine asks for.
    #[cfg(test)]
    pub fn inert() -> Prefetch {
        Prefetch {
            sources: BTreeMap::new(),
            wanted: None,
            shared: None,
            counters: Arc::new(Counters::default()),
            said: Arc::new(Said::default()),
        }
    }

    /// What the engine last asked for.
    pub fn wanted(&self) -> Option<&str> {
        self.wanted.as_ref().map(|wanted| wanted.model.as_str())
    }

    /// What the engine last asked for, if it was only predicted.
    #[cfg(test)]
    pub fn predicted(&self) -> Option<&str> {
        self.wanted
            .as_ref()
            .filter(|wanted| wanted.predicted)
            .map(|wanted| wanted.model.as_str())
    }

    /// What goes next (or is expected to) without starting yet. Only a
    /// change of model does anything to the thread: the running prefetch
    /// stops, and the new model's starts; a change between predicted and
    /// real for the same model is only said.
    pub fn want(&mut self, wish: Wish<'_>) {
        let (model, predicted) = match wish {
            Wish::Next(model) => (Some(model), false),
            Wish::Predicted(model) => (Some(model), true),
            Wish::Nothing(_) => (None, false),
        };
        say_predicted(self.wanted.as_ref(), wish);
        // Called after every decision: no allocation unless something changed.
        if self.wanted() == model {
            if let Some(wanted) = &mut self.wanted {
                wanted.predicted = predicted;
            }
            return;
        }
        self.wanted = model.map(|model| Wanted {
            model: model.to_owned(),
            predicted,
        });
        let Some(shared) = &self.shared else {
            return;
        };
        let generation = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let job = model.and_then(|model| {
            Some(Job {
                model: model.to_owned(),
                source: self.sources.get(model)?.clone(),
                generation,
                predicted,
            })
        });
        let mut slot = shared
            .slot
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        slot.next = job;
        shared.wake.notify_one();
    }

    /// A load of `model` starts: the prefetch stops, and what is resident
    /// of `model`'s weights is measured and kept.
    pub fn load_starting(&mut self, model: &str) {
        self.want(Wish::Nothing("a load starts"));
        let Some(source) = self.sources.get(model).cloned() else {
            return;
        };
        let counters = self.counters.clone();
        let said = self.said.clone();
        let model = model.to_owned();
        let _ = std::thread::Builder::new()
            .name("weights-resident".into())
            .spawn(move || {
                let found = files::expand(&source.paths());
                found.warn_unusable(&model, &source, &said);
                let measured = residency::measure(&found.files);
                let (total, resident) = (measured.total, measured.resident);
                if total == 0 {
                    return;
                }
                let fraction = resident as f64 / total as f64;
                tracing::info!(
                    model,
                    bytes = total,
                    resident_percent = resident * 100 / total,
                    estimated = !measured.exact,
                    "weights resident at load start"
                );
                counters.set_resident_at_load(&model, fraction);
            });
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.generation.fetch_add(1, Ordering::AcqRel);
            shared
                .slot
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .closed = true;
            shared.wake.notify_one();
        }
    }
}

/// Says when a predicted read starts (also one that goes on from a real
/// wish for the same model) and when it ends, with why.
fn say_predicted(before: Option<&Wanted>, wish: Wish<'_>) {
    let was = before.filter(|wanted| wanted.predicted);
    let why_ended = match (was, wish) {
        (None, _) => None,
        (Some(was), Wish::Predicted(model)) if was.model == model => None,
        (Some(was), Wish::Next(model)) if was.model == model => {
            Some("a request for it waits now: its read goes on for the plan")
        }
        (Some(_), Wish::Next(_)) => Some("the plan names another model next"),
        (Some(_), Wish::Predicted(_)) => Some("another model is now more likely"),
        (Some(_), Wish::Nothing(why)) => Some(why),
    };
    if let (Some(was), Some(why)) = (was, why_ended) {
        tracing::info!(model = was.model, why, "predicted prefetch ends");
    }
    if let Wish::Predicted(model) = wish
        && was.is_none_or(|was| was.model != model)
    {
        tracing::info!(
            model,
            why = "the most requested model over the last hour, by recency, other than the loaded one",
            "predicted prefetch starts"
        );
    }
}

fn test_pause() -> Duration {
    std::env::var(TEST_PAUSE_ENV)
        .ok()
        .and_then(|value| value.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or_default()
}
