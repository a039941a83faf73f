//! The scheduling rules, one table or scenario each, and the timers under
//! tokio's paused clock.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use strata_protocol::wire::ServiceTier::{self, Default as D, Flex as F, Priority as P};
use tokio::time::Instant;

use super::*;

const GRACE: Duration = Duration::from_secs(2);
const IDLE: Duration = Duration::from_secs(60);

fn rules(mode: Mode, max_pending: usize) -> Rules {
    Rules {
        mode,
        max_pending,
        cache_max_active: None,
        grace: GRACE,
        idle: IDLE,
        cache_lookup: true,
        hold_max: None,
        unlearned_load: UNLEARNED,
    }
}

/// What a load counts in these rules before anything was learned (a tenth
/// of a 1200 s `startup_ms`).
const UNLEARNED: Duration = Duration::from_secs(120);

/// What runs, with owned names (a [`BackendView`] borrows).
#[derive(Debug, Clone, PartialEq)]
enum Runs {
    Nothing,
    Serving(&'static str),
    Loading(&'static str),
    Busy,
}

/// A scheduler input that tests can build and mutate.
struct World {
    rules: Rules,
    now: Instant,
    runs: Runs,
    queue: Vec<Waiting>,
    leases: usize,
    header_waits: usize,
    quiet_since: Instant,
    ready_since: Instant,
    load_pinned: bool,
    load_times: BTreeMap<String, Duration>,
    cooldowns: BTreeMap<String, Instant>,
    hold: Hold,
    usable: bool,
    ranks: Option<HashMap<TicketKey, f64>>,
    lookup_until: Option<Instant>,
    tried: bool,
}

impl World {
    fn new(mode: Mode, max_pending: usize) -> World {
        let now = Instant::now();
        World {
            rules: rules(mode, max_pending),
            now,
            runs: Runs::Nothing,
            queue: Vec::new(),
            leases: 0,
            header_waits: 0,
            // Quiet long enough that grace never holds unless a test says so.
            quiet_since: now - GRACE * 10,
            ready_since: now - GRACE * 10,
            load_pinned: false,
            // Every model learned at a second: the hold floor (1.5 s) stays
            // below the bounds the tests set unless a test says otherwise.
            load_times: ["a", "b", "c"]
                .into_iter()
                .map(|model| (model.to_owned(), Duration::from_secs(1)))
                .collect(),
            cooldowns: BTreeMap::new(),
            hold: Hold::None,
            usable: false,
            ranks: None,
            lookup_until: None,
            tried: false,
        }
    }

    fn serving(mut self, model: &'static str) -> World {
        self.runs = Runs::Serving(model);
        self
    }

    fn loading(mut self, model: &'static str) -> World {
        self.runs = Runs::Loading(model);
        self
    }

    fn leases(mut self, leases: usize) -> World {
        self.leases = leases;
        self
    }

    /// Queues tickets `(id, model, tier)`, id as arrival number, conn 1.
    fn queue(mut self, tickets: &[(u64, &str, ServiceTier)]) -> World {
        for (id, model, tier) in tickets {
            self.queue.push(Waiting {
                key: (1, *id),
                model: (*model).to_owned(),
                tier: *tier,
                arrival: *id,
                arrived_at: self.now,
                deadline: None,
                admitted: false,
            });
        }
        self
    }

    fn decide(&self) -> Plan {
        decide(&self.view())
    }

    fn refusal(&self, model: &str) -> Option<Refusal> {
        refusal(&self.view(), model)
    }

    fn view(&self) -> View<'_> {
        let backend = match &self.runs {
            Runs::Nothing => BackendView::Empty,
            Runs::Serving(model) => BackendView::Serving { model },
            Runs::Loading(model) => BackendView::Loading { model },
            Runs::Busy => BackendView::Busy,
        };
        View {
            now: self.now,
            rules: &self.rules,
            backend,
            queue: &self.queue,
            leases: self.leases,
            header_waits: self.header_waits,
            quiet_since: self.quiet_since,
            ready_since: self.ready_since,
            load_pinned: self.load_pinned,
            load_times: &self.load_times,
            cooldowns: &self.cooldowns,
            hold: self.hold,
            cache: CacheView {
                usable: self.usable,
                ranks: self.ranks.as_ref(),
                lookup_until: self.lookup_until,
                tried: self.tried,
            },
        }
    }

    /// Applies a plan the way the engine would, with loads that finish at
    /// once: grants become leases, admitted tickets are granted when their
    /// load "finishes" (immediately after the plan).
    fn apply(&mut self, plan: &Plan) {
        let mut loaded = None;
        for decision in &plan.decisions {
            match decision {
                Decision::Grant(key) => {
                    self.queue.retain(|ticket| ticket.key != *key);
                    self.leases += 1;
                    if self.rules.mode == Mode::Legacy {
                        self.header_waits += 1;
                    }
                }
                Decision::Admit(key) => {
                    for ticket in &mut self.queue {
                        if ticket.key == *key {
                            ticket.admitted = true;
                        }
                    }
                }
                Decision::StartLoad { model, .. } => {
                    loaded = Some(model.clone());
                }
                Decision::Fail(key, _) => self.queue.retain(|ticket| ticket.key != *key),
                Decision::Unload => self.runs = Runs::Nothing,
                Decision::StartLookup(_) => self.tried = true,
                Decision::CancelLoad => self.runs = Runs::Nothing,
            }
        }
        if let Some(model) = loaded {
            let model: &'static str = Box::leak(model.into_boxed_str());
            self.runs = Runs::Serving(model);
            let admitted = self.queue.iter().filter(|ticket| ticket.admitted).count();
            self.queue.retain(|ticket| !ticket.admitted);
            self.leases += admitted;
            if self.rules.mode == Mode::Legacy {
                self.header_waits += admitted;
            }
            self.quiet_since = self.now;
        }
    }
}

fn grants(ids: &[u64]) -> Vec<Decision> {
    ids.iter().map(|id| Decision::Grant((1, *id))).collect()
}

/// A load from nothing (not a switch), admitting `admit`.
fn load(model: &str, admit: &[u64]) -> Vec<Decision> {
    start(model, None, admit)
}

/// A switch to `model` for `reason`, admitting `admit`.
fn switch(model: &str, reason: SwitchReason, admit: &[u64]) -> Vec<Decision> {
    start(model, Some(reason), admit)
}

fn start(model: &str, reason: Option<SwitchReason>, admit: &[u64]) -> Vec<Decision> {
    let mut decisions = vec![Decision::StartLoad {
        model: model.to_owned(),
        reason,
    }];
    decisions.extend(admit.iter().map(|id| Decision::Admit((1, *id))));
    decisions
}

// ---- wait-first -------------------------------------------------------------

#[test]
fn wait_first_grants_the_serving_model_while_dispatch_slots_are_free() {
    let cases: [(usize, usize, &[u64]); 4] = [
        // (max_pending, leases already held, granted)
        (16, 0, &[1, 2, 3]),
        (2, 0, &[1, 2]),
        (3, 2, &[1]),
        (2, 2, &[]),
    ];
    for (max_pending, leases, expected) in cases {
        let world = World::new(Mode::WaitFirst, max_pending)
            .serving("a")
            .leases(leases)
            .queue(&[(1, "a", D), (2, "a", D), (3, "a", D)]);
        assert_eq!(
            world.decide().decisions,
            grants(expected),
            "max_pending {max_pending}, leases {leases}"
        );
    }
}

#[test]
fn cache_max_active_limits_dispatch_too() {
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .leases(1)
        .queue(&[(1, "a", D), (2, "a", D)]);
    world.rules.cache_max_active = Some(2);
    assert_eq!(world.decide().decisions, grants(&[1]));
    world.rules.cache_max_active = Some(1);
    assert_eq!(world.decide().decisions, []);
}

#[test]
fn model_groups_run_together_a_a_then_b_b() {
    // Arrivals A B A B with A loaded: both A run now, then both B.
    let mut world = World::new(Mode::WaitFirst, 16).serving("a").queue(&[
        (1, "a", D),
        (2, "b", D),
        (3, "a", D),
        (4, "b", D),
    ]);
    let plan = world.decide();
    assert_eq!(plan.decisions, grants(&[1, 3]));
    world.apply(&plan);
    assert_eq!(world.decide().decisions, [], "B waits for A's leases");
    world.leases = 0;
    world.quiet_since = world.now - GRACE;
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::GraceExpired, &[2, 4])
    );
}

