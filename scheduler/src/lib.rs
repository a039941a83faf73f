//! Who goes next: the scheduling decision, as a pure function.
//!
//! [`decide`] takes a [`View`] of the engine (the one queue of tickets from
//! every proxy, the leases, the backend, the clocks, the cache scores and
//! `now`) and returns a [`Plan`]: decisions (grant, admit to a load, start a
//! load, fail, unload, start a cache lookup) and when to look again. It does
//! no I/O and reads no clock; the engine task applies the plan, and the
//! simulator (`strata-sim`) too, each decision through the one [`apply()`]
//! on its own [`Book`]. Every rule of the spec's "Scheduling and timers"
//! sections that decides an order lives here:
//!
//! - **Tiers.** Only the best waiting tier may be admitted: a waiting
//!   higher-tier ticket holds back every lower-tier ticket, including ones
//!   for the loaded model, so the engine drains toward it. Nothing admitted
//!   is preempted. Priority skips the grace hold.
//! - **Wait-first.** Tickets for the serving model are granted while
//!   dispatch slots are free (`max_pending` and `cache_max_active` count
//!   dispatched requests across all proxies); a ticket for another model
//!   waits until every lease has ended and, unless it is priority, the
//!   model has been quiet for `model_grace_ms`; then the model of the
//!   earliest waiting ticket of the best tier goes next, with its group.
//!   No queue deadline.
//! - **Legacy.** One engine lock, taken in (tier, arrival) order by the head
//!   of the queue and held from admission through any load until the
//!   upstream response headers arrive; tickets for the loaded model overlap
//!   once they have their headers; a ticket for another model waits, at the
//!   head, until every response has finished (no grace: the original
//!   contract); `queue_ms` fails a waiting ticket without switching.
//! - **Cache order.** Within a tier and model group, when more tickets
//!   compete than slots are free, tickets with a higher cached/input
//!   fraction go first (inputs below the backend's threshold count as 0;
//!   ties keep arrival order). Scores come from a lookup the plan asks for;
//!   without valid scores (lookup failed, late, or invalidated) arrival
//!   order stands. At most one lookup per admission round.
//! - **Hold bound** (wait-first, opt-in `model_hold_max_ms`): once the
//!   best tier's earliest ticket for another model (the due ticket) has
//!   waited that long, counted from the later of its arrival and the moment
//!   the serving model became ready, the serving model is granted only its
//!   own tickets of the due ticket's tier that arrived before it ("fair
//!   hold"), and the switch follows as soon as those and its leases end,
//!   without grace. The bound in force is never below 1.5 load times of the
//!   two models ([`Rules::effective_hold`]). Counting from readiness means a
//!   switch always serves the group it was made for; fair hold and the
//!   floor mean no more switches than FIFO, with any number of models.
//! - **Switch reasons**: every [`Decision::StartLoad`] that replaces a
//!   model, and every unload and cancel, says why
//!   ([`Decision::switch_reason`]).
//! - **Abandoned loads** (wait-first): a load whose tickets have all gone
//!   (their clients left) while a ticket for another model waits is
//!   cancelled, unless an operator `on` started it.
//! - **Idle unload** waits for no lease, an empty queue and
//!   `max(idle_ms, model_grace_ms)` of quiet (legacy: `idle_ms`).
//!
//! Ordering key of a ticket: (tier, model-group rule, cache rank, arrival).
//!
//! [`forecast`] is pure too: which model is likely asked for next, from
//! recent arrivals; [`prediction`] says when `prefetch_predict` may read it
//! ahead (the engine's and the simulator's one rule).

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use strata_protocol::config::Config;
use strata_protocol::wire::{ServiceTier, TicketId};
use tokio::time::Instant;

mod apply;
pub mod forecast;
mod load_times;
pub mod prediction;

pub use apply::{Book, apply};
pub use forecast::Forecast;
pub use load_times::LoadTimes;

/// One proxy connection on the supervisor socket.
pub type ConnId = u64;

