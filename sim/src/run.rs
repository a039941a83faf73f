//! The simulator's event loop: a virtual clock, the one backend, the queue
//! and the leases, with a decision function consulted after every event,
//! as the engine consults [`decide`] after every command. Each decision is
//! carried out through the engine's own [`apply`], on the simulator's books
//! (its [`Book`] impl at the end of this file), so which tickets a decision
//! takes, admits or skips is written once.
//!
//! What it models, and how the engine does the same:
//! - A request arrives (for an agent: its previous request's end plus the
//!   step's gap) and is refused at once by [`refusal`] (a cooling model,
//!   legacy `max_pending`), or enters the queue with its legacy `queue_ms`
//!   deadline.
//! - A grant starts its generation, which ends `service` later; in legacy
//!   mode its headers arrive `header_delay` after the grant (capped by the
//!   generation), releasing the engine lock.
//! - A load takes the model's load time (cold, or shorter by what the
//!   router's weights prefetch read ahead: [`PageCache`]), fails with the
//!   model's `fail_rate` (the model then cools down for `cooldown_ms`, and
//!   the requests admitted to it fail), or serves: the tickets admitted to
//!   it are granted and the grace and idle clocks restart.
//! - A client gives up at its patience: a waiting request leaves the queue
//!   (a load it joined goes on), a generating one ends early.
//! - A lease ending restarts the quiet clock when it was the last; grace and
//!   idle unload follow from the decision function's wake-ups. An unload
//!   takes no time (its cost is the next load).
//! - A cache lookup is answered at once with each request's `cache_rank`.
//! - A cancelled load (abandoned: nobody waits for it) stops at once; the
//!   real one stops at its next readiness poll.
//!
//! No sleeps, sockets or threads: time jumps from one event to the next.
//!
//! The decision function is shown the part of the queue its decision
//! depends on ([`Queue`]), so an event costs time independent of the
//! queue's length and a run is near-linear in its requests.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use strata_protocol::config::Config;
use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;
use tokio::time::Instant;

use crate::baselines;
use crate::forecast::{self, ForecastCount, ReadNext};
use crate::prefetch::{DEFAULT_READ_MB_PER_S, MB, PageCache, ReadAhead};
use crate::queue::Queue;
use crate::rng::Rng;
use crate::timeline::{LoadOutcome, LoadSpan, RequestSpan, Timeline, Unload};
use crate::workload::Workload;
use strata_scheduler::prediction::Prediction;
use strata_scheduler::{
    BackendView, Book, CacheState, ConnId, Failure, Hold, LoadTimes, Mode, Plan, Refusal, Rules,
    SwitchReason, TicketKey, View, Waiting, apply, decide, next_switch, refusal,
};

/// The decision functions a simulation can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// Strict arrival order; loads cold.
    Fifo,
    /// The loaded model's requests first; loads cold.
    Collate,
    /// The router's own [`decide`] with the given rules, and its weights
    /// prefetch ([`Settings::read_ahead`]).
    Router,
    /// A bound, not a policy: every model stays resident after its first
    /// load (as if the GPU held them all), so each is loaded once, at its
    /// first request, and a request waits only for that load and for a
    /// dispatch slot (the router's limits, over all models at once). No
    /// one-model policy can need fewer loads. That load is warm (as if its
    /// weights had been read ahead), so no policy's load is shorter.
    Ideal,
}

impl Policy {
    pub const ALL: [Policy; 4] = [Policy::Fifo, Policy::Collate, Policy::Router, Policy::Ideal];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Collate => "collate",
            Policy::Router => "router",
            Policy::Ideal => "ideal",
        }
    }

    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|policy| policy.name() == name)
    }
}

/// The rules and timers a simulation runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub rules: Rules,
    /// Legacy `queue_ms`.
    pub queue_timeout: Option<Duration>,
    pub cooldown: Duration,
    /// Legacy: from a grant to the upstream response headers.
    pub header_delay: Duration,
    /// The router's weights prefetch (`None`: its loads are cold too).
    pub read_ahead: Option<ReadAhead>,
}