#[test]
fn with_nothing_loaded_the_earliest_ticket_picks_the_model_and_its_group_joins() {
    let world = World::new(Mode::WaitFirst, 16).queue(&[(1, "b", D), (2, "a", D), (3, "b", D)]);
    assert_eq!(world.decide().decisions, load("b", &[1, 3]));
    // The load admits no more than max_pending.
    let world = World::new(Mode::WaitFirst, 1).queue(&[(1, "b", D), (2, "b", D)]);
    assert_eq!(world.decide().decisions, load("b", &[1]));
}

#[test]
fn tickets_for_a_running_load_join_it_within_the_slots() {
    let mut world = World::new(Mode::WaitFirst, 2).loading("b").queue(&[
        (1, "b", D),
        (2, "a", D),
        (3, "b", D),
        (4, "b", D),
    ]);
    world.queue[0].admitted = true;
    // One slot left: B3 joins; B4 waits; A2 waits for the load and B's work.
    assert_eq!(
        world.decide().decisions,
        [Decision::Admit((1, 3))],
        "joining is admission, not a grant"
    );
}

#[test]
fn grace_keeps_the_model_then_the_next_group_goes_and_priority_skips_it() {
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "b", D)]);
    world.quiet_since = world.now - GRACE / 2;
    let plan = world.decide();
    assert_eq!(plan.decisions, []);
    assert_eq!(plan.wake_at, Some(world.quiet_since + GRACE));
    // A same-model request in the grace period is served at once.
    let mut busy = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "b", D), (2, "a", D)]);
    busy.quiet_since = busy.now - GRACE / 2;
    assert_eq!(busy.decide().decisions, grants(&[2]));
    // Priority does not wait for the grace period.
    world.queue[0].tier = P;
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::Priority, &[1])
    );
    // Zero grace disables the hold.
    world.queue[0].tier = D;
    world.rules.grace = Duration::ZERO;
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::QueueDrained, &[1])
    );
    // Nothing loaded: a load, not a switch.
    let empty = World::new(Mode::WaitFirst, 16).queue(&[(1, "b", D)]);
    assert_eq!(empty.decide().decisions, load("b", &[1]));
}

#[test]
fn a_higher_tier_goes_first_inside_the_loaded_model() {
    // One slot, default arrived first, priority second: priority is granted.
    let world =
        World::new(Mode::WaitFirst, 1)
            .serving("a")
            .queue(&[(1, "a", D), (2, "a", P), (3, "a", F)]);
    assert_eq!(world.decide().decisions, grants(&[2]));
    // Free slots for all: the tiers drain in order within one plan.
    let world = World::new(Mode::WaitFirst, 16).serving("a").queue(&[
        (1, "a", F),
        (2, "a", D),
        (3, "a", P),
    ]);
    assert_eq!(world.decide().decisions, grants(&[3, 2, 1]));
}

#[test]
fn a_waiting_higher_tier_for_another_model_holds_back_the_loaded_model() {
    // Priority for B waits (A has an active lease); default A requests are held back, so the
    // engine drains toward B instead of feeding A.
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .leases(1)
        .queue(&[(1, "b", P), (2, "a", D), (3, "a", D)]);
    let plan = world.decide();
    assert_eq!(plan.decisions, [], "nothing preempts, nothing new for A");
    // Once A's active response ends, priority switches at once (no grace).
    world.leases = 0;
    world.quiet_since = world.now;
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::Priority, &[1])
    );
}

#[test]
fn flex_waits_behind_default_and_priority_work() {
    // A loaded, one slot: default before flex although flex arrived first.
    let world = World::new(Mode::WaitFirst, 1)
        .serving("a")
        .queue(&[(1, "a", F), (2, "a", D)]);
    assert_eq!(world.decide().decisions, grants(&[2]));
    // A default request for another model holds flex for the loaded model back.
    let world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "a", F), (2, "b", D)]);
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::GraceExpired, &[2])
    );
    // Flex is served when nothing better waits.
    let world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "a", F)]);
    assert_eq!(world.decide().decisions, grants(&[1]));
}