/// A ticket's identity: its proxy connection and the proxy's ticket ID.
pub type TicketKey = (ConnId, TicketId);

/// The two scheduling contracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `wait_when_busy: true`.
    WaitFirst,
    /// `wait_when_busy` absent or false: the original bounded contract.
    Legacy,
}

/// The configured rules, fixed at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub mode: Mode,
    /// Wait-first: dispatched requests. Legacy: active plus waiting (checked
    /// when a ticket enters, see [`refusal`]).
    pub max_pending: usize,
    /// The extra dispatch limit for cache lookups; `None` when disabled.
    pub cache_max_active: Option<usize>,
    pub grace: Duration,
    pub idle: Duration,
    /// Cache lookups are enabled (`cache_lookup_ms` > 0).
    pub cache_lookup: bool,
    /// Wait-first `model_hold_max_ms`; `None` when 0 (off, the spec's
    /// behaviour).
    pub hold_max: Option<Duration>,
    /// What a load is taken to last before any load was learned: a tenth of
    /// `startup_ms` (see [`UNLEARNED_LOAD_SHARE`]).
    pub unlearned_load: Duration,
}

impl Rules {
    /// The rules `config` sets (what the supervisor runs with).
    pub fn from_config(config: &Config) -> Rules {
        Rules {
            mode: if config.scheduling.wait_when_busy {
                Mode::WaitFirst
            } else {
                Mode::Legacy
            },
            max_pending: config.scheduling.max_pending,
            cache_max_active: config.cache_active_limit(),
            grace: Duration::from_millis(config.timers.model_grace_ms),
            idle: Duration::from_millis(config.timers.idle_ms),
            cache_lookup: config.cache_lookup_timeout().is_some(),
            hold_max: (config.timers.model_hold_max_ms > 0)
                .then(|| Duration::from_millis(config.timers.model_hold_max_ms)),
            unlearned_load: Duration::from_millis(config.timers.startup_ms) / UNLEARNED_LOAD_SHARE,
        }
    }

    /// The hold bound in force between `serving` and `waiting`: the
    /// configured one, but never below [`HOLD_FLOOR_LOADS`] times the
    /// longer of their load times. A model's load time is its learned one;
    /// for a model not loaded yet, the longest learned load of any model
    /// (models on one machine load alike); before anything was learned,
    /// [`Rules::unlearned_load`]. Below a load time, three or more busy
    /// models thrash: each switch's load outlasts the bound of the next
    /// waiting model.
    pub fn effective_hold(
        &self,
        bound: Duration,
        load_times: &BTreeMap<String, Duration>,
        serving: &str,
        waiting: &str,
    ) -> Duration {
        let longest_learned = load_times.values().max().copied();
        let load = |model: &str| {
            load_times
                .get(model)
                .copied()
                .or(longest_learned)
                .unwrap_or(self.unlearned_load)
        };
        bound.max(load(serving).max(load(waiting)).mul_f64(HOLD_FLOOR_LOADS))
    }
}

/// The hold bound's floor, in load times of the models involved (see
/// [`Rules::effective_hold`]).
pub const HOLD_FLOOR_LOADS: f64 = 1.5;

/// Before any load was learned, a load counts as `startup_ms` divided by
/// this: a startup limit is set well above the loads it bounds (the default
/// 120 s for loads of about 12 s; Strata's own 900 s for loads up to about
/// 90 s). The scheduler itself never meets that case (the bound is only
/// weighed while a verified model serves, and every verified load is
/// learned); `check-config` states the floor with it, when nothing can be
/// learned yet.
pub const UNLEARNED_LOAD_SHARE: u32 = 10;

/// A ticket in the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub key: TicketKey,
    pub model: String,
    pub tier: ServiceTier,
    /// Supervisor-wide arrival order.
    pub arrival: u64,
    /// When it entered the queue (the hold bound counts from it).
    pub arrived_at: Instant,
    /// Legacy `queue_ms`: when the ticket fails if it has no lease yet.
    pub deadline: Option<Instant>,
    /// Admitted to the running load: out of the queue in every sense
    /// except that its grant waits for the load.
    pub admitted: bool,
}