impl Settings {
    /// The settings the supervisor would run with under `config`.
    pub fn from_config(config: &Config) -> Settings {
        Settings {
            rules: Rules::from_config(config),
            queue_timeout: config.queue_timeout(),
            cooldown: Duration::from_millis(config.timers.cooldown_ms),
            header_delay: Duration::from_millis(50),
            read_ahead: config.prefetch.enabled.then_some(ReadAhead {
                bytes_per_s: DEFAULT_READ_MB_PER_S * MB,
                max_bytes: config.prefetch.max_bytes,
                predict: config.prefetch.predict,
            }),
        }
    }
}

/// Runs `workload` under `policy`.
pub fn simulate(workload: &Workload, settings: &Settings, policy: Policy) -> Timeline {
    let mut sim = Sim::new(workload, settings, policy);
    sim.run();
    sim.timeline()
}

/// [`simulate`], showing the decision function every ticket when
/// `show_all`; and the most tickets it was shown at once.
#[cfg(test)]
pub(super) fn simulate_counting(
    workload: &Workload,
    settings: &Settings,
    policy: Policy,
    show_all: bool,
) -> (Timeline, usize) {
    let mut sim = Sim::new(workload, settings, policy);
    if show_all {
        sim.queue = Queue::new(usize::MAX, false);
    }
    sim.run();
    let largest = sim.largest_view;
    (sim.timeline(), largest)
}

/// The simulator's only proxy connection.
const CONN: ConnId = 1;

/// Where instants past the clock's range are put (a thousand years on).
const FAR: Duration = Duration::from_secs(1000 * 365 * 86_400);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    Headers(usize),
    GenerationEnd(usize),
    Patience(usize),
    LoadDone(u64),
    AgentNext(usize),
}

#[derive(Debug)]
struct Req {
    model: String,
    tier: ServiceTier,
    arrival: Duration,
    service: Duration,
    patience: Option<Duration>,
    cache_rank: f64,
    /// The agent and its step, for a closed-loop request.
    agent: Option<(usize, usize)>,
    admitted: Option<Duration>,
    granted: Option<Duration>,
    ended: Option<(Duration, Reason)>,
    load: Option<u64>,
}

#[derive(Debug)]
enum Backend {
    Empty,
    Serving {
        model: String,
    },
    Loading {
        model: String,
        seq: u64,
        fails: bool,
        cancelled: bool,
        /// Its entry in the timeline.
        span: usize,
    },
}

struct Lease {
    header_wait: bool,
}

struct Sim<'a> {
    workload: &'a Workload,
    settings: &'a Settings,
    policy: Policy,
    base: Instant,
    now: Duration,
    events: BinaryHeap<Reverse<(Duration, u64, Event)>>,
    order: u64,
    /// The open-loop requests by arrival (then index): they arrive from
    /// here, not the heap, in the order the heap would give them (their
    /// orders are 1..=N, as if pushed before any other event).
    arrival_order: Vec<usize>,
    next_arrival: usize,
    reqs: Vec<Req>,
    queue: Queue,
    arrivals: u64,
    leases: HashMap<usize, Lease>,
    backend: Backend,
    load_seq: u64,
    quiet_since: Duration,
    /// When the serving model became ready.
    ready_since: Duration,
    cooldowns: BTreeMap<String, Instant>,
    cache: CacheState,
    lookups: u64,
    loads: Vec<LoadSpan>,
    unloads: Vec<Unload>,
    /// Learned load times, as the engine learns them (the hold floor).
    load_times: LoadTimes,
    rng: Rng,
    wake: Option<Duration>,
    /// Requests created and not ended yet.
    open: usize,
    /// Per agent: the requests it has sent so far.
    agent_steps: Vec<usize>,
    /// Ideal: models loaded and those loading (with their timeline entry).
    resident: BTreeSet<String>,
    ideal_loading: BTreeMap<u64, (String, usize)>,
    /// What the router's prefetch read ahead (nothing for the others).
    page_cache: PageCache,
    /// `prefetch_predict` (the router's runs with it on): the engine's
    /// step, and how its forecasts fared.
    prediction: Option<Prediction>,
    forecasts: ForecastCount,
    /// The most tickets a decision function was shown at once.
    #[cfg(test)]
    largest_view: usize,
}

