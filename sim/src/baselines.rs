//! What users would otherwise run, as decision functions over the same
//! [`View`] the router's [`decide`](strata_scheduler::decide) reads, so the simulator
//! applies all of them the same way.
//!
//! - [`fifo`]: strict arrival order, one model at a time (Ollama's
//!   scheduler with one loaded model): the head of the queue goes next;
//!   requests behind it for the loaded model run alongside it only while
//!   no request for another model is ahead of them.
//! - [`collate`]: every waiting request for the loaded model first, then
//!   the oldest request's model once the loaded one has no work (llama-swap's
//!   run loop): no grace, no tiers.
//!
//! Both dispatch within the router's limits (`max_pending`, and
//! `cache_max_active` when cache lookups are on), unload after `idle_ms`
//! without work, and know no tiers, grace, cache order or queue deadline.

use strata_scheduler::{BackendView, Decision, Plan, SwitchReason, View, Waiting};

/// The router's dispatch limits apply to every policy alike, so the
/// comparison is of order alone.
pub fn dispatch_limit(rules: &strata_scheduler::Rules) -> usize {
    rules
        .cache_max_active
        .map_or(rules.max_pending, |cache| cache.min(rules.max_pending))
        .max(1)
}

fn free(view: &View, admitted: usize) -> usize {
    dispatch_limit(view.rules).saturating_sub(view.leases + admitted)
}

/// Unloads after `idle_ms` of quiet with nothing to do.
fn idle(view: &View, plan: &mut Plan) {
    if !matches!(view.backend, BackendView::Serving { .. }) || view.leases > 0 {
        return;
    }
    let due = view.quiet_since + view.rules.idle;
    if view.now >= due {
        plan.decisions.push(Decision::Unload);
    } else {
        plan.wake_at = Some(due);
    }
}

fn waiting<'a>(view: &View<'a>) -> Vec<&'a Waiting> {
    view.queue
        .iter()
        .filter(|ticket| !ticket.admitted)
        .collect()
}

/// Starts `model`'s load and admits its first `limit` waiting tickets. The
/// baselines switch as soon as the loaded model has nothing running, with
/// no grace: a switch's reason is always `queue_drained`.
fn load<'a>(
    view: &View,
    plan: &mut Plan,
    group: impl Iterator<Item = &'a Waiting>,
    model: &str,
    limit: usize,
) {
    let reason =
        matches!(view.backend, BackendView::Serving { .. }).then_some(SwitchReason::QueueDrained);
    plan.decisions.push(Decision::StartLoad {
        model: model.to_owned(),
        reason,
    });
    for ticket in group.take(limit) {
        plan.decisions.push(Decision::Admit(ticket.key));
    }
}

/// Strict arrival order, one model at a time.
pub fn fifo(view: &View) -> Plan {
    let mut plan = Plan::default();
    let admitted = view.queue.len() - waiting(view).len();
    let waiting = waiting(view);
    let Some(head) = waiting.first() else {
        if admitted == 0 {
            idle(view, &mut plan);
        }
        return plan;
    };
    // The run of requests for the head's model at the front of the queue.
    let run = || {
        waiting
            .iter()
            .copied()
            .take_while(|t| t.model == head.model)
    };
    let slots = free(view, admitted);
    match view.backend {
        BackendView::Serving { model } if model == head.model => {
            for ticket in run().take(slots) {
                plan.decisions.push(Decision::Grant(ticket.key));
            }
        }
        BackendView::Loading { model } if model == head.model => {
            for ticket in run().take(slots) {
                plan.decisions.push(Decision::Admit(ticket.key));
            }
        }
        BackendView::Serving { .. } | BackendView::Empty if view.leases == 0 && admitted == 0 => {
            load(
                view,
                &mut plan,
                run(),
                &head.model,
                dispatch_limit(view.rules),
            );
        }
        _ => {}
    }
    plan
}

/// The loaded model's requests first, then the oldest other model's.
pub fn collate(view: &View) -> Plan {
    let mut plan = Plan::default();
    let admitted = view.queue.len() - waiting(view).len();
    let waiting = waiting(view);
    let Some(oldest) = waiting.first() else {
        if admitted == 0 {
            idle(view, &mut plan);
        }
        return plan;
    };
    let of = |model: &str| {
        let model = model.to_owned();
        waiting
            .clone()
            .into_iter()
            .filter(move |t| t.model == model)
    };
    let slots = free(view, admitted);
    match view.backend {
        BackendView::Serving { model } => {
            let mine: Vec<&Waiting> = of(model).collect();
            for ticket in mine.iter().take(slots) {
                plan.decisions.push(Decision::Grant(ticket.key));
            }
            if mine.is_empty() && view.leases == 0 && admitted == 0 {
                load(
                    view,
                    &mut plan,
                    of(&oldest.model),
                    &oldest.model,
                    dispatch_limit(view.rules),
                );
            }
        }
        BackendView::Loading { model } => {
            for ticket in of(model).take(slots) {
                plan.decisions.push(Decision::Admit(ticket.key));
            }
        }
        BackendView::Empty if view.leases == 0 => {
            load(
                view,
                &mut plan,
                of(&oldest.model),
                &oldest.model,
                dispatch_limit(view.rules),
            );
        }
        BackendView::Empty | BackendView::Busy => {}
    }
    plan
}