/// What the backend is doing, as far as scheduling cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendView<'a> {
    /// Nothing runs.
    Empty,
    /// A verified backend serves `model`.
    Serving { model: &'a str },
    /// A load of `model` runs and has not been cancelled.
    Loading { model: &'a str },
    /// A stop, or a cancelled load winding down: wait for it.
    Busy,
}

/// What an operator operation needs from the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Nothing: schedule normally.
    None,
    /// An operator `on` or `off` waits for leases to end (and then loads or
    /// unloads itself): no admission, no load, no unload meanwhile.
    Everything,
}

/// The cache-order state the engine keeps (see [`CacheState`]).
#[derive(Debug, Clone, Copy)]
pub struct CacheView<'a> {
    /// Lookups can help now: enabled, and the serving backend did not
    /// answer a lookup with 404.
    pub usable: bool,
    /// Valid scores (rank per ticket) for the current queue, if any.
    pub ranks: Option<&'a HashMap<TicketKey, f64>>,
    /// A lookup runs until this instant.
    pub lookup_until: Option<Instant>,
    /// This admission round already tried a lookup.
    pub tried: bool,
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub now: Instant,
    pub rules: &'a Rules,
    pub backend: BackendView<'a>,
    /// Every ticket not yet granted, in arrival order.
    pub queue: &'a [Waiting],
    /// Granted leases (all on the serving model, or on the backend that
    /// just died).
    pub leases: usize,
    /// Legacy: a lease still waits for its response headers (it holds the
    /// engine lock).
    pub header_waits: usize,
    /// When the last lease ended (or a load or `on` finished): the start of
    /// the grace and idle clocks.
    pub quiet_since: Instant,
    /// When the serving backend became ready (the hold bound counts from
    /// it).
    pub ready_since: Instant,
    /// The running load was started by an operator `on`: it is never
    /// abandoned.
    pub load_pinned: bool,
    /// Each model's learned load time (the engine's typical load); a model
    /// not in it counts [`Rules::unlearned_load`].
    pub load_times: &'a BTreeMap<String, Duration>,
    /// Per model: no launch of it before this (its last start failed).
    pub cooldowns: &'a BTreeMap<String, Instant>,
    pub hold: Hold,
    pub cache: CacheView<'a>,
}

/// Why the plan fails a ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Legacy `queue_ms` passed before the ticket got its lease.
    QueueTimeout,
    /// It needs a launch and the start cooldown is running.
    Cooldown,
}

/// One thing the engine must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Lease the serving backend to this ticket now.
    Grant(TicketKey),
    /// The ticket leaves the queue for the running load (or the one
    /// [`Decision::StartLoad`] of the same plan starts); it is granted when
    /// the load is verified.
    Admit(TicketKey),
    /// Stop whatever runs and load `model`. `reason` says why the serving
    /// model gives way; `None` when nothing was loaded (a load, not a
    /// switch).
    StartLoad {
        model: String,
        reason: Option<SwitchReason>,
    },
    Fail(TicketKey, Failure),
    /// Idle unload ([`SwitchReason::Idle`]).
    Unload,
    /// Score these tickets (the competitors of one admission) against the
    /// serving backend's cache.
    StartLookup(Vec<TicketKey>),
    /// Stop the running load: nobody waits for it, and another model does
    /// ([`SwitchReason::Abandoned`]).
    CancelLoad,
}

impl Decision {
    /// Why this decision switches or unloads the model, if it does.
    pub fn switch_reason(&self) -> Option<SwitchReason> {
        match self {
            Decision::StartLoad { reason, .. } => *reason,
            Decision::Unload => Some(SwitchReason::Idle),
            Decision::CancelLoad => Some(SwitchReason::Abandoned),
            Decision::Grant(_)
            | Decision::Admit(_)
            | Decision::Fail(..)
            | Decision::StartLookup(_) => None,
        }
    }
}