#[test]
fn no_switch_while_any_lease_or_admission_exists() {
    // The child died (nothing serves) but a lease on it still exists: no new backend.
    let world = World::new(Mode::WaitFirst, 16)
        .leases(1)
        .queue(&[(1, "a", D)]);
    assert_eq!(world.decide().decisions, []);
    let busy = World {
        runs: Runs::Busy,
        ..World::new(Mode::WaitFirst, 16).queue(&[(1, "a", D)])
    };
    assert_eq!(busy.decide().decisions, [], "a stop is running");
}

/// The start cooldown is per model: the cooling model's tickets fail (all of them, they
/// all need its launch), and a healthy model still loads meanwhile.
#[test]
fn a_start_cooldown_fails_only_the_cooling_models_tickets() {
    let mut world = World::new(Mode::WaitFirst, 16).serving("a").queue(&[
        (1, "b", D),
        (2, "a", F),
        (3, "c", D),
        (4, "b", F),
    ]);
    world
        .cooldowns
        .insert("b".into(), world.now + Duration::from_secs(5));
    let plan = world.decide();
    assert_eq!(
        plan.decisions,
        [
            Decision::Fail((1, 1), Failure::Cooldown),
            Decision::Fail((1, 4), Failure::Cooldown),
        ]
    );
    assert_eq!(plan.wake_at, Some(world.now + Duration::from_secs(5)));
    // The engine applies the failures and decides again: c, not cooling, loads.
    world.queue.retain(|ticket| ticket.model != "b");
    assert_eq!(
        world.decide().decisions,
        switch("c", SwitchReason::GraceExpired, &[3])
    );

    // Legacy mode, the same: the cooling head fails, the next head loads.
    let mut legacy = World::new(Mode::Legacy, 16).queue(&[(1, "b", D), (2, "c", D)]);
    legacy
        .cooldowns
        .insert("b".into(), legacy.now + Duration::from_secs(5));
    assert_eq!(
        legacy.decide().decisions,
        [Decision::Fail((1, 1), Failure::Cooldown)]
    );
    legacy.queue.retain(|ticket| ticket.model != "b");
    assert_eq!(legacy.decide().decisions, load("c", &[2]));
}

#[test]
fn an_expired_cooldown_lets_its_model_load_again() {
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "b", D), (2, "a", F)]);
    world.cooldowns.insert("b".into(), world.now);
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::GraceExpired, &[1]),
        "expired cooldown"
    );
}

#[test]
fn idle_unload_waits_for_quiet_and_an_empty_queue() {
    let mut world = World::new(Mode::WaitFirst, 16).serving("a");
    world.quiet_since = world.now - IDLE;
    assert_eq!(world.decide().decisions, [Decision::Unload]);
    world.quiet_since = world.now - IDLE / 2;
    assert_eq!(world.decide().wake_at, Some(world.quiet_since + IDLE));
    // The grace period bounds it from below.
    world.rules.idle = Duration::from_millis(1);
    world.quiet_since = world.now - GRACE / 2;
    assert_eq!(world.decide().wake_at, Some(world.quiet_since + GRACE));
    // Not with a lease, an admitted ticket, or while loading.
    let leased = World::new(Mode::WaitFirst, 16).serving("a").leases(1);
    assert_eq!(leased.decide(), Plan::default());
    let mut admitted = World::new(Mode::WaitFirst, 16)
        .loading("a")
        .queue(&[(1, "a", D)]);
    admitted.queue[0].admitted = true;
    assert_eq!(admitted.decide(), Plan::default());
}

#[test]
fn an_operator_operation_holds_everything() {
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "a", D)]);
    world.hold = Hold::Everything;
    assert_eq!(world.decide(), Plan::default());
}

#[test]
fn a_load_nobody_waits_for_is_cancelled_when_another_model_waits() {
    let base = || {
        World::new(Mode::WaitFirst, 16)
            .loading("a")
            .queue(&[(1, "b", D)])
    };
    assert_eq!(base().decide().decisions, [Decision::CancelLoad]);
    // Not when a ticket for it still waits (it joins) or is admitted.
    let joins = base().queue(&[(2, "a", D)]);
    assert_eq!(joins.decide().decisions, [Decision::Admit((1, 2))]);
    let mut admitted = base().queue(&[(2, "a", D)]);
    admitted.queue[1].admitted = true;
    assert_eq!(admitted.decide().decisions, []);
    // Not an operator's load, not without another model waiting, not in
    // legacy mode.
    let mut pinned = base();
    pinned.load_pinned = true;
    assert_eq!(pinned.decide().decisions, []);
    let alone = World::new(Mode::WaitFirst, 16).loading("a");
    assert_eq!(alone.decide().decisions, []);
    let legacy = World::new(Mode::Legacy, 16)
        .loading("a")
        .queue(&[(1, "b", D)]);
    assert!(!legacy.decide().decisions.contains(&Decision::CancelLoad));
}

#[test]
fn past_the_hold_bound_the_serving_model_gets_no_grants_and_the_switch_skips_grace() {
    let bound = Duration::from_secs(10);
    let world = |waited: Duration, ready: Duration, leases: usize| {
        let mut world = World::new(Mode::WaitFirst, 16)
            .serving("a")
            .leases(leases)
            .queue(&[(1, "b", D), (2, "a", D)]);
        world.rules.hold_max = Some(bound);
        world.queue[0].arrived_at = world.now - waited;
        world.ready_since = world.now - ready;
        // Inside the grace: only the bound can switch now.
        world.quiet_since = world.now;
        world
    };
    let secs = Duration::from_secs;
    // (b waited, a ready for, leases, decisions)
    let cases: Vec<(Duration, Duration, usize, Vec<Decision>)> = vec![
        (secs(9), secs(60), 0, grants(&[2])),
        (
            secs(10),
            secs(60),
            0,
            switch("b", SwitchReason::BoundDue, &[1]),
        ),
        // Leases on a: no grants for a, and the switch waits for them.
        (secs(10), secs(60), 3, vec![]),
        // Counted from a's readiness: b waited through a's load.
        (secs(60), secs(5), 0, grants(&[2])),
    ];
    for (waited, ready, leases, expected) in cases {
        let plan = world(waited, ready, leases).decide();
        assert_eq!(
            plan.decisions, expected,
            "waited {waited:?}, ready {ready:?}"
        );
    }
    // It wakes when the bound ends.
    let w = world(secs(9), secs(60), 0);
    assert_eq!(w.decide().wake_at, Some(w.now + secs(1)));
    // Off by default: grace holds as the spec says.
    let mut off = world(secs(600), secs(600), 0);
    off.rules.hold_max = None;
    assert_eq!(off.decide().decisions, grants(&[2]));
}

