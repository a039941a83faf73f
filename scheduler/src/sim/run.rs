//! The simulator's event loop: a virtual clock, the one backend, the queue
//! and the leases, with a decision function consulted after every event,
//! as the engine consults [`decide`] after every command.
//!
//! What it models, and how the engine does the same:
//! - A request arrives (for an agent: its previous request's end plus the
//!   step's gap) and is refused at once by [`refusal`] (a cooling model,
//!   legacy `max_pending`), or enters the queue with its legacy `queue_ms`
//!   deadline.
//! - A grant starts its generation, which ends `service` later; in legacy
//!   mode its headers arrive `header_delay` after the grant (capped by the
//!   generation), releasing the engine lock.
//! - A load takes the model's load time, fails with the model's
//!   `fail_rate` (the model then cools down for `cooldown_ms`, and the
//!   requests admitted to it fail), or serves: the tickets admitted to it
//!   are granted and the grace and idle clocks restart.
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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use strata_protocol::config::Config;
use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;
use tokio::time::Instant;

use super::baselines;
use super::rng::Rng;
use super::timeline::{LoadOutcome, LoadSpan, RequestSpan, Timeline};
use super::workload::Workload;
use crate::{
    BackendView, CacheState, ConnId, Decision, Failure, Hold, Mode, Plan, Refusal, Rules, View,
    Waiting, decide, refusal,
};

/// The decision functions a simulation can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    Fifo,
    Collate,
    /// The router's own [`decide`] with the given rules.
    Router,
    /// A bound, not a policy: every model stays resident after its first
    /// load (as if the GPU held them all), so each is loaded once, at its
    /// first request, and a request waits only for that load and for a
    /// dispatch slot (the router's limits, over all models at once). No
    /// one-model policy can need fewer loads.
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
}

impl Settings {
    /// The settings the supervisor would run with under `config`.
    pub fn from_config(config: &Config) -> Settings {
        Settings {
            rules: Rules::from_config(config),
            queue_timeout: config.queue_timeout(),
            cooldown: Duration::from_millis(config.timers.cooldown_ms),
            header_delay: Duration::from_millis(50),
        }
    }
}

/// Runs `workload` under `policy`.
pub fn simulate(workload: &Workload, settings: &Settings, policy: Policy) -> Timeline {
    Sim::new(workload, settings, policy).run()
}