/// Why the loaded (or loading) model gave way: the `reason` of a switch in
/// the supervisor's log, of `strata_router_model_switches_total` and of the
/// simulator's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SwitchReason {
    /// The serving model was quiet for `model_grace_ms` while another
    /// model waited.
    GraceExpired,
    /// `model_hold_max_ms` fell due for a waiting ticket of another model.
    BoundDue,
    /// The serving model had nothing left and no grace applies (legacy
    /// mode, or `model_grace_ms` 0): the switch followed its last response.
    QueueDrained,
    /// A priority ticket for another model skipped the grace.
    Priority,
    /// An operator `on` or `off` (decided by the engine, not here).
    Operator,
    /// Idle unload after `idle_ms` of quiet.
    Idle,
    /// A load nobody waited for any more was cancelled for another model.
    Abandoned,
}

impl SwitchReason {
    pub const ALL: [SwitchReason; 7] = [
        SwitchReason::GraceExpired,
        SwitchReason::BoundDue,
        SwitchReason::QueueDrained,
        SwitchReason::Priority,
        SwitchReason::Operator,
        SwitchReason::Idle,
        SwitchReason::Abandoned,
    ];

    /// The label value (`reason="grace_expired"`).
    pub fn as_str(self) -> &'static str {
        match self {
            SwitchReason::GraceExpired => "grace_expired",
            SwitchReason::BoundDue => "bound_due",
            SwitchReason::QueueDrained => "queue_drained",
            SwitchReason::Priority => "priority",
            SwitchReason::Operator => "operator",
            SwitchReason::Idle => "idle",
            SwitchReason::Abandoned => "abandoned",
        }
    }
}

/// The decisions due now, in order, and when something becomes due next
/// (a deadline, the end of the grace or idle period, a lookup's budget).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    pub wake_at: Option<Instant>,
}

impl Plan {
    fn wake(&mut self, at: Instant) {
        self.wake_at = Some(self.wake_at.map_or(at, |current| current.min(at)));
    }
}

/// Why the rules refuse a new ticket at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It needs a launch of its model, whose start cooldown runs until then.
    Cooldown { until: Instant },
    /// Legacy: `max_pending` tickets are already active or waiting (429).
    QueueFull,
}

/// Whether a new ticket for `model` is refused at once (`view.queue` does
/// not hold it yet). A ticket that can join the serving or loading model
/// needs no launch, so a cooldown does not refuse it; that is also the rule
/// [`decide`] applies when it would launch a waiting ticket's model.
pub fn refusal(view: &View, model: &str) -> Option<Refusal> {
    let joins = matches!(
        view.backend,
        BackendView::Serving { model: m } | BackendView::Loading { model: m } if m == model
    );
    if !joins && let Some(until) = cooldown_until(view, model) {
        return Some(Refusal::Cooldown { until });
    }
    let legacy_full =
        view.rules.mode == Mode::Legacy && view.queue.len() + view.leases >= view.rules.max_pending;
    legacy_full.then_some(Refusal::QueueFull)
}

/// When `model`'s start cooldown ends, if it still runs.
fn cooldown_until(view: &View, model: &str) -> Option<Instant> {
    view.cooldowns
        .get(model)
        .copied()
        .filter(|until| view.now < *until)
}

