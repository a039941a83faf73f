//! `prefetch_predict` in the engine, driven by hand (the harness of
//! `tests.rs`): what the engine wants read ahead while nothing is next,
//! and that the real plan takes over from the prediction at once.

use std::time::Duration;

use serde_json::json;
use strata_test_support::config::ModelSpec;

use super::tests::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Models a (no weights), b and c (weights), wait-first without grace. b
/// was requested, then a loads: with `prefetch_predict` the engine wants b
/// read ahead while a serves; a ticket for c that waits takes over at once
/// (the plan's own next model); once it left, c (now the most recent
/// request) is predicted, also while a is idle; a load withdraws the
/// prediction, and with b loaded c is predicted. Without the key nothing is
/// ever wished for while nothing waits.
#[test]
fn the_engine_reads_ahead_the_likely_next_model_while_nothing_waits() {
    for predict in [true, false] {
        let mut h = Harness::new(move |builder| {
            builder
                .model(ModelSpec::new("c"))
                .set("prefetch_predict", predict)
                .edit(|doc| {
                    doc["models"]["b"]["weights"] = json!(["/w/b"]);
                    doc["models"]["c"]["weights"] = json!(["/w/c"]);
                })
        });
        h.connect(1);
        h.enqueue(1, 1, "b");
        let load = h.op();
        h.verify(load);
        h.finish(1, 1);
        assert_eq!(h.engine.prefetching(), None, "nothing else was requested");

        h.advance(SECOND);
        h.enqueue(1, 2, "a");
        let switch = h.op();
        assert_eq!(h.engine.prefetching(), None, "a's load runs");
        h.verify(switch);
        if !predict {
            assert_eq!(h.engine.prefetching(), None, "prefetch_predict off");
            h.finish(1, 2);
            h.advance(SECOND);
            assert_eq!(h.engine.prefetching(), None, "prefetch_predict off");
            continue;
        }
        assert_eq!(
            h.engine.prefetching_predicted(),
            Some("b"),
            "a serves, b was requested"
        );

        h.advance(SECOND);
        h.enqueue(1, 3, "c");
        assert_eq!(
            (h.engine.prefetching(), h.engine.prefetching_predicted()),
            (Some("c"), None),
            "c waits for a's lease: the plan's next model"
        );
        h.finish(1, 3);
        assert_eq!(
            h.engine.prefetching_predicted(),
            Some("c"),
            "c's client left; c is the most recent request"
        );
        h.finish(1, 2);
        h.advance(SECOND);
        assert_eq!(h.engine.prefetching_predicted(), Some("c"), "a idles");

        h.enqueue(1, 4, "b");
        let switch = h.op();
        assert_eq!(h.engine.prefetching(), None, "b's load runs");
        h.verify(switch);
        assert_eq!(
            h.engine.prefetching_predicted(),
            Some("c"),
            "b serves: never the loaded model"
        );
    }
}