/// The simulator's only proxy connection.
const CONN: ConnId = 1;

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
    reqs: Vec<Req>,
    queue: Vec<Waiting>,
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
    rng: Rng,
    wake: Option<Duration>,
    /// Requests created and not ended yet.
    open: usize,
    /// Per agent: the requests it has sent so far.
    agent_steps: Vec<usize>,
    /// Ideal: models loaded and those loading (with their timeline entry).
    resident: BTreeSet<String>,
    ideal_loading: BTreeMap<u64, (String, usize)>,
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
            reqs: Vec::with_capacity(workload.request_count()),
            queue: Vec::new(),
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
            rng: Rng::new(workload.seed ^ 0x5EED_1A0D),
            wake: None,
            open: 0,
            agent_steps: vec![0; workload.agents.len()],
            resident: BTreeSet::new(),
            ideal_loading: BTreeMap::new(),
        }
    }

    fn at(&self, offset: Duration) -> Instant {
        self.base + offset
    }

    fn push(&mut self, when: Duration, event: Event) {
        self.order += 1;
        self.events.push(Reverse((when, self.order, event)));
    }

    fn run(mut self) -> Timeline {
        for (i, request) in self.workload.requests.iter().enumerate() {
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
            self.push(request.at, Event::Arrive(i));
        }
        for (a, agent) in self.workload.agents.iter().enumerate() {
            let index = self.agent_request(a, 0, agent.start);
            self.push(agent.start, Event::Arrive(index));
        }
        loop {
            let next_event = self.events.peek().map(|Reverse((at, _, _))| *at);
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
            while let Some(Reverse((at, _, event))) = self.events.peek().copied() {
                if at > self.now {
                    break;
                }
                self.events.pop();
                self.handle(event);
                self.decide();
            }
            if self.open == 0 && self.events.is_empty() {
                // Only idle unloads and the like are left.
                break;
            }
        }
        self.timeline()
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
            .map(|limit| self.at(self.now + limit));
        self.queue.push(Waiting {
            key: (CONN, i as u64),
            model,
            tier: self.reqs[i].tier,
            arrival: self.arrivals,
            arrived_at: self.at(self.now),
            deadline,
            admitted: false,
        });
        self.cache.invalidate();
        if let Some(patience) = self.reqs[i].patience {
            self.push(self.now + patience, Event::Patience(i));
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
            self.push(self.now + next.gap, Event::AgentNext(agent));
        }
    }

    fn take_ticket(&mut self, i: usize) -> Option<Waiting> {
        let index = self.queue.iter().position(|t| t.key.1 == i as u64)?;
        self.cache.invalidate();
        Some(self.queue.remove(index))
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
        let admitted: Vec<usize> = self
            .queue
            .iter()
            .filter(|t| t.admitted && self.reqs[t.key.1 as usize].load == Some(seq))
            .map(|t| t.key.1 as usize)
            .collect();
        if cancelled {
            self.loads[span].outcome = LoadOutcome::Abandoned;
            for i in admitted {
                if let Some(ticket) = self.queue.iter_mut().find(|t| t.key.1 == i as u64) {
                    ticket.admitted = false;
                }
                self.reqs[i].load = None;
            }
            return;
        }
        if fails {
            self.loads[span].outcome = LoadOutcome::Failed;
            let until = self.at(self.now + self.settings.cooldown);
            self.cooldowns.insert(model, until);
            for i in admitted {
                self.take_ticket(i);
                self.end(i, Reason::ModelLoadError);
            }
            return;
        }
        let wanted = !admitted.is_empty() || self.queue.iter().any(|t| t.model == model);
        self.loads[span].outcome = LoadOutcome::Verified { wasted: !wanted };
        self.cooldowns.remove(&model);
        self.backend = Backend::Serving { model };
        self.quiet_since = self.now;
        self.ready_since = self.now;
        for i in admitted {
            self.take_ticket(i);
            self.grant(i);
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
            queue: &self.queue,
            leases: self.leases.len(),
            header_waits: self.leases.values().filter(|l| l.header_wait).count(),
            quiet_since: self.at(self.quiet_since),
            ready_since: self.at(self.ready_since),
            load_pinned: false,
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
            let plan: Plan = {
                let view = self.view();
                match self.policy {
                    Policy::Fifo => baselines::fifo(&view),
                    Policy::Collate => baselines::collate(&view),
                    Policy::Router | Policy::Ideal => decide(&view),
                }
            };
            self.wake = plan
                .wake_at
                .map(|at| at.saturating_duration_since(self.base))
                .filter(|at| *at > self.now);
            if plan.decisions.is_empty() {
                break;
            }
            for decision in plan.decisions {
                self.apply(decision);
            }
        }
    }

    fn apply(&mut self, decision: Decision) {
        match decision {
            Decision::Grant((_, i)) => {
                if self.take_ticket(i as usize).is_some() {
                    self.grant(i as usize);
                }
            }
            Decision::Admit((_, i)) => {
                let Backend::Loading { seq, .. } = self.backend else {
                    return;
                };
                if let Some(ticket) = self.queue.iter_mut().find(|t| t.key.1 == i) {
                    ticket.admitted = true;
                    self.cache.invalidate();
                    let req = &mut self.reqs[i as usize];
                    req.admitted = Some(self.now);
                    req.load = Some(seq);
                }
            }
            Decision::StartLoad { model } => self.start_load(model),
            Decision::Fail((_, i), failure) => {
                if self.take_ticket(i as usize).is_some() {
                    let reason = match failure {
                        Failure::QueueTimeout => Reason::QueueTimeout,
                        Failure::Cooldown => Reason::ModelLoadError,
                    };
                    self.end(i as usize, reason);
                }
            }
            Decision::Unload => self.backend = Backend::Empty,
            // The starting child is stopped at once (the real one on its
            // next readiness poll).
            Decision::CancelLoad => {
                if let Backend::Loading { span, .. } = self.backend {
                    self.loads[span].end = self.now;
                    self.loads[span].outcome = LoadOutcome::Abandoned;
                    self.backend = Backend::Empty;
                }
            }
            Decision::StartLookup(keys) => {
                self.lookups += 1;
                let until = self.at(self.now + Duration::from_secs(1));
                self.cache.start(self.lookups, until, HashSet::from([CONN]));
                let ranks = keys
                    .iter()
                    .map(|key| (*key, self.reqs[key.1 as usize].cache_rank))
                    .collect();
                self.cache.answer(self.lookups, CONN, Some(ranks));
            }
        }
    }

    /// Request `i` (out of the queue) starts generating.
    fn grant(&mut self, i: usize) {
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
            self.push(self.now + header, Event::Headers(i));
        }
        self.push(self.now + service, Event::GenerationEnd(i));
    }

    fn start_load(&mut self, model: String) {
        self.load_seq += 1;
        let load = self.workload.load_time(&model);
        let fail_rate = self
            .workload
            .models
            .get(&model)
            .map_or(0.0, |params| params.fail_rate);
        let fails = fail_rate > 0.0 && self.rng.unit() < fail_rate;
        self.loads.push(LoadSpan {
            model: model.clone(),
            start: self.now,
            end: self.now + load,
            outcome: LoadOutcome::Verified { wasted: false },
        });
        self.backend = Backend::Loading {
            model,
            seq: self.load_seq,
            fails,
            cancelled: false,
            span: self.loads.len() - 1,
        };
        self.push(self.now + load, Event::LoadDone(self.load_seq));
    }

    /// The ideal bound: grant whatever is resident, load what is not (in
    /// parallel, once per model).
    fn ideal_round(&mut self) {
        let waiting: Vec<usize> = self.queue.iter().map(|t| t.key.1 as usize).collect();
        for i in waiting {
            let model = self.reqs[i].model.clone();
            if self.resident.contains(&model) {
                if self.leases.len() < baselines::dispatch_limit(&self.settings.rules) {
                    self.take_ticket(i);
                    self.grant(i);
                }
            } else if !self.ideal_loading.values().any(|(m, _)| *m == model) {
                self.load_seq += 1;
                let load = self.workload.load_time(&model);
                self.loads.push(LoadSpan {
                    model: model.clone(),
                    start: self.now,
                    end: self.now + load,
                    outcome: LoadOutcome::Verified { wasted: false },
                });
                self.ideal_loading
                    .insert(self.load_seq, (model, self.loads.len() - 1));
                self.push(self.now + load, Event::LoadDone(self.load_seq));
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
            requests,
        }
    }
}