/// Makes every decision that is due in `view`.
pub fn decide(view: &View) -> Plan {
    let mut plan = Plan::default();
    let mut failed = HashSet::new();
    for ticket in view.queue.iter().filter(|ticket| !ticket.admitted) {
        match ticket.deadline {
            Some(deadline) if deadline <= view.now => {
                plan.decisions
                    .push(Decision::Fail(ticket.key, Failure::QueueTimeout));
                failed.insert(ticket.key);
            }
            Some(deadline) => plan.wake(deadline),
            None => {}
        }
    }
    if view.hold == Hold::Everything || view.backend == BackendView::Busy {
        return plan;
    }
    let waiting: Vec<&Waiting> = view
        .queue
        .iter()
        .filter(|ticket| !ticket.admitted && !failed.contains(&ticket.key))
        .collect();
    let admitted = view.queue.iter().filter(|ticket| ticket.admitted).count();
    match waiting.iter().map(|ticket| ticket.tier).min() {
        None => idle_unload(view, admitted, &mut plan),
        Some(top) => match view.rules.mode {
            Mode::WaitFirst => wait_first(view, &waiting, top, admitted, &mut plan),
            Mode::Legacy => legacy(view, &waiting, top, admitted, &mut plan),
        },
    }
    plan
}

/// The model the plan shows going next without starting it yet: the best
/// waiting tier's earliest ticket for a model other than the serving one,
/// while its switch waits (for the serving model's leases, its grace, a
/// cache lookup, the run of tickets ahead of it). What the weights prefetch
/// reads meanwhile. `None` when the plan starts a load now, while a load or
/// stop runs, when nothing serves (a load would start at once), when no
/// such ticket waits, or when that model's launch is cooling down (it would
/// fail, not load).
pub fn next_switch<'a>(view: &View<'a>, plan: &Plan) -> Option<&'a str> {
    if plan
        .decisions
        .iter()
        .any(|decision| matches!(decision, Decision::StartLoad { .. }))
    {
        return None;
    }
    let BackendView::Serving { model: serving } = view.backend else {
        return None;
    };
    let failed: HashSet<TicketKey> = plan
        .decisions
        .iter()
        .filter_map(|decision| match decision {
            Decision::Fail(key, _) => Some(*key),
            _ => None,
        })
        .collect();
    let waiting = || {
        view.queue
            .iter()
            .filter(|ticket| !ticket.admitted && !failed.contains(&ticket.key))
    };
    let top = waiting().map(|ticket| ticket.tier).min()?;
    let next = waiting().find(|ticket| ticket.tier == top && ticket.model != serving)?;
    if cooldown_until(view, &next.model).is_some() {
        return None;
    }
    Some(next.model.as_str())
}

/// Dispatch slots still free when `used` requests are dispatched or about
/// to be (admitted to a load).
fn free_slots(rules: &Rules, used: usize, dispatch_limit: Option<usize>) -> usize {
    let mut free = usize::MAX;
    for limit in [dispatch_limit, rules.cache_max_active]
        .into_iter()
        .flatten()
    {
        free = free.min(limit.saturating_sub(used));
    }
    free
}

fn idle_unload(view: &View, admitted: usize, plan: &mut Plan) {
    if !matches!(view.backend, BackendView::Serving { .. }) || view.leases > 0 || admitted > 0 {
        return;
    }
    // Idle unloading also waits for the grace interval (wait-first only:
    // legacy mode has no grace).
    let grace = match view.rules.mode {
        Mode::WaitFirst => view.rules.grace,
        Mode::Legacy => Duration::ZERO,
    };
    let quiet_for = view.rules.idle.max(grace);
    let due = view.quiet_since + quiet_for;
    if view.now >= due {
        plan.decisions.push(Decision::Unload);
    } else {
        plan.wake(due);
    }
}

/// How to admit `candidates` (the competitors of one admission, in arrival
/// order) into `free` slots.
enum Order<'a> {
    /// Admit in this order.
    Ready(Vec<&'a Waiting>),
    /// Scores are being fetched: admit none of them yet.
    Wait,
    /// Fetch scores first.
    Lookup(Vec<TicketKey>),
}

