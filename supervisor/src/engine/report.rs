//! What the engine tells others about itself: the router state every proxy
//! follows, the status document, the oldest held requests and the counts
//! behind `/metrics`. Read-only functions of the engine's parts.

use std::collections::{BTreeMap, HashMap};

use strata_protocol::api::InFlightRequest;
use strata_protocol::config::{Config, ModelStatus, ReadinessReport};
use strata_protocol::control::{ModelFacts, ModelsAnswer, Status};
use strata_protocol::ids;
use strata_protocol::wire::{BackendHealth, BackendState, ModelStatusEntry, RouterState};
use strata_scheduler::{Mode, TicketKey};

use super::backend_slot::BackendSlot;
use super::leases::Leases;
use super::ledger::Ledger;
use super::now::Now;
use super::queue::Queue;
use super::watch::BackendWatch;
use crate::counters::Counters;

/// The engine's parts a report reads.
#[derive(Debug, Clone, Copy)]
pub struct ReportView<'a> {
    pub config: &'a Config,
    pub instance_id: &'a str,
    pub daemon_pid: u32,
    pub mode: Mode,
    pub routing: bool,
    /// The supervisor drains, or a proxy said it does.
    pub draining: bool,
    pub shutting_down: bool,
    pub proxies: usize,
    /// The operator's operation (`on`/`off`), if one runs.
    pub operator: Option<&'static str>,
    pub queue: &'a Queue,
    pub leases: &'a Leases,
    pub slot: &'a BackendSlot,
    pub ledger: &'a Ledger,
    pub watch: &'a BackendWatch,
}

fn millis(duration: std::time::Duration) -> u64 {
    duration.as_millis() as u64
}

