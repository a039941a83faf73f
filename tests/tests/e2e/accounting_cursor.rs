//! `GET /requests` through the real proxy and supervisor: ring eviction and every cursor case
//! of "Reading recent records" (after=0 with a dropped count, a cursor inside the ring, at its
//! end and beyond it, no cursor, limit defaults and clamping, bad values), `oldest_seq`,
//! `next_seq` as the next cursor, and reads that never drain. The ring's own unit tests
//! (`supervisor/src/accounting/ring.rs`) cover the same table on the data structure; these
//! check it end to end, with the proxy's query parsing in front.

use strata_e2e::accounting::{Page, all_records, page, record_count, rejections, wait_records};
use strata_e2e::http;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, ModelSpec};

const A: &str = "flash-a";

/// `(seqs, next_seq, dropped, oldest_seq)` of a page.
fn shape(page: &Page) -> (Vec<u64>, u64, u64, Option<u64>) {
    (
        page.seqs(),
        page.next_seq(),
        page.dropped(),
        page.oldest_seq(),
    )
}

#[test]
fn eviction_and_every_cursor_case() {
    let config = ConfigBuilder::new("acct-cursor")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .set("request_log_capacity", 3)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();

    // An empty ring: next_seq 0 without a cursor, the cursor itself with one.
    assert_eq!(shape(&page(addr, "")), (vec![], 0, 0, None));
    assert_eq!(shape(&page(addr, "after=0")), (vec![], 0, 0, None));
    assert_eq!(shape(&page(addr, "after=7&limit=3")), (vec![], 7, 0, None));
    let instance = page(addr, "").instance_id().to_owned();

    // Five records in a ring of three: 1 and 2 are evicted.
    rejections(addr, 5);
    wait_records(addr, 5);
    let q = |query: &str| shape(&page(addr, query));
    // after=0: what is left, and how many after the cursor were lost.
    assert_eq!(q("after=0"), (vec![3, 4, 5], 5, 2, Some(3)));
    assert_eq!(q("after=1"), (vec![3, 4, 5], 5, 1, Some(3)));
    assert_eq!(q("after=2"), (vec![3, 4, 5], 5, 0, Some(3)));
    // Inside the ring.
    assert_eq!(q("after=3"), (vec![4, 5], 5, 0, Some(3)));
    assert_eq!(q("after=4"), (vec![5], 5, 0, Some(3)));
    // At the end and beyond it: nothing, and next_seq is the cursor itself.
    assert_eq!(q("after=5"), (vec![], 5, 0, Some(3)));
    assert_eq!(q("after=100"), (vec![], 100, 0, Some(3)));
    assert_eq!(
        q("after=18446744073709551615"),
        (vec![], u64::MAX, 0, Some(3))
    );
    // dropped does not depend on the page limit; next_seq is the last returned record.
    assert_eq!(q("after=0&limit=2"), (vec![3, 4], 4, 2, Some(3)));
    assert_eq!(q("after=1&limit=1"), (vec![3], 3, 1, Some(3)));
    // No cursor: the newest `limit` records (default 100), dropped 0.
    assert_eq!(q(""), (vec![3, 4, 5], 5, 0, Some(3)));
    assert_eq!(q("limit=2"), (vec![4, 5], 5, 0, Some(3)));
    assert_eq!(q("limit=1"), (vec![5], 5, 0, Some(3)));
    // limit clamps to 1..=1000.
    assert_eq!(q("after=0&limit=0"), (vec![3], 3, 2, Some(3)));
    assert_eq!(q("limit=0"), (vec![5], 5, 0, Some(3)));
    assert_eq!(q("after=0&limit=5000"), (vec![3, 4, 5], 5, 2, Some(3)));
    // Unknown parameters are ignored; the order of the known ones does not matter.
    assert_eq!(q("limit=1&x=y&after=3"), (vec![4], 4, 0, Some(3)));

    // next_seq is the next cursor: walking with limit=1 visits each record once.
    let mut after = 0;
    let mut walked = Vec::new();
    loop {
        let page = page(addr, &format!("after={after}&limit=1"));
        if page.records.is_empty() {
            assert_eq!(page.next_seq(), after);
            break;
        }
        walked.extend(page.seqs());
        after = page.next_seq();
    }
    assert_eq!(walked, [3, 4, 5]);

    // Bad values: 400 with the OpenAI error shape, and no record.
    for query in [
        "after=-1",
        "after=x",
        "after=",
        "after",
        "after=1.0",
        "after=1e3",
        "after=18446744073709551616",
        "limit=1.5",
        "limit=-3",
        "limit=x",
        "after=1&limit=",
    ] {
        let response = http::get(addr, &format!("/requests?{query}"));
        assert_eq!(response.status, 400, "{query}: {response}");
        assert_eq!(
            response.error().code,
            "invalid_query",
            "{query}: {response}"
        );
    }
    assert_eq!(record_count(addr), 5, "bad queries make no record");

    // Reads never drain: the same answer, byte for byte, every time.
    let first = page(addr, "after=0").raw;
    for _ in 0..3 {
        assert_eq!(page(addr, "after=0").raw, first);
    }
    let metrics = stack.metrics().request_log;
    assert_eq!(
        (
            metrics.evicted,
            metrics.records_in_ring,
            metrics.next_seq,
            metrics.capacity
        ),
        (Some(2), Some(3), Some(6), 3),
        "{metrics:?}"
    );

    // A reader's cursor goes stale while the ring moves on: seq 5 is evicted before it
    // reads again, so dropped says one record after its cursor was lost.
    rejections(addr, 3);
    wait_records(addr, 8);
    assert_eq!(q("after=4"), (vec![6, 7, 8], 8, 1, Some(6)));
    assert_eq!(q("after=5"), (vec![6, 7, 8], 8, 0, Some(6)));
    assert_eq!(q("after=0"), (vec![6, 7, 8], 8, 5, Some(6)));

    // Every page names the same instance; request IDs carry it.
    assert_eq!(page(addr, "after=0").instance_id(), instance);
    for rec in all_records(addr) {
        assert!(rec.request_id.starts_with(&format!("{instance}-")), "{rec}");
    }
    assert_eq!(stack.status().instance_id, instance);
    assert_eq!(
        stack.metrics().request_log.instance_id.as_deref(),
        Some(instance.as_str())
    );
    stack.stop();
}

/// Pages hold at most 1000 records: `limit` above that is clamped, and the default is 100.
#[test]
fn limit_defaults_to_100_and_clamps_to_1000() {
    let config = ConfigBuilder::new("acct-limit")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();
    rejections(addr, 1001);
    wait_records(addr, 1001);
    let seqs = |query: &str| page(addr, query).seqs();
    assert_eq!(seqs("after=0"), (1..=100).collect::<Vec<u64>>());
    assert_eq!(seqs(""), (902..=1001).collect::<Vec<u64>>());
    assert_eq!(seqs("after=0&limit=5000"), (1..=1000).collect::<Vec<u64>>());
    assert_eq!(seqs("after=0&limit=1000"), (1..=1000).collect::<Vec<u64>>());
    assert_eq!(seqs("limit=5000"), (2..=1001).collect::<Vec<u64>>());
    assert_eq!(seqs("after=1000&limit=5000"), [1001]);
    let full = page(addr, "after=0&limit=1000");
    assert_eq!((full.next_seq(), full.dropped()), (1000, 0));
    assert_eq!(all_records(addr).len(), 1001);
    stack.stop();
}