fn order<'a>(view: &View, mut candidates: Vec<&'a Waiting>, free: usize) -> Order<'a> {
    let cache = &view.cache;
    // Only a serving backend can be asked.
    let serving = matches!(view.backend, BackendView::Serving { .. });
    if !cache.usable || !serving || free == 0 || candidates.len() <= free.max(1) {
        return Order::Ready(candidates);
    }
    if let Some(ranks) = cache.ranks {
        let rank = |ticket: &Waiting| ranks.get(&ticket.key).copied().unwrap_or(0.0);
        // Stable: equal ranks keep arrival order.
        candidates.sort_by(|a, b| rank(b).total_cmp(&rank(a)));
        return Order::Ready(candidates);
    }
    if cache.lookup_until.is_some() {
        return Order::Wait;
    }
    if !cache.tried {
        return Order::Lookup(candidates.iter().map(|ticket| ticket.key).collect());
    }
    Order::Ready(candidates)
}

/// Wait-first: see the module docs.
fn wait_first(
    view: &View,
    waiting: &[&Waiting],
    top: ServiceTier,
    admitted: usize,
    plan: &mut Plan,
) {
    let rules = view.rules;
    let mut used = view.leases + admitted;
    let (model, grant) = match view.backend {
        BackendView::Serving { model } => (Some(model), true),
        BackendView::Loading { model } => (Some(model), false),
        BackendView::Empty | BackendView::Busy => (None, false),
    };
    // The best tier's earliest ticket for another model (or for any model
    // when nothing runs): what a switch would serve.
    let first_other = waiting
        .iter()
        .find(|ticket| ticket.tier == top && Some(ticket.model.as_str()) != model);
    if let BackendView::Loading { model } = view.backend
        && first_other.is_some()
        && !view.load_pinned
        && admitted == 0
        && !waiting.iter().any(|ticket| ticket.model == model)
    {
        // Every client of this load has gone, and another model waits.
        plan.decisions.push(Decision::CancelLoad);
        return;
    }
    // The ticket the hold bound fell due for, if it did.
    let due_for = match (view.backend, first_other, rules.hold_max) {
        (BackendView::Serving { model }, Some(first), Some(bound)) => {
            let bound = rules.effective_hold(bound, view.load_times, model, &first.model);
            let until = first.arrived_at.max(view.ready_since) + bound;
            if view.now < until {
                plan.wake(until);
            }
            (view.now >= until).then_some(*first)
        }
        _ => None,
    };
    let held_too_long = due_for.is_some();
    // Admission for the model that serves or loads, best tier first; a tier
    // with tickets left (for this model or another) holds back the rest.
    // Past the hold bound ("fair hold") the serving model is granted only
    // its tickets of that ticket's tier that arrived before it, then gives
    // way.
    let mut left_at_top = false;
    if let Some(model) = model {
        for tier in ServiceTier::ALL.into_iter().filter(|tier| *tier >= top) {
            let at_tier: Vec<&Waiting> = waiting
                .iter()
                .copied()
                .filter(|ticket| ticket.tier == tier)
                .collect();
            if at_tier.is_empty() {
                continue;
            }
            let candidates: Vec<&Waiting> = at_tier
                .iter()
                .copied()
                .filter(|ticket| ticket.model == model)
                .filter(|ticket| {
                    due_for
                        .is_none_or(|due| ticket.tier == due.tier && ticket.arrival < due.arrival)
                })
                .collect();
            let free = free_slots(rules, used, Some(rules.max_pending));
            let chosen = match order(view, candidates.clone(), free) {
                Order::Ready(ordered) => ordered,
                Order::Wait => {
                    if let Some(until) = view.cache.lookup_until {
                        plan.wake(until);
                    }
                    Vec::new()
                }
                Order::Lookup(keys) => {
                    plan.decisions.push(Decision::StartLookup(keys));
                    Vec::new()
                }
            };
            let take = chosen.len().min(free);
            for ticket in &chosen[..take] {
                plan.decisions.push(if grant {
                    Decision::Grant(ticket.key)
                } else {
                    Decision::Admit(ticket.key)
                });
            }
            used += take;
            if tier == top {
                left_at_top = take < candidates.len();
            }
            if take < at_tier.len() {
                break;
            }
        }
    }
    // A switch: the best tier's earliest ticket is for another model (or
    // nothing runs), every lease has ended, and the model has been quiet
    // for the grace period (priority and a held-too-long ticket do not wait
    // for it).
    let Some(first) = first_other else {
        return;
    };
    // The running model is not quiet while it has work, waiting included
    // (past the bound, the work that arrived before the due ticket: a
    // cache lookup or a full slot may defer its grants).
    if matches!(view.backend, BackendView::Loading { .. }) || used > 0 || left_at_top {
        return;
    }
    let mut reason = None;
    if let BackendView::Serving { .. } = view.backend {
        let quiet_until = view.quiet_since + rules.grace;
        let in_grace = view.now < quiet_until;
        reason = Some(if held_too_long {
            SwitchReason::BoundDue
        } else if in_grace && top == ServiceTier::Priority {
            SwitchReason::Priority
        } else if in_grace {
            plan.wake(quiet_until);
            return;
        } else if rules.grace.is_zero() {
            SwitchReason::QueueDrained
        } else {
            SwitchReason::GraceExpired
        });
    }
    if cooling_down(view, &first.model, plan) {
        // Its tickets fail now; the next round looks at the others.
        fail_launches(waiting, &first.model, plan);
        return;
    }
    plan.decisions.push(Decision::StartLoad {
        model: first.model.clone(),
        reason,
    });
    let group: Vec<&Waiting> = waiting
        .iter()
        .copied()
        .filter(|ticket| ticket.tier == top && ticket.model == first.model)
        .collect();
    let free = free_slots(rules, 0, Some(rules.max_pending));
    for ticket in group.into_iter().take(free) {
        plan.decisions.push(Decision::Admit(ticket.key));
    }
}