impl ReportView<'_> {
    /// The state every proxy follows (sent on connect and on each change).
    pub fn router_state(&self, now: Now) -> RouterState {
        let loaded = self.slot.serving_model();
        let statuses = self
            .config
            .registry
            .models()
            .iter()
            .map(|entry| {
                let status = if loaded == Some(entry.id.as_str()) {
                    ModelStatus::Loaded
                } else if entry.prepared.is_prepared() && self.slot.is_verified(&entry.id) {
                    ModelStatus::Verified
                } else {
                    entry.prepared
                };
                ModelStatusEntry {
                    id: entry.id.clone(),
                    status,
                    last_error: self.slot.start_error(&entry.id).map(str::to_owned),
                    cooldown_remaining_ms: self
                        .slot
                        .cooldown_remaining(&entry.id, now.at)
                        .map(millis),
                    typical_load_ms: self.slot.typical_load_ms(&entry.id),
                }
            })
            .collect();
        RouterState {
            routing: self.routing,
            draining: self.draining,
            loaded: loaded.map(str::to_owned),
            loading: self.slot.loading_model().map(str::to_owned),
            backend: self.slot.serving_instance(),
            last_startup_error: self.slot.last_startup_error().map(str::to_owned),
            statuses,
            backend_health: self.backend_health(now),
            readiness: self.slot.readiness(),
        }
    }

    /// The `models` control answer: the proxy's per-model view, for
    /// `strata-ctl top` on the socket.
    pub fn models(&self, now: Now) -> ModelsAnswer {
        let models = self
            .router_state(now)
            .statuses
            .into_iter()
            .map(|entry| ModelFacts {
                id: entry.id,
                status: entry.status,
                typical_load_ms: entry.typical_load_ms,
                cooldown_remaining_ms: entry.cooldown_remaining_ms,
            })
            .collect();
        ModelsAnswer { models }
    }

    /// The backend's state as the probes and the slot see it.
    pub fn backend_health(&self, now: Now) -> BackendHealth {
        let serving = self.slot.serving_instance();
        let cause = self.watch.unresponsive(serving).map(str::to_owned);
        let state = if cause.is_some() {
            BackendState::Unresponsive
        } else if self.slot.loading_model().is_some() || self.slot.op_name().is_some() {
            BackendState::Loading
        } else if serving.is_some() {
            BackendState::Serving
        } else if self.slot.longest_cooldown(now.at).is_some() {
            BackendState::Cooling
        } else {
            BackendState::Idle
        };
        BackendHealth {
            state,
            last_good_probe_unix_ms: self
                .watch
                .last_good_age_ms(serving, now.at)
                .map(|age| now.unix_ms.saturating_sub(age)),
            cause,
        }
    }

    /// The status document.
    pub fn status(&self, now: Now) -> Status {
        let operation = self
            .operator
            .or(self.slot.op_name())
            .or(self.shutting_down.then_some("shutdown"));
        let backend = self.backend_health(now);
        Status {
            daemon_pid: self.daemon_pid,
            instance_id: self.instance_id.to_owned(),
            busy: operation.is_some(),
            operation: operation.map(str::to_owned),
            routing: self.routing,
            draining: self.draining,
            child_pid: self.slot.child_pid(),
            loaded: self.slot.serving_model().map(str::to_owned),
            loading: self.slot.loading_model().map(str::to_owned),
            last_startup_error: self.slot.last_startup_error().map(str::to_owned),
            proxies: self.proxies,
            active_leases: self.leases.len(),
            waiting_requests: self.queue.len(),
            // The longest of the models' cooldowns (each model has its own).
            cooldown_remaining_ms: self.slot.longest_cooldown(now.at).map(millis),
            backend_state: backend.state,
            last_good_probe_age_ms: self
                .watch
                .last_good_age_ms(self.slot.serving_instance(), now.at),
            readiness: ReadinessReport::new(self.config.readiness, self.slot.readiness()),
        }
    }

    /// The oldest open tickets that still wait or hold a lease (failed ones
    /// whose `Finish` is on its way are not held any more), oldest first,
    /// at most `limit`.
    pub fn in_flight_requests(&self, limit: usize, now_unix_ms: u64) -> Vec<InFlightRequest> {
        let queued: HashMap<TicketKey, bool> = self
            .queue
            .tickets()
            .iter()
            .map(|ticket| (ticket.key, ticket.admitted))
            .collect();
        let mut held: Vec<InFlightRequest> = self
            .ledger
            .iter()
            .filter_map(|(key, open)| {
                let stage = if self.leases.contains(*key) {
                    "leased"
                } else {
                    match queued.get(key) {
                        Some(true) => "loading",
                        Some(false) => "waiting",
                        None => return None,
                    }
                };
                Some(InFlightRequest {
                    request_id: ids::request_id(self.instance_id, open.arrival.arrival_seq),
                    model: open.model.clone(),
                    tier: open.tier.as_str().to_owned(),
                    stage: stage.to_owned(),
                    age_ms: now_unix_ms.saturating_sub(open.request.arrived_unix_ms),
                })
            })
            .collect();
        // The oldest `limit` first, without sorting thousands of waiting ones.
        if held.len() > limit && limit > 0 {
            held.select_nth_unstable_by(limit - 1, |a, b| b.age_ms.cmp(&a.age_ms));
        }
        held.truncate(limit);
        held.sort_by_key(|held| std::cmp::Reverse(held.age_ms));
        held
    }

    /// Publishes the router-wide counts (see [`Counters`]). In wait-first
    /// mode a ticket admitted to a load is in flight, not queued; in legacy
    /// mode queue depth is pending minus admitted leases, so it also counts
    /// the ticket holding the engine lock through its load and header wait.
    /// In flight counts admitted tickets and leases in both.
    pub fn publish_counts(&self, counters: &Counters) {
        let legacy = self.mode == Mode::Legacy;
        let tickets = self.queue.tickets();
        let queued = || {
            tickets
                .iter()
                .filter(move |ticket| !ticket.admitted || legacy)
        };
        let mut by_tier = [0u64; 3];
        for ticket in queued() {
            by_tier[ticket.tier.index()] += 1;
        }
        if legacy {
            for (_, lease) in self.leases.iter().filter(|(_, lease)| lease.header_wait) {
                by_tier[lease.tier.index()] += 1;
            }
        }
        let admitted = tickets.iter().filter(|ticket| ticket.admitted).count();
        // Counted in place: this runs after every command, so no allocation
        // once every model has its entry.
        let count_by_model = |by_model: &mut BTreeMap<String, u64>| {
            if by_model.is_empty() {
                for entry in self.config.registry.models() {
                    by_model.insert(entry.id.clone(), 0);
                }
            }
            by_model.values_mut().for_each(|count| *count = 0);
            for ticket in queued() {
                if let Some(count) = by_model.get_mut(&ticket.model) {
                    *count += 1;
                }
            }
            // The same set as by tier: a legacy header wait is queued too.
            if legacy {
                for (_, lease) in self.leases.iter().filter(|(_, lease)| lease.header_wait) {
                    if let Some(count) = by_model.get_mut(&lease.model) {
                        *count += 1;
                    }
                }
            }
        };
        counters.publish(
            by_tier,
            (self.leases.len() + admitted) as u64,
            count_by_model,
            self.proxies as u64,
        );
    }
}