/// How many tickets of each (tier, model) group the queue shows the
/// decision function (see [`Queue`]): every one where a rule reads them all.
fn shown_per_group(settings: &Settings, policy: Policy) -> usize {
    let legacy = settings.rules.mode == Mode::Legacy;
    // Past the hold bound the router ranks by cache only the loaded model's
    // tickets that arrived before the due one, which need not be among a
    // group's best-ranked few.
    let fair_hold_by_rank = settings.rules.hold_max.is_some() && settings.rules.cache_lookup;
    let everything = match policy {
        Policy::Router => legacy || settings.queue_timeout.is_some() || fair_hold_by_rank,
        Policy::Fifo | Policy::Collate => legacy,
        Policy::Ideal => false,
    };
    if everything {
        usize::MAX
    } else {
        baselines::dispatch_limit(&settings.rules) + 1
    }
}

impl<'a> Sim<'a> {
    fn new(workload: &'a Workload, settings: &'a Settings, policy: Policy) -> Sim<'a> {
        Sim {
            workload,
            settings,
            policy,
            base: Instant::now(),
            now: Duration::ZERO,
            events: BinaryHeap::new(),
            order: 0,
            arrival_order: Vec::new(),
            next_arrival: 0,
            reqs: Vec::with_capacity(workload.request_count()),
            queue: Queue::new(
                shown_per_group(settings, policy),
                policy == Policy::Router && settings.rules.cache_lookup,
            ),
            arrivals: 0,
            leases: HashMap::new(),
            backend: Backend::Empty,
            load_seq: 0,
            quiet_since: Duration::ZERO,
            ready_since: Duration::ZERO,
            cooldowns: BTreeMap::new(),
            cache: CacheState::default(),
            lookups: 0,
            loads: Vec::new(),
            unloads: Vec::new(),
            load_times: LoadTimes::default(),
            rng: Rng::new(workload.seed ^ 0x5EED_1A0D),
            wake: None,
            open: 0,
            agent_steps: vec![0; workload.agents.len()],
            resident: BTreeSet::new(),
            ideal_loading: BTreeMap::new(),
            prediction: (policy == Policy::Router
                && settings
                    .read_ahead
                    .is_some_and(|read_ahead| read_ahead.predict))
            .then(|| Prediction::new(workload.models.keys().cloned().collect())),
            forecasts: ForecastCount::default(),
            page_cache: PageCache::new(match policy {
                Policy::Router => settings.read_ahead,
                Policy::Fifo | Policy::Collate | Policy::Ideal => None,
            }),
            #[cfg(test)]
            largest_view: 0,
        }
    }

    fn at(&self, offset: Duration) -> Instant {
        // Validated workloads stay centuries inside the clock's range.
        self.base
            .checked_add(offset)
            .unwrap_or_else(|| self.base + FAR)
    }

    /// Schedules `event` at `when`. Callers add durations saturating:
    /// validated workloads stay far below the largest duration, the
    /// saturation is for any other.
    fn push(&mut self, when: Duration, event: Event) {
        self.order += 1;
        self.events.push(Reverse((when, self.order, event)));
    }

    /// The next event's time and order.
    fn next_event(&self) -> Option<(Duration, u64)> {
        let queued = self
            .events
            .peek()
            .map(|Reverse((at, order, _))| (*at, *order));
        let arrival = self.next_open_arrival();
        match (queued, arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn next_open_arrival(&self) -> Option<(Duration, u64)> {
        let i = *self.arrival_order.get(self.next_arrival)?;
        Some((self.workload.requests[i].at, i as u64 + 1))
    }

    /// Takes the next event if it is due now.
    fn pop_due(&mut self) -> Option<Event> {
        let next = self.next_event().filter(|(at, _)| *at <= self.now)?;
        if self.next_open_arrival() == Some(next) {
            self.next_arrival += 1;
            return Some(Event::Arrive(self.arrival_order[self.next_arrival - 1]));
        }
        self.events.pop().map(|Reverse((_, _, event))| event)
    }

    fn run(&mut self) {
        let requests = &self.workload.requests;
        self.arrival_order = (0..requests.len()).collect();
        self.arrival_order.sort_by_key(|i| requests[*i].at);
        self.order = requests.len() as u64;
        for request in &self.workload.requests {
            self.open += 1;
            self.reqs.push(Req {
                model: request.model.clone(),
                tier: request.tier,
                arrival: request.at,
                service: request.service,
                patience: request.patience,
                cache_rank: request.cache_rank.unwrap_or(0.0),
                agent: None,
                admitted: None,
                granted: None,
                ended: None,
                load: None,
            });
        }
        for (a, agent) in self.workload.agents.iter().enumerate() {
            let index = self.agent_request(a, 0, agent.start);
            self.push(agent.start, Event::Arrive(index));
        }
        loop {
            let next_event = self.next_event().map(|(at, _)| at);
            let next = match (next_event, self.wake) {
                (Some(event), Some(wake)) => event.min(wake),
                (Some(at), None) | (None, Some(at)) => at,
                (None, None) => break,
            };
            self.now = next;
            if self.wake.is_some_and(|wake| wake <= self.now) {
                self.wake = None;
                self.decide();
            }
            while let Some(event) = self.pop_due() {
                self.handle(event);
                self.decide();
            }
            if self.open == 0 && self.next_event().is_none() {
                // Only idle unloads and the like are left.
                break;
            }
        }
    }

    fn agent_request(&mut self, agent: usize, step: usize, at: Duration) -> usize {
        let spec = &self.workload.agents[agent];
        let s = &spec.steps[step];
        self.open += 1;
        self.agent_steps[agent] += 1;
        self.reqs.push(Req {
            model: spec.model.clone(),
            tier: spec.tier,
            arrival: at,
            service: s.service,
            patience: s.patience,
            cache_rank: s.cache_rank.unwrap_or(0.0),
            agent: Some((agent, step)),
            admitted: None,
            granted: None,
            ended: None,
            load: None,
        });
        self.reqs.len() - 1
    }

    // ---- events -----------------------------------------------------------

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrive(i) => self.arrive(i),
            Event::Headers(i) => {
                if let Some(lease) = self.leases.get_mut(&i) {
                    lease.header_wait = false;
                }
            }
            Event::GenerationEnd(i) => {
                if self.reqs[i].ended.is_none() && self.end_lease(i) {
                    self.end(i, Reason::Completed);
                }
            }
            Event::Patience(i) => {
                if self.reqs[i].ended.is_some() {
                    return;
                }
                if self.take_ticket(i).is_some() || self.end_lease(i) {
                    self.end(i, Reason::ClientDisconnect);
                }
            }
            Event::LoadDone(seq) => self.load_done(seq),
            Event::AgentNext(agent) => {
                let step = self.agent_steps[agent];
                let index = self.agent_request(agent, step, self.now);
                self.arrive(index);
            }
        }
    }

    fn arrive(&mut self, i: usize) {
        let model = self.reqs[i].model.clone();
        let at = self.at(self.now);
        if let Some(prediction) = &mut self.prediction {
            // As the engine: every request it numbers counts, refused too.
            prediction.arrive(&model, at);
        }
        if self.policy != Policy::Ideal {
            match refusal(&self.view(), &model) {
                Some(Refusal::Cooldown { .. }) => return self.end(i, Reason::ModelLoadError),
                Some(Refusal::QueueFull) => return self.end(i, Reason::QueueFull),
                None => {}
            }
        }
        self.arrivals += 1;
        let deadline = self
            .settings
            .queue_timeout
            .map(|limit| self.at(self.now.saturating_add(limit)));
        let ticket = Waiting {
            key: (CONN, i as u64),
            model,
            tier: self.reqs[i].tier,
            arrival: self.arrivals,
            arrived_at: self.at(self.now),
            deadline,
            admitted: false,
        };
        self.queue.push(ticket, self.reqs[i].cache_rank);
        self.cache.invalidate();
        if let Some(patience) = self.reqs[i].patience {
            self.push(self.now.saturating_add(patience), Event::Patience(i));
        }
    }

    /// The request ended; its agent, if any, sends the next one after the
    /// gap.
    fn end(&mut self, i: usize, reason: Reason) {
        self.reqs[i].ended = Some((self.now, reason));
        self.open -= 1;
        if let Some((agent, step)) = self.reqs[i].agent
            && let Some(next) = self.workload.agents[agent].steps.get(step + 1)
        {
            self.push(self.now.saturating_add(next.gap), Event::AgentNext(agent));
        }
    }

    fn take_ticket(&mut self, i: usize) -> Option<Waiting> {
        let ticket = self.queue.remove(i)?;
        self.cache.invalidate();
        Some(ticket)
    }

    /// Ends request `i`'s lease; true if it had one.
    fn end_lease(&mut self, i: usize) -> bool {
        if self.leases.remove(&i).is_none() {
            return false;
        }
        if self.leases.is_empty() {
            self.quiet_since = self.now;
        }
        self.cache.invalidate();
        true
    }

    fn load_done(&mut self, seq: u64) {
        if let Some((model, span)) = self.ideal_loading.remove(&seq) {
            self.loads[span].outcome = LoadOutcome::Verified { wasted: false };
            self.resident.insert(model);
            return;
        }
        let Backend::Loading {
            seq: running,
            fails,
            cancelled,
            span,
            ..
        } = self.backend
        else {
            return;
        };
        if running != seq {
            return;
        }
        let Backend::Loading { model, .. } = std::mem::replace(&mut self.backend, Backend::Empty)
        else {
            unreachable!()
        };
        // Admitted tickets are always shown.
        let admitted: Vec<usize> = self
            .queue
            .shown()
            .iter()
            .filter(|t| t.admitted && self.reqs[t.key.1 as usize].load == Some(seq))
            .map(|t| t.key.1 as usize)
            .collect();
        if cancelled {
            self.loads[span].outcome = LoadOutcome::Abandoned;
            for i in admitted {
                self.queue.unadmit(i);
                self.reqs[i].load = None;
            }
            return;
        }
        if fails {
            self.loads[span].outcome = LoadOutcome::Failed;
            let until = self.at(self.now.saturating_add(self.settings.cooldown));
            self.cooldowns.insert(model, until);
            for i in admitted {
                self.take_ticket(i);
                self.end(i, Reason::ModelLoadError);
            }
            return;
        }
        let wanted = !admitted.is_empty() || self.queue.holds_model(&model);
        self.loads[span].outcome = LoadOutcome::Verified { wasted: !wanted };
        let took = self.loads[span].duration();
        self.load_times.learn(&model, took.as_millis() as u64);
        self.cooldowns.remove(&model);
        self.backend = Backend::Serving { model };
        self.quiet_since = self.now;
        self.ready_since = self.now;
        for i in admitted {
            self.take_ticket(i);
            self.start_generation(i);
        }
    }

    // ---- decisions --------------------------------------------------------

    fn backend_view(&self) -> BackendView<'_> {
        match &self.backend {
            Backend::Empty => BackendView::Empty,
            Backend::Serving { model } => BackendView::Serving { model },
            Backend::Loading {
                model,
                cancelled: false,
                ..
            } => BackendView::Loading { model },
            Backend::Loading { .. } => BackendView::Busy,
        }
    }

    fn view(&self) -> View<'_> {
        let serving = matches!(self.backend, Backend::Serving { .. });
        View {
            now: self.at(self.now),
            rules: &self.settings.rules,
            backend: self.backend_view(),
            queue: self.queue.shown(),
            leases: self.leases.len(),
            header_waits: self.leases.values().filter(|l| l.header_wait).count(),
            quiet_since: self.at(self.quiet_since),
            ready_since: self.at(self.ready_since),
            load_pinned: false,
            load_times: self.load_times.typical(),
            cooldowns: &self.cooldowns,
            hold: Hold::None,
            cache: self.cache.view(self.settings.rules.cache_lookup && serving),
        }
    }

    fn decide(&mut self) {
        if self.policy == Policy::Ideal {
            return self.ideal_round();
        }
        // As the engine: a few rounds, since applying a plan can make
        // another decision due.
        for _ in 0..4 {
            #[cfg(test)]
            self.count_view();
            // Out of `self` while the view borrows it.
            let mut prediction = self.prediction.take();
            let (plan, read_next): (Plan, Option<ReadNext>) = {
                let view = self.view();
                match self.policy {
                    Policy::Fifo => (baselines::fifo(&view), None),
                    Policy::Collate => (baselines::collate(&view), None),
                    Policy::Router | Policy::Ideal => {
                        let plan = decide(&view);
                        // As the engine tells its prefetch after every
                        // decision: the plan's next model, else the
                        // prediction's.
                        let next = self.page_cache.reads_ahead().then(|| {
                            match (next_switch(&view, &plan), prediction.as_mut()) {
                                (Some(model), _) => ReadNext::Named(model.to_owned()),
                                (None, None) => ReadNext::Nothing,
                                (None, Some(prediction)) => {
                                    let facts = forecast::facts(&view, &plan);
                                    let model = prediction.next(&facts, view.now).ok();
                                    ReadNext::Predicted(model.map(str::to_owned))
                                }
                            }
                        });
                        (plan, next)
                    }
                }
            };
            self.prediction = prediction;
            if let Some(next) = read_next {
                let target = match next {
                    ReadNext::Named(model) => Some(model),
                    ReadNext::Predicted(model) => {
                        if let Some(model) = &model {
                            self.forecasts.predicted(model);
                        }
                        model
                    }
                    ReadNext::Nothing => None,
                };
                // A change only: most decisions make none.
                if target.as_deref() != self.page_cache.reading() {
                    self.page_cache
                        .want(target.as_deref(), self.now, self.workload);
                }
            }
            self.wake = plan
                .wake_at
                .map(|at| at.saturating_duration_since(self.base))
                .filter(|at| *at > self.now);
            if plan.decisions.is_empty() {
                break;
            }
            for decision in plan.decisions {
                apply(self, decision);
            }
        }
    }

    #[cfg(test)]
    fn count_view(&mut self) {
        self.largest_view = self.largest_view.max(self.queue.shown().len());
    }

    /// Request `i` (out of the queue) is leased and starts generating.
    fn start_generation(&mut self, i: usize) {
        let legacy = self.settings.rules.mode == Mode::Legacy;
        self.leases.insert(
            i,
            Lease {
                header_wait: legacy,
            },
        );
        let req = &mut self.reqs[i];
        req.granted = Some(self.now);
        let (service, header) = (req.service, self.settings.header_delay.min(req.service));
        if legacy {
            self.push(self.now.saturating_add(header), Event::Headers(i));
        }
        self.push(self.now.saturating_add(service), Event::GenerationEnd(i));
    }

    /// The ideal bound: grant whatever is resident, load what is not (in
    /// parallel, once per model).
    fn ideal_round(&mut self) {
        #[cfg(test)]
        self.count_view();
        let waiting: Vec<usize> = self
            .queue
            .shown()
            .iter()
            .map(|t| t.key.1 as usize)
            .collect();
        for i in waiting {
            let model = self.reqs[i].model.clone();
            if self.resident.contains(&model) {
                if self.leases.len() < baselines::dispatch_limit(&self.settings.rules) {
                    self.take_ticket(i);
                    self.start_generation(i);
                }
            } else if !self.ideal_loading.values().any(|(m, _)| *m == model) {
                self.load_seq += 1;
                // A bound: as if every model's weights were read ahead.
                let end = self
                    .now
                    .saturating_add(self.workload.warm_load_time(&model));
                self.loads.push(LoadSpan {
                    model: model.clone(),
                    start: self.now,
                    end,
                    outcome: LoadOutcome::Verified { wasted: false },
                    // The ideal keeps every model: nothing gives way.
                    reason: None,
                });
                self.ideal_loading
                    .insert(self.load_seq, (model, self.loads.len() - 1));
                self.push(end, Event::LoadDone(self.load_seq));
            }
        }
    }

    fn timeline(self) -> Timeline {
        let requests = self
            .reqs
            .into_iter()
            .map(|req| {
                let (end, outcome) = req.ended.unwrap_or((self.now, Reason::Shutdown));
                RequestSpan {
                    model: req.model,
                    tier: req.tier,
                    arrival: req.arrival,
                    admitted: req.admitted,
                    granted: req.granted,
                    end,
                    outcome,
                }
            })
            .collect::<Vec<_>>();
        let mut requests = requests;
        // Agents' requests are created as they go: arrival order for people.
        requests.sort_by_key(|r| r.arrival);
        Timeline {
            loads: self.loads,
            unloads: self.unloads,
            requests,
            forecasts: self.prediction.is_some().then_some(self.forecasts),
        }
    }
}