/// Whether a launch of `model` is refused now; wakes the plan when its
/// cooldown ends.
fn cooling_down(view: &View, model: &str, plan: &mut Plan) -> bool {
    match cooldown_until(view, model) {
        Some(until) => {
            plan.wake(until);
            true
        }
        None => false,
    }
}

/// Fails every waiting ticket for `model`, whose launch is cooling down
/// (tickets for other models stay: they may load meanwhile).
fn fail_launches(waiting: &[&Waiting], model: &str, plan: &mut Plan) {
    for ticket in waiting {
        if ticket.model == model {
            plan.decisions
                .push(Decision::Fail(ticket.key, Failure::Cooldown));
        }
    }
}

/// Legacy: see the module docs.
fn legacy(view: &View, waiting: &[&Waiting], top: ServiceTier, admitted: usize, plan: &mut Plan) {
    // The lock: a ticket admitted to a load, or a lease before its headers.
    if admitted > 0 || view.header_waits > 0 {
        return;
    }
    let at_top: Vec<&Waiting> = waiting
        .iter()
        .copied()
        .filter(|ticket| ticket.tier == top)
        .collect();
    let head = at_top[0];
    match view.backend {
        BackendView::Serving { model } if head.model == model => {
            // The run of tickets for the loaded model at the head may be
            // reordered by cache matches; a ticket for another model further
            // back keeps its place.
            let run: Vec<&Waiting> = at_top
                .iter()
                .copied()
                .take_while(|ticket| ticket.model == model)
                .collect();
            let free = free_slots(view.rules, view.leases, None).min(1);
            match order(view, run, free) {
                Order::Ready(ordered) if free > 0 => {
                    plan.decisions.push(Decision::Grant(ordered[0].key));
                }
                Order::Ready(_) => {}
                Order::Wait => {
                    if let Some(until) = view.cache.lookup_until {
                        plan.wake(until);
                    }
                }
                Order::Lookup(keys) => plan.decisions.push(Decision::StartLookup(keys)),
            }
        }
        // No grace in legacy mode: the original contract switches as soon
        // as every response has finished.
        BackendView::Serving { .. } | BackendView::Empty => {
            if view.leases > 0 {
                return;
            }
            if cooling_down(view, &head.model, plan) {
                fail_launches(waiting, &head.model, plan);
                return;
            }
            let reason = matches!(view.backend, BackendView::Serving { .. })
                .then_some(SwitchReason::QueueDrained);
            plan.decisions.push(Decision::StartLoad {
                model: head.model.clone(),
                reason,
            });
            plan.decisions.push(Decision::Admit(head.key));
        }
        // An operator load of the head's model: the head takes the lock
        // and waits for that load, as if it had started it.
        BackendView::Loading { model } if head.model == model => {
            plan.decisions.push(Decision::Admit(head.key));
        }
        BackendView::Loading { .. } | BackendView::Busy => {}
    }
}