// ---- cache order ------------------------------------------------------------

fn competing(ranks: Option<&[(u64, f64)]>) -> World {
    let mut world =
        World::new(Mode::WaitFirst, 1)
            .serving("a")
            .queue(&[(1, "a", D), (2, "a", D), (3, "a", D)]);
    world.usable = true;
    world.ranks = ranks.map(|ranks| ranks.iter().map(|(id, rank)| ((1, *id), *rank)).collect());
    world
}

#[test]
fn competing_tickets_are_looked_up_then_ordered_by_cache_match() {
    let world = competing(None);
    assert_eq!(
        world.decide().decisions,
        [Decision::StartLookup(vec![(1, 1), (1, 2), (1, 3)])]
    );
    // Fractions 10 < 90 > 50 (the fake's three): the best goes first.
    let world = competing(Some(&[(1, 0.1), (2, 0.9), (3, 0.5)]));
    assert_eq!(world.decide().decisions, grants(&[2]));
    let mut two = competing(Some(&[(1, 0.1), (2, 0.9), (3, 0.5)]));
    two.rules.max_pending = 2;
    assert_eq!(two.decide().decisions, grants(&[2, 3]));
}

#[test]
fn equal_fractions_and_small_inputs_keep_arrival_order() {
    let world = competing(Some(&[(1, 0.0), (2, 0.0), (3, 0.0)]));
    assert_eq!(world.decide().decisions, grants(&[1]));
    let world = competing(Some(&[(1, 0.5), (2, 0.5), (3, 0.2)]));
    assert_eq!(world.decide().decisions, grants(&[1]));
    assert_eq!(rank(100, 90, 1024), 0.0, "below the backend's threshold");
    assert_eq!(rank(2048, 1024, 1024), 0.5);
    assert_eq!(rank(0, 0, 0), 0.0);
    assert_eq!(rank(10, 20, 0), 1.0, "capped at the input");
}

#[test]
fn no_lookup_without_competition_or_when_unusable() {
    let mut world = competing(None);
    world.rules.max_pending = 3;
    assert_eq!(world.decide().decisions, grants(&[1, 2, 3]), "room for all");
    let mut world = competing(None);
    world.usable = false;
    assert_eq!(world.decide().decisions, grants(&[1]), "arrival order");
    let mut full = competing(None).leases(1);
    full.rules.max_pending = 1;
    assert_eq!(
        full.decide().decisions,
        [],
        "no slot: nothing to decide yet"
    );
}

#[test]
fn a_running_lookup_holds_its_competitors_and_a_failed_round_keeps_arrival_order() {
    let mut world = competing(None);
    world.lookup_until = Some(world.now + Duration::from_millis(800));
    world.tried = true;
    let plan = world.decide();
    assert_eq!(plan.decisions, []);
    assert_eq!(plan.wake_at, world.lookup_until);
    world.lookup_until = None;
    assert_eq!(world.decide().decisions, grants(&[1]), "tried: fall back");
}

#[test]
fn cache_rank_never_lifts_a_ticket_above_its_tier() {
    let mut world = competing(Some(&[(1, 1.0), (2, 1.0), (3, 0.0)]));
    world.queue[2].tier = P;
    assert_eq!(world.decide().decisions, grants(&[3]));
}

#[test]
fn cache_state_discards_scores_on_every_change() {
    let now = Instant::now();
    let mut cache = CacheState::default();
    cache.start(1, now + Duration::from_secs(1), [7].into());
    assert!(cache.tried);
    cache.answer(1, 7, Some([((7, 1), 0.5)].into()));
    assert!(cache.ranks.is_some() && cache.lookup.is_none());
    cache.invalidate();
    assert!(cache.ranks.is_none());
    assert!(!cache.tried, "a new round may look up again");
    // A lookup that was running when the queue changed is discarded; its round keeps arrival
    // order.
    cache.start(2, now + Duration::from_secs(1), [7, 8].into());
    cache.invalidate();
    cache.answer(2, 7, Some(HashMap::new()));
    cache.answer(2, 8, Some(HashMap::new()));
    assert!(cache.ranks.is_none() && cache.lookup.is_none() && cache.tried);
    // One failed part fails the lookup.
    cache.invalidate();
    cache.start(3, now + Duration::from_secs(1), [7, 8].into());
    cache.answer(3, 7, None);
    assert!(cache.ranks.is_none() && cache.lookup.is_none());
    // Answers to another lookup, or twice from one proxy, change nothing.
    cache.start(4, now + Duration::from_secs(1), [7, 8].into());
    cache.answer(3, 7, Some(HashMap::new()));
    cache.answer(4, 7, Some(HashMap::new()));
    cache.answer(4, 7, Some(HashMap::new()));
    assert!(cache.lookup.as_ref().is_some_and(|l| l.pending.len() == 1));
    // The budget ends it.
    cache.expire(now + Duration::from_secs(1));
    assert!(cache.lookup.is_none());
}

// ---- legacy -----------------------------------------------------------------

#[test]
fn legacy_max_pending_bounds_active_plus_waiting() {
    // (mode, queued, leases, refused)
    let cases = [
        (Mode::Legacy, 1, 1, false),
        (Mode::Legacy, 2, 1, true),
        (Mode::Legacy, 0, 3, true),
        (Mode::WaitFirst, 100, 100, false),
    ];
    for (mode, queued, leases, refused) in cases {
        let mut world = World::new(mode, 3).serving("a").leases(leases);
        for id in 0..queued {
            world = world.queue(&[(id, "a", D)]);
        }
        let expected = refused.then_some(Refusal::QueueFull);
        assert_eq!(
            world.refusal("a"),
            expected,
            "{mode:?}, {queued} queued, {leases} leases"
        );
    }
}