/// How the simulator carries out a plan's decisions ([`apply`], as the
/// engine): a ticket is a request's index.
impl Book for Sim<'_> {
    type Ticket = usize;

    fn take(&mut self, (_, i): TicketKey) -> Option<usize> {
        self.take_ticket(i as usize).map(|_| i as usize)
    }

    fn loading(&self) -> Option<u64> {
        match self.backend {
            Backend::Loading { seq, .. } => Some(seq),
            _ => None,
        }
    }

    fn admit(&mut self, (_, i): TicketKey, load: u64) -> bool {
        if !self.queue.admit(i as usize) {
            return false;
        }
        self.reqs[i as usize].load = Some(load);
        true
    }

    fn admitted(&mut self, (_, i): TicketKey) {
        self.cache.invalidate();
        self.reqs[i as usize].admitted = Some(self.now);
    }

    fn grant(&mut self, i: usize) {
        self.start_generation(i);
    }

    fn fail(&mut self, i: usize, failure: Failure) {
        match failure {
            Failure::QueueTimeout => self.end(i, Reason::QueueTimeout),
            // A launch cooling down fails every waiting ticket for its
            // model, in arrival order, starting with this one (the
            // earliest); the queue shows only some of them (see [`Queue`]),
            // so all of them fail here and the plan's other failures for
            // the model find their tickets gone.
            Failure::Cooldown => {
                self.end(i, Reason::ModelLoadError);
                let model = self.reqs[i].model.clone();
                for j in self.queue.waiting_for(&model) {
                    self.take_ticket(j);
                    self.end(j, Reason::ModelLoadError);
                }
            }
        }
    }

    fn start_load(&mut self, model: String, reason: Option<SwitchReason>) {
        self.load_seq += 1;
        self.forecasts.load_starts(&model);
        let load = self.page_cache.load_starts(&model, self.now, self.workload);
        let fail_rate = self
            .workload
            .models
            .get(&model)
            .map_or(0.0, |params| params.fail_rate);
        let fails = fail_rate > 0.0 && self.rng.unit() < fail_rate;
        let end = self.now.saturating_add(load);
        self.loads.push(LoadSpan {
            model: model.clone(),
            start: self.now,
            end,
            outcome: LoadOutcome::Verified { wasted: false },
            reason,
        });
        self.backend = Backend::Loading {
            model,
            seq: self.load_seq,
            fails,
            cancelled: false,
            span: self.loads.len() - 1,
        };
        self.push(end, Event::LoadDone(self.load_seq));
    }

    fn unload(&mut self) {
        if let Backend::Serving { model, .. } = &self.backend {
            self.unloads.push(Unload {
                model: model.clone(),
                at: self.now,
            });
        }
        self.backend = Backend::Empty;
    }

    // The starting child is stopped at once (the real one on its next
    // readiness poll).
    fn cancel_load(&mut self) {
        if let Backend::Loading { span, .. } = self.backend {
            self.loads[span].end = self.now;
            self.loads[span].outcome = LoadOutcome::Abandoned;
            self.backend = Backend::Empty;
        }
    }

    fn start_lookup(&mut self, keys: Vec<TicketKey>) {
        self.lookups += 1;
        let until = self.at(self.now.saturating_add(Duration::from_secs(1)));
        self.cache.start(self.lookups, until, HashSet::from([CONN]));
        let ranks = keys
            .iter()
            .map(|key| (*key, self.reqs[key.1 as usize].cache_rank))
            .collect();
        self.cache.answer(self.lookups, CONN, Some(ranks));
    }
}