/// The cache-order state: scores, the lookup in flight, and whether this
/// admission round already tried one. Scores are discarded whenever a
/// ticket enters or leaves the queue and whenever a generation ends
/// ([`CacheState::invalidate`]); a lookup that was running then is
/// discarded when it answers, and the round falls back to arrival order.
#[derive(Debug, Default)]
pub struct CacheState {
    pub ranks: Option<HashMap<TicketKey, f64>>,
    pub lookup: Option<Lookup>,
    pub tried: bool,
}

/// A lookup in flight.
#[derive(Debug)]
pub struct Lookup {
    pub id: u64,
    pub until: Instant,
    /// Proxies that have not answered yet.
    pub pending: HashSet<ConnId>,
    /// Ranks gathered so far.
    pub ranks: HashMap<TicketKey, f64>,
    /// The queue changed (or a generation ended) meanwhile.
    pub stale: bool,
}

impl CacheState {
    /// A ticket entered or left the queue, or a generation ended.
    pub fn invalidate(&mut self) {
        self.ranks = None;
        match &mut self.lookup {
            Some(lookup) => lookup.stale = true,
            None => self.tried = false,
        }
    }

    /// Starts a lookup of one round.
    pub fn start(&mut self, id: u64, until: Instant, pending: HashSet<ConnId>) {
        self.ranks = None;
        self.tried = true;
        self.lookup = Some(Lookup {
            id,
            until,
            pending,
            ranks: HashMap::new(),
            stale: false,
        });
    }

    /// One proxy answered lookup `id` with `ranks` (`None`: it failed).
    /// When every proxy has answered, valid ranks become the scores.
    pub fn answer(&mut self, id: u64, conn: ConnId, ranks: Option<HashMap<TicketKey, f64>>) {
        let Some(lookup) = &mut self.lookup else {
            return;
        };
        if lookup.id != id || !lookup.pending.remove(&conn) {
            return;
        }
        match ranks {
            Some(ranks) => lookup.ranks.extend(ranks),
            None => {
                // One failed part fails the lookup: arrival order this round.
                self.lookup = None;
                return;
            }
        }
        if lookup.pending.is_empty() {
            let lookup = self.lookup.take().expect("checked above");
            if !lookup.stale {
                self.ranks = Some(lookup.ranks);
            }
        }
    }

    /// Ends a lookup whose budget ran out.
    pub fn expire(&mut self, now: Instant) {
        if self
            .lookup
            .as_ref()
            .is_some_and(|lookup| now >= lookup.until)
        {
            self.lookup = None;
        }
    }

    /// The view [`decide`] reads.
    pub fn view(&self, usable: bool) -> CacheView<'_> {
        CacheView {
            usable,
            ranks: self.ranks.as_ref(),
            lookup_until: self.lookup.as_ref().map(|lookup| lookup.until),
            tried: self.tried,
        }
    }
}

/// A ticket's cache rank: its cached/input fraction when its input reaches
/// the backend's threshold, else 0 (no advantage).
pub fn rank(input_tokens: u64, cached_tokens: u64, min_tokens: u64) -> f64 {
    if input_tokens == 0 || input_tokens < min_tokens {
        return 0.0;
    }
    cached_tokens.min(input_tokens) as f64 / input_tokens as f64
}

#[cfg(test)]
mod tests;