#[test]
fn a_cooldown_refuses_only_tickets_that_need_a_launch() {
    let mut world = World::new(Mode::WaitFirst, 16).serving("a");
    let until = world.now + Duration::from_secs(5);
    world.cooldowns.insert("b".into(), until);
    world.cooldowns.insert("a".into(), until);
    // (what runs, model asked for, refused)
    let cases = [
        (Runs::Serving("a"), "a", None),
        (Runs::Loading("a"), "a", None),
        (Runs::Serving("a"), "b", Some(Refusal::Cooldown { until })),
        (Runs::Nothing, "a", Some(Refusal::Cooldown { until })),
        (Runs::Busy, "a", Some(Refusal::Cooldown { until })),
        (Runs::Nothing, "c", None),
    ];
    for (runs, model, expected) in cases {
        world.runs = runs.clone();
        assert_eq!(world.refusal(model), expected, "{runs:?}, {model}");
    }
    // An ended cooldown refuses nothing.
    world.now = until;
    world.runs = Runs::Nothing;
    assert_eq!(world.refusal("b"), None);
}

#[test]
fn legacy_one_ticket_holds_the_lock_until_its_headers() {
    let mut world = World::new(Mode::Legacy, 16)
        .serving("a")
        .queue(&[(1, "a", D), (2, "a", D)]);
    let plan = world.decide();
    assert_eq!(plan.decisions, grants(&[1]), "one at a time");
    world.apply(&plan);
    assert_eq!(world.decide().decisions, [], "the lock waits for headers");
    world.header_waits = 0;
    assert_eq!(
        world.decide().decisions,
        grants(&[2]),
        "then same-model overlap"
    );
}

#[test]
fn legacy_a_ticket_for_another_model_waits_at_the_head() {
    // B is at the head: the A ticket behind it waits too (first in, first out), and B loads
    // once every response has finished.
    let mut world = World::new(Mode::Legacy, 16)
        .serving("a")
        .leases(1)
        .queue(&[(1, "b", D), (2, "a", D)]);
    assert_eq!(world.decide().decisions, []);
    world.leases = 0;
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::QueueDrained, &[1]),
        "the lock holder alone"
    );
    // Nothing loaded: the head loads.
    let empty = World::new(Mode::Legacy, 16).queue(&[(1, "b", D), (2, "b", D)]);
    assert_eq!(empty.decide().decisions, load("b", &[1]));
    // An admitted ticket holds the lock through its load.
    let mut loading = World::new(Mode::Legacy, 16)
        .loading("b")
        .queue(&[(1, "b", D), (2, "b", D)]);
    loading.queue[0].admitted = true;
    assert_eq!(loading.decide().decisions, []);
}

#[test]
fn legacy_switches_without_grace() {
    // a quiet for less than the grace: wait-first holds, legacy switches.
    for (mode, expected) in [
        (Mode::WaitFirst, vec![]),
        (Mode::Legacy, switch("b", SwitchReason::QueueDrained, &[1])),
    ] {
        let mut world = World::new(mode, 16).serving("a").queue(&[(1, "b", D)]);
        world.quiet_since = world.now - GRACE / 2;
        assert_eq!(world.decide().decisions, expected, "{mode:?}");
    }
    // Idle unload: legacy waits for idle_ms alone, even when the grace is
    // longer.
    let mut world = World::new(Mode::Legacy, 16).serving("a");
    world.rules.idle = Duration::from_secs(1);
    world.quiet_since = world.now - Duration::from_secs(1);
    assert_eq!(world.decide().decisions, [Decision::Unload]);
    world.rules.mode = Mode::WaitFirst;
    assert_eq!(world.decide().decisions, []);
}

#[test]
fn legacy_queue_timeouts_fail_without_switching_and_free_the_head() {
    let mut world =
        World::new(Mode::Legacy, 16)
            .serving("a")
            .queue(&[(1, "b", D), (2, "a", D), (3, "a", D)]);
    world.queue[0].deadline = Some(world.now);
    world.queue[2].deadline = Some(world.now + Duration::from_secs(1));
    let plan = world.decide();
    assert_eq!(
        plan.decisions,
        [
            Decision::Fail((1, 1), Failure::QueueTimeout),
            Decision::Grant((1, 2)),
        ]
    );
    assert_eq!(plan.wake_at, world.queue[2].deadline);
}

#[test]
fn legacy_tiers_take_the_lock_first() {
    let world =
        World::new(Mode::Legacy, 16)
            .serving("a")
            .queue(&[(1, "a", F), (2, "a", D), (3, "b", P)]);
    // Priority B is the head: nothing for A, B loads once A is quiet (priority: no grace).
    assert_eq!(
        world.decide().decisions,
        switch("b", SwitchReason::QueueDrained, &[3])
    );
    let world = World::new(Mode::Legacy, 16)
        .serving("a")
        .queue(&[(1, "a", F), (2, "a", D)]);
    assert_eq!(world.decide().decisions, grants(&[2]));
}

#[test]
fn legacy_cache_order_reorders_only_the_run_at_the_head() {
    let mut world = World::new(Mode::Legacy, 16).serving("a").queue(&[
        (1, "a", D),
        (2, "a", D),
        (3, "b", D),
        (4, "a", D),
    ]);
    world.usable = true;
    assert_eq!(
        world.decide().decisions,
        [Decision::StartLookup(vec![(1, 1), (1, 2)])],
        "A4 is behind B3's place"
    );
    world.ranks = Some([((1, 1), 0.1), ((1, 2), 0.8), ((1, 4), 1.0)].into());
    assert_eq!(world.decide().decisions, grants(&[2]));
}

