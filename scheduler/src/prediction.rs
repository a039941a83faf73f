//! The model read ahead before anyone asks (`prefetch_predict`): when the
//! plan names no model next, which model the weights prefetch reads
//! instead, or why none.
//!
//! A pure step over the caller's facts and the [`Forecast`] of the ticket
//! arrivals it has seen. It names a model only while no request waits for a
//! model other than the serving one (nothing serving: while none waits at
//! all), no load or stop runs, no operator `on`/`off` runs, routing is on and
//! no drain or restart holds the engine. The model is the forecast's likely
//! next (the rule is in [`crate::forecast`]) among the candidates the caller
//! gives (the supervisor's: enabled and prepared, with a weights list) that
//! are not cooling down after a failed start. The real plan always comes
//! first: the caller asks only when it names nothing. The engine and the
//! simulator both run this step, so `strata-ctl simulate` predicts by the
//! engine's rule.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use crate::{Forecast, Waiting};

/// The forecast and the models it may name.
#[derive(Debug)]
pub struct Prediction {
    forecast: Forecast,
    /// Enabled and prepared models with a weights list.
    candidates: BTreeSet<String>,
}

/// What the prediction looks at besides the forecast.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub serving: Option<&'a str>,
    /// Every ticket not yet granted.
    pub queue: &'a [Waiting],
    /// A load or stop runs.
    pub op_running: bool,
    /// An operator `on` or `off` runs.
    pub operator_running: bool,
    pub routing: bool,
    /// A drain runs, or the drain or a restart holds the round.
    pub held: bool,
    /// Per model: no launch of it before this.
    pub cooldowns: &'a BTreeMap<String, Instant>,
}

/// Why no model is predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpredicted {
    RequestWaits,
    OpRuns,
    Operator,
    RoutingOff,
    Held,
    NoCandidate,
}

impl Unpredicted {
    pub fn as_str(self) -> &'static str {
        match self {
            Unpredicted::RequestWaits => "a request waits for another model",
            Unpredicted::OpRuns => "a load or stop runs",
            Unpredicted::Operator => "an operator on or off runs",
            Unpredicted::RoutingOff => "routing is off",
            Unpredicted::Held => "the router drains or restarts the backend",
            Unpredicted::NoCandidate => {
                "no other model with weights was requested in the last hour"
            }
        }
    }
}

impl Prediction {
    /// A prediction that may name `candidates`.
    pub fn new(candidates: BTreeSet<String>) -> Prediction {
        Prediction {
            forecast: Forecast::new(),
            candidates,
        }
    }

    /// The models it may name.
    pub fn candidates(&self) -> &BTreeSet<String> {
        &self.candidates
    }

    /// A request for `model` arrived (the engine numbered its ticket).
    pub fn arrive(&mut self, model: &str, at: Instant) {
        self.forecast.arrive(model, at);
    }

    /// The model to read ahead at `now`, or why none.
    pub fn next(&mut self, facts: &Facts<'_>, now: Instant) -> Result<&str, Unpredicted> {
        if facts.held {
            return Err(Unpredicted::Held);
        }
        if !facts.routing {
            return Err(Unpredicted::RoutingOff);
        }
        if facts.operator_running {
            return Err(Unpredicted::Operator);
        }
        if facts.op_running {
            return Err(Unpredicted::OpRuns);
        }
        if facts
            .queue
            .iter()
            .any(|ticket| Some(ticket.model.as_str()) != facts.serving)
        {
            return Err(Unpredicted::RequestWaits);
        }
        let candidates = &self.candidates;
        let cooling = |model: &str| facts.cooldowns.get(model).is_some_and(|until| *until > now);
        self.forecast
            .likely_next(now, facts.serving, |model| {
                candidates.contains(model) && !cooling(model)
            })
            .ok_or(Unpredicted::NoCandidate)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use strata_protocol::wire::ServiceTier;

    use super::*;

    /// b and c can be read ahead; a and d cannot (the supervisor's: a has
    /// no weights, d is not enabled).
    fn prediction() -> Prediction {
        Prediction::new(["b".to_owned(), "c".to_owned()].into())
    }

    fn ticket(model: &str, at: Instant) -> Waiting {
        Waiting {
            key: (1, 1),
            model: model.into(),
            tier: ServiceTier::Default,
            arrival: 1,
            arrived_at: at,
            deadline: None,
            admitted: false,
        }
    }

    fn facts<'a>(
        serving: Option<&'a str>,
        queue: &'a [Waiting],
        cooldowns: &'a BTreeMap<String, Instant>,
    ) -> Facts<'a> {
        Facts {
            serving,
            queue,
            op_running: false,
            operator_running: false,
            routing: true,
            held: false,
            cooldowns,
        }
    }

    /// The forecast's model, among the candidates, other than the serving
    /// one, and only while nothing else is going on; each reason said.
    #[test]
    fn each_fact_that_rules_the_prediction_out() {
        let mut prediction = prediction();
        let start = Instant::now();
        let now = start + Duration::from_secs(60);
        let none = BTreeMap::new();
        // Nothing asked for yet.
        assert_eq!(
            prediction.next(&facts(Some("a"), &[], &none), now),
            Err(Unpredicted::NoCandidate)
        );
        for model in ["a", "a", "a", "d", "d", "d", "c", "b", "b"] {
            prediction.arrive(model, start);
        }
        // a and d are heavier but cannot be read ahead; b beats c.
        assert_eq!(prediction.next(&facts(Some("a"), &[], &none), now), Ok("b"));
        assert_eq!(prediction.next(&facts(None, &[], &none), now), Ok("b"));
        assert_eq!(
            prediction.next(&facts(Some("b"), &[], &none), now),
            Ok("c"),
            "never the serving model"
        );
        // A ticket for the serving model changes nothing; one for another
        // model (or any, with nothing serving) rules it out.
        let for_a = [ticket("a", now)];
        assert_eq!(
            prediction.next(&facts(Some("a"), &for_a, &none), now),
            Ok("b")
        );
        assert_eq!(
            prediction.next(&facts(None, &for_a, &none), now),
            Err(Unpredicted::RequestWaits)
        );
        let for_c = [ticket("c", now)];
        assert_eq!(
            prediction.next(&facts(Some("a"), &for_c, &none), now),
            Err(Unpredicted::RequestWaits)
        );
        // b cools down after a failed start: c instead, until it is over.
        let cooling = BTreeMap::from([("b".to_owned(), now + Duration::from_secs(1))]);
        assert_eq!(
            prediction.next(&facts(Some("a"), &[], &cooling), now),
            Ok("c")
        );
        assert_eq!(
            prediction.next(
                &facts(Some("a"), &[], &cooling),
                now + Duration::from_secs(1)
            ),
            Ok("b")
        );
        type Edit = fn(&mut Facts<'_>);
        let cases: [(Edit, Unpredicted); 4] = [
            (|facts| facts.op_running = true, Unpredicted::OpRuns),
            (|facts| facts.operator_running = true, Unpredicted::Operator),
            (|facts| facts.routing = false, Unpredicted::RoutingOff),
            (|facts| facts.held = true, Unpredicted::Held),
        ];
        for (edit, why) in cases {
            let mut facts = facts(Some("a"), &[], &none);
            edit(&mut facts);
            assert_eq!(prediction.next(&facts, now), Err(why));
        }
    }
}