/// `cache_max_active` is a dispatch limit in legacy mode too (the spec: "The limit applies in
/// both scheduling modes"). With cache lookups usable, a ticket for the loaded model whose
/// predecessors have their headers (the lock is free) still waits while the generations in
/// flight fill the limit, and its round asks for a lookup only once a slot is free.
#[test]
fn legacy_cache_max_active_limits_dispatch_too() {
    let lookup = |ids: &[u64]| {
        vec![Decision::StartLookup(
            ids.iter().map(|id| (1, *id)).collect(),
        )]
    };
    // (cache_max_active, leases past their headers, queued tickets, decisions)
    type Case = (Option<usize>, usize, &'static [u64], Vec<Decision>);
    let cases: [Case; 7] = [
        (None, 1, &[1], grants(&[1])),
        (Some(1), 1, &[1], vec![]),
        (Some(1), 1, &[1, 2], vec![]),
        (Some(2), 1, &[1], grants(&[1])),
        (Some(2), 2, &[1], vec![]),
        (Some(2), 1, &[1, 2], lookup(&[1, 2])),
        (Some(1), 0, &[1, 2], lookup(&[1, 2])),
    ];
    for (cache_max_active, leases, ids, expected) in cases {
        let tickets: Vec<(u64, &str, ServiceTier)> = ids.iter().map(|id| (*id, "a", D)).collect();
        let mut world = World::new(Mode::Legacy, 16)
            .serving("a")
            .leases(leases)
            .queue(&tickets);
        world.usable = true;
        world.rules.cache_max_active = cache_max_active;
        assert_eq!(
            world.decide().decisions,
            expected,
            "cache_max_active {cache_max_active:?}, {leases} leases, queue {ids:?}"
        );
    }
    // Played out with one slot (the round's lookup already tried): the second ticket waits past
    // the first one's headers, where legacy mode alone would overlap them, and goes when the
    // first generation ends.
    let mut world = World::new(Mode::Legacy, 16)
        .serving("a")
        .queue(&[(1, "a", D), (2, "a", D)]);
    world.usable = true;
    world.tried = true;
    world.rules.cache_max_active = Some(1);
    let plan = world.decide();
    assert_eq!(plan.decisions, grants(&[1]));
    world.apply(&plan);
    world.header_waits = 0;
    assert_eq!(world.decide().decisions, [], "the slot is taken");
    world.leases = 0;
    assert_eq!(world.decide().decisions, grants(&[2]));
}

#[test]
fn legacy_the_head_joins_an_operator_load_of_its_model() {
    let world = World::new(Mode::Legacy, 16)
        .loading("a")
        .queue(&[(1, "a", D), (2, "a", D)]);
    assert_eq!(world.decide().decisions, [Decision::Admit((1, 1))]);
    let world = World::new(Mode::Legacy, 16)
        .loading("a")
        .queue(&[(1, "b", D), (2, "a", D)]);
    assert_eq!(
        world.decide().decisions,
        [],
        "another model waits at the head"
    );
}

// ---- timers, on tokio's paused clock ----------------------------------------

/// Runs the world until it has no decision and no timer left (or `limit` passes), sleeping
/// until each `wake_at` on the paused clock; returns when each decision happened.
async fn run_timers(world: &mut World, limit: Duration) -> Vec<(Duration, Decision)> {
    let start = Instant::now();
    let mut log = Vec::new();
    loop {
        world.now = Instant::now();
        let plan = world.decide();
        for decision in &plan.decisions {
            log.push((world.now - start, decision.clone()));
        }
        if !plan.decisions.is_empty() {
            world.apply(&plan);
            continue;
        }
        match plan.wake_at {
            Some(at) if at - start <= limit => tokio::time::sleep_until(at).await,
            _ => return log,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn grace_expiry_switches_exactly_when_the_quiet_period_ends() {
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "b", D)]);
    world.quiet_since = Instant::now();
    let log = run_timers(&mut world, Duration::from_secs(10)).await;
    assert_eq!(
        log[0],
        (
            GRACE,
            Decision::StartLoad {
                model: "b".into(),
                reason: Some(SwitchReason::GraceExpired)
            }
        )
    );
}

#[tokio::test(start_paused = true)]
async fn idle_unload_happens_after_idle_ms_of_quiet() {
    let mut world = World::new(Mode::WaitFirst, 16).serving("a");
    world.quiet_since = Instant::now();
    let log = run_timers(&mut world, IDLE * 2).await;
    assert_eq!(log, [(IDLE, Decision::Unload)]);
}

#[tokio::test(start_paused = true)]
async fn legacy_queue_ms_fails_a_ticket_stuck_behind_the_lock() {
    let mut world = World::new(Mode::Legacy, 16)
        .serving("a")
        .leases(1)
        .queue(&[(1, "a", D)]);
    world.header_waits = 1;
    world.queue[0].deadline = Some(Instant::now() + Duration::from_millis(500));
    let log = run_timers(&mut world, Duration::from_secs(10)).await;
    assert_eq!(
        log,
        [(
            Duration::from_millis(500),
            Decision::Fail((1, 1), Failure::QueueTimeout)
        )]
    );
}

/// Legacy `queue_ms` runs on through a cache lookup (the spec: "Legacy queue deadlines still
/// apply during lookup"): competitors whose deadline passes while their lookup runs fail at the
/// deadline, not when the lookup ends; the lookup holds nothing once its competition is gone
/// (the one ticket left is granted at once); and its late answer, for a queue that changed
/// meanwhile, sets no scores and changes nothing.
#[tokio::test(start_paused = true)]
async fn legacy_queue_ms_fails_tickets_while_their_lookup_runs() {
    let start = Instant::now();
    let queue_ms = Duration::from_millis(800);
    let mut world =
        World::new(Mode::Legacy, 16)
            .serving("a")
            .queue(&[(1, "a", D), (2, "a", D), (3, "a", D)]);
    world.usable = true;
    world.queue[0].deadline = Some(start + queue_ms);
    world.queue[1].deadline = Some(start + queue_ms);
    world.queue[2].deadline = Some(start + Duration::from_secs(5));
    assert_eq!(
        world.decide().decisions,
        [Decision::StartLookup(vec![(1, 1), (1, 2), (1, 3)])]
    );
    let mut cache = CacheState::default();
    cache.start(1, start + Duration::from_secs(3), [1].into());
    let mut log = Vec::new();
    // Bounded: a plan that wakes without deciding anything must not spin forever.
    for _ in 0..16 {
        if world.queue.is_empty() {
            break;
        }
        world.now = Instant::now();
        cache.expire(world.now);
        let view = cache.view(true);
        world.ranks = view.ranks.cloned();
        world.lookup_until = view.lookup_until;
        world.tried = view.tried;
        let plan = world.decide();
        if plan.decisions.is_empty() {
            let wake = plan.wake_at.expect("a deadline or the lookup's budget");
            assert!(wake - start <= Duration::from_secs(5), "{plan:?}");
            tokio::time::sleep_until(wake).await;
            continue;
        }
        for decision in &plan.decisions {
            log.push((world.now - start, decision.clone()));
        }
        // As the engine: a ticket leaving the queue discards the scores.
        cache.invalidate();
        world.apply(&plan);
    }
    assert_eq!(
        log,
        [
            (queue_ms, Decision::Fail((1, 1), Failure::QueueTimeout)),
            (queue_ms, Decision::Fail((1, 2), Failure::QueueTimeout)),
            (queue_ms, Decision::Grant((1, 3))),
        ]
    );
    assert!(cache.lookup.is_some(), "the lookup still runs");
    // Its answer comes late, for tickets that are gone.
    tokio::time::sleep_until(start + Duration::from_secs(2)).await;
    cache.answer(
        1,
        1,
        Some([((1, 1), 0.9), ((1, 2), 0.5), ((1, 3), 0.1)].into()),
    );
    assert!(cache.ranks.is_none() && cache.lookup.is_none());
    world.now = Instant::now();
    world.header_waits = 0;
    let view = cache.view(true);
    world.ranks = view.ranks.cloned();
    world.lookup_until = view.lookup_until;
    world.tried = view.tried;
    assert_eq!(world.decide().decisions, [], "nothing left to decide");
}

#[tokio::test(start_paused = true)]
async fn the_cooldown_refuses_launches_until_it_ends() {
    let mut world = World::new(Mode::WaitFirst, 16).queue(&[(1, "b", D)]);
    world
        .cooldowns
        .insert("b".into(), Instant::now() + Duration::from_secs(30));
    let log = run_timers(&mut world, Duration::from_secs(60)).await;
    assert_eq!(
        log,
        [(Duration::ZERO, Decision::Fail((1, 1), Failure::Cooldown))]
    );
    // A ticket that comes after the cooldown ends starts the launch.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let mut world = World {
        cooldowns: world.cooldowns.clone(),
        ..World::new(Mode::WaitFirst, 16).queue(&[(2, "b", D)])
    };
    let log = run_timers(&mut world, Duration::from_secs(1)).await;
    assert_eq!(
        log[0],
        (
            Duration::ZERO,
            Decision::StartLoad {
                model: "b".into(),
                reason: None
            }
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_lookup_that_outlives_its_budget_falls_back_to_arrival_order() {
    let budget = Duration::from_millis(1000);
    let start = Instant::now();
    let mut cache = CacheState::default();
    cache.start(1, start + budget, [1].into());
    let mut world = competing(None);
    loop {
        world.now = Instant::now();
        cache.expire(world.now);
        let view = cache.view(true);
        world.ranks = view.ranks.cloned();
        world.lookup_until = view.lookup_until;
        world.tried = view.tried;
        let plan = world.decide();
        if !plan.decisions.is_empty() {
            assert_eq!(plan.decisions, grants(&[1]));
            assert_eq!(Instant::now() - start, budget);
            return;
        }
        tokio::time::sleep_until(plan.wake_at.expect("the lookup's budget")).await;
    }
}

// ---- the next switch (what the weights prefetch reads) ----------------------

#[test]
fn the_next_switch_is_the_best_tiers_first_other_model_while_it_waits() {
    let mut cooling = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .leases(1)
        .queue(&[(1, "b", D)]);
    cooling
        .cooldowns
        .insert("b".into(), cooling.now + Duration::from_secs(5));
    let cases: Vec<(&str, World, Option<&str>)> = vec![
        (
            "b waits behind a's lease",
            World::new(Mode::WaitFirst, 16)
                .serving("a")
                .leases(1)
                .queue(&[(1, "b", D)]),
            Some("b"),
        ),
        (
            "a's own tickets come first, then b",
            World::new(Mode::WaitFirst, 1)
                .serving("a")
                .leases(1)
                .queue(&[(1, "a", D), (2, "b", D), (3, "c", D)]),
            Some("b"),
        ),
        (
            "the best tier decides: c is priority",
            World::new(Mode::WaitFirst, 16)
                .serving("a")
                .leases(1)
                .queue(&[(1, "b", F), (2, "c", P)]),
            Some("c"),
        ),
        (
            "legacy: b waits for a's responses",
            World::new(Mode::Legacy, 16)
                .serving("a")
                .leases(1)
                .queue(&[(1, "b", D)]),
            Some("b"),
        ),
        (
            "only the serving model waits",
            World::new(Mode::WaitFirst, 16)
                .serving("a")
                .leases(1)
                .queue(&[(1, "a", D)]),
            None,
        ),
        (
            "the switch starts now: b's own load is no time to prefetch",
            World::new(Mode::WaitFirst, 16)
                .serving("a")
                .queue(&[(1, "b", D)]),
            None,
        ),
        (
            "a load runs",
            World::new(Mode::WaitFirst, 16)
                .loading("a")
                .queue(&[(1, "a", D), (2, "b", D)]),
            None,
        ),
        (
            "nothing serves: b loads at once",
            World::new(Mode::WaitFirst, 16).queue(&[(1, "b", D)]),
            None,
        ),
        ("b's launch is cooling down", cooling, None),
    ];
    for (name, world, expected) in cases {
        let view = world.view();
        let plan = decide(&view);
        assert_eq!(next_switch(&view, &plan), expected, "{name}: {plan:?}");
    }
}

#[test]
fn the_next_switch_waits_out_the_grace_and_skips_failed_tickets() {
    let mut world = World::new(Mode::WaitFirst, 16)
        .serving("a")
        .queue(&[(1, "b", D)]);
    world.quiet_since = world.now;
    let view = world.view();
    let plan = decide(&view);
    assert_eq!(plan.decisions, []);
    assert_eq!(
        next_switch(&view, &plan),
        Some("b"),
        "grace holds the switch"
    );

    // Legacy: b's queue_ms has passed, so b fails instead of going next.
    let mut world = World::new(Mode::Legacy, 16)
        .serving("a")
        .leases(1)
        .queue(&[(1, "b", D)]);
    world.queue[0].deadline = Some(world.now);
    let view = world.view();
    let plan = decide(&view);
    assert_eq!(next_switch(&view, &plan), None, "{plan:?}");
}

#[test]
fn every_switch_and_unload_says_why() {
    let start = |reason| Decision::StartLoad {
        model: "b".into(),
        reason,
    };
    assert_eq!(start(None).switch_reason(), None, "a load from nothing");
    assert_eq!(
        start(Some(SwitchReason::BoundDue)).switch_reason(),
        Some(SwitchReason::BoundDue)
    );
    assert_eq!(Decision::Unload.switch_reason(), Some(SwitchReason::Idle));
    assert_eq!(
        Decision::CancelLoad.switch_reason(),
        Some(SwitchReason::Abandoned)
    );
    assert_eq!(Decision::Grant((1, 1)).switch_reason(), None);
    // The label values `/metrics` writes are these, in this order.
    let labels: Vec<&str> = SwitchReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, strata_protocol::wire::SWITCH_REASONS);
}

/// The hold bound never falls below 1.5 load times of the two models
/// involved (the longer one), learned or, before that, `startup_ms`.
#[test]
fn the_hold_bound_has_a_floor_of_one_and_a_half_load_times() {
    let secs = Duration::from_secs;
    let world = |waited: Duration, b_load: Option<Duration>| {
        let mut world = World::new(Mode::WaitFirst, 16)
            .serving("a")
            .queue(&[(1, "b", D), (2, "a", D)]);
        world.rules.hold_max = Some(secs(5));
        world.load_times.insert("a".into(), secs(4));
        world.load_times.insert("c".into(), secs(9));
        match b_load {
            Some(load) => world.load_times.insert("b".into(), load),
            None => world.load_times.remove("b"),
        };
        world.queue[0].arrived_at = world.now - waited;
        world.ready_since = world.now - secs(600);
        world.quiet_since = world.now;
        world
    };
    // (b waited, b's learned load, decisions, when to look again)
    let cases = [
        // The floor is 1.5 x b's 10 s load: the 5 s bound is not due at 14 s.
        (secs(14), Some(secs(10)), grants(&[2]), Some(secs(1))),
        (
            secs(15),
            Some(secs(10)),
            switch("b", SwitchReason::BoundDue, &[1]),
            None,
        ),
        // a's 4 s load is the longer: the floor is 6 s.
        (secs(5), Some(secs(2)), grants(&[2]), Some(secs(1))),
        (
            secs(6),
            Some(secs(2)),
            switch("b", SwitchReason::BoundDue, &[1]),
            None,
        ),
        // b never loaded: its load counts the longest learned one (c's 9 s).
        (
            secs(13),
            None,
            grants(&[2]),
            Some(Duration::from_millis(500)),
        ),
        (
            secs(14),
            None,
            switch("b", SwitchReason::BoundDue, &[1]),
            None,
        ),
    ];
    for (waited, b_load, expected, wake_in) in cases {
        let world = world(waited, b_load);
        let plan = world.decide();
        assert_eq!(plan.decisions, expected, "waited {waited:?}, b {b_load:?}");
        // Inside the grace, the wake-up is the bound's (the grace's is 2 s).
        if let Some(wake_in) = wake_in {
            assert_eq!(plan.wake_at, Some(world.now + wake_in), "waited {waited:?}");
        }
    }
    // Before anything was learned, a load counts the unlearned share (120 s
    // here); a bound above the floor is the bound.
    let rules = rules(Mode::WaitFirst, 16);
    let nothing = BTreeMap::new();
    assert_eq!(
        rules.effective_hold(secs(60), &nothing, "a", "b"),
        secs(180)
    );
    let loads: BTreeMap<String, Duration> = [("a".to_owned(), secs(4))].into();
    assert_eq!(rules.effective_hold(secs(1), &loads, "a", "b"), secs(6));
    let loads: BTreeMap<String, Duration> =
        [("a".to_owned(), secs(4)), ("b".to_owned(), secs(8))].into();
    assert_eq!(rules.effective_hold(secs(60), &loads, "a", "b"), secs(60));
    assert_eq!(rules.effective_hold(secs(5), &loads, "b", "a"), secs(12));
}

/// Fair hold: once the bound falls due for a ticket T, the serving model is
/// granted only its own tickets of T's tier that arrived before T, then
/// gives way without grace; its later tickets and lower tiers wait.
#[test]
fn past_the_bound_the_serving_model_finishes_what_arrived_before_the_due_ticket() {
    let secs = Duration::from_secs;
    let world = |queue: &[(u64, &str, ServiceTier)], leases: usize, max_pending: usize| {
        let mut world = World::new(Mode::WaitFirst, max_pending)
            .serving("a")
            .leases(leases)
            .queue(queue);
        world.rules.hold_max = Some(secs(10));
        let due = world
            .queue
            .iter_mut()
            .find(|ticket| ticket.model == "b")
            .unwrap();
        due.arrived_at = world.now - secs(10);
        world.quiet_since = world.now;
        world
    };
    // (queue, leases, max_pending, decisions)
    type Queue<'a> = &'a [(u64, &'a str, ServiceTier)];
    let cases: [(Queue, usize, usize, Vec<Decision>); 6] = [
        // a's tickets 1 and 2 came before b's 3: granted; 4 (later) and 5
        // (flex) wait, and so does the switch, for the leases.
        (
            &[
                (1, "a", D),
                (2, "a", D),
                (3, "b", D),
                (4, "a", D),
                (5, "a", F),
            ],
            0,
            16,
            grants(&[1, 2]),
        ),
        // Their leases run: nothing more for a, no switch yet.
        (&[(3, "b", D), (4, "a", D), (5, "a", F)], 2, 16, vec![]),
        // They ended: b goes, without grace.
        (
            &[(3, "b", D), (4, "a", D), (5, "a", F)],
            0,
            16,
            switch("b", SwitchReason::BoundDue, &[3]),
        ),
        // One slot: the earlier ticket takes it, the next earlier one waits
        // for it (never the later one).
        (
            &[(1, "a", D), (2, "a", D), (3, "b", D), (4, "a", D)],
            0,
            1,
            grants(&[1]),
        ),
        (&[(2, "a", D), (3, "b", D), (4, "a", D)], 1, 1, vec![]),
        // A due priority ticket: a's default tickets are of another tier.
        (
            &[(1, "a", D), (2, "b", P)],
            0,
            16,
            switch("b", SwitchReason::BoundDue, &[2]),
        ),
    ];
    for (queue, leases, max_pending, expected) in cases {
        let plan = world(queue, leases, max_pending).decide();
        assert_eq!(plan.decisions, expected, "{queue:?}, {leases} leases");
    }
    // A cache lookup deferring the earlier tickets' grants is no reason to
    // switch: the lookup first, then they go.
    let mut deferred = world(&[(1, "a", D), (2, "a", D), (3, "b", D)], 0, 1);
    deferred.usable = true;
    assert_eq!(
        deferred.decide().decisions,
        [Decision::StartLookup(vec![(1, 1), (1, 2)])]
    );
}
