//! The private supervisor socket of the real `strata-supervisor` under misuse: refused hellos,
//! malformed and oversized frames, and draining flags. The daemon must keep serving.

use std::time::Duration;

use strata_e2e::{ConfigBuilder, DEADLINE, FakeProxy, ModelSpec, Supervisor, poll_until};
use strata_protocol::wire::{
    LeaseFailure, MAX_FRAME_BYTES, PROTOCOL_VERSION, ProxyMessage, RefuseReason, ServiceTier,
    SupervisorMessage, decode_payload, encode_frame,
};

const A: &str = "flash-a";

fn supervisor(tag: &str) -> Supervisor {
    Supervisor::start(ConfigBuilder::new(tag).model(ModelSpec::new(A)).build())
}

/// A hello with another fingerprint or protocol version, a first frame that is not a hello,
/// and an undecodable hello are each refused with a reason, and the connection closed.
#[tokio::test]
async fn bad_hellos_are_refused_and_closed() {
    let supervisor = supervisor("badhello");
    let socket = supervisor.config.supervisor_socket.clone();
    let fingerprint = supervisor.config.fingerprint();

    let mut proxy = FakeProxy::open(&socket).await;
    let reason = proxy
        .hello(PROTOCOL_VERSION, fingerprint ^ 1)
        .await
        .expect_err("a wrong fingerprint is refused");
    assert_eq!(reason, RefuseReason::Fingerprint.to_string());
    assert!(proxy.wait_closed(DEADLINE).await, "closed after Refused");

    let mut proxy = FakeProxy::open(&socket).await;
    let reason = proxy
        .hello(PROTOCOL_VERSION + 1, fingerprint)
        .await
        .expect_err("another protocol version is refused");
    let expected = RefuseReason::ProtocolVersion {
        proxy: PROTOCOL_VERSION + 1,
        supervisor: PROTOCOL_VERSION,
    };
    assert_eq!(reason, expected.to_string());
    assert!(proxy.wait_closed(DEADLINE).await);

    let mut proxy = FakeProxy::open(&socket).await;
    proxy.acquire(1, A).await;
    assert_eq!(
        proxy.next_message(DEADLINE).await,
        Ok(RefuseReason::NotAHello.into())
    );
    assert!(proxy.wait_closed(DEADLINE).await);

    let mut proxy = FakeProxy::open(&socket).await;
    proxy.send_raw(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).await;
    // The reason carries the decoder's own error for this payload.
    let error = decode_payload::<ProxyMessage>(&[0xff, 0xff, 0xff]).expect_err("not a message");
    assert_eq!(
        proxy.next_message(DEADLINE).await,
        Ok(RefuseReason::BadHello(error.to_string()).into())
    );
    assert!(proxy.wait_closed(DEADLINE).await);

    // Nothing was registered, and a good proxy still gets in.
    assert_eq!(supervisor.status().proxies, 0);
    let proxy = supervisor.proxy().await;
    let welcome = proxy.welcome().expect("welcomed").clone();
    assert_eq!(welcome.supervisor_pid, supervisor.pid());
    assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
    assert_eq!(supervisor.status().instance_id, welcome.instance_id);
    assert_eq!(supervisor.status().proxies, 1);
    drop(proxy);
    supervisor.stop();
}

/// After a good hello, an undecodable frame (and a second hello) gets `ProtocolError` and the
/// connection stays usable for leases.
#[tokio::test]
async fn a_garbage_frame_gets_a_protocol_error_and_the_link_stays_usable() {
    let supervisor = supervisor("garbage");
    let mut proxy = supervisor.proxy().await;

    for garbage in [
        &[0u8, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff][..],
        &[0, 0, 0, 0],
    ] {
        proxy.send_raw(garbage).await;
        match proxy
            .wait_for(DEADLINE, "ProtocolError", |message| {
                matches!(message, SupervisorMessage::ProtocolError { .. })
            })
            .await
        {
            SupervisorMessage::ProtocolError { message } => {
                assert!(message.starts_with("malformed frame"), "{message}");
            }
            _ => unreachable!(),
        }
    }
    // A valid message that does not decode as a proxy message: trailing bytes.
    let mut frame = encode_frame(&ProxyMessage::HeadersReceived { ticket: 9 }).expect("encode");
    frame.push(0);
    let len = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    proxy.send_raw(&frame).await;
    proxy
        .wait_for(DEADLINE, "ProtocolError for trailing bytes", |message| {
            matches!(message, SupervisorMessage::ProtocolError { .. })
        })
        .await;
    proxy
        .send(&ProxyMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            fingerprint: supervisor.config.fingerprint(),
            pid: std::process::id(),
        })
        .await;
    match proxy
        .wait_for(DEADLINE, "ProtocolError for a second hello", |message| {
            matches!(message, SupervisorMessage::ProtocolError { .. })
        })
        .await
    {
        SupervisorMessage::ProtocolError { message } => {
            assert_eq!(message, "hello was already accepted");
        }
        _ => unreachable!(),
    }

    proxy.acquire(1, "no-such-model").await;
    assert_eq!(proxy.wait_failed(1).await, LeaseFailure::UnknownModel);
    proxy.acquire_tier(2, A, ServiceTier::Priority).await;
    let grant = proxy.wait_granted(2).await;
    assert_eq!(grant.upstream_model, "up-flash-a");
    proxy.release(2).await;
    drop(proxy);
    supervisor.stop();
}

/// A length prefix over the frame limit closes the connection (before or after the hello);
/// the daemon keeps serving other proxies and the control socket.
#[tokio::test]
async fn an_oversized_length_prefix_closes_the_connection() {
    let supervisor = supervisor("oversize");
    let oversized = (MAX_FRAME_BYTES + 1).to_be_bytes();

    let mut before_hello = FakeProxy::open(&supervisor.config.supervisor_socket).await;
    before_hello.send_raw(&oversized).await;
    assert!(before_hello.wait_closed(DEADLINE).await);
    assert!(
        before_hello.welcome().is_none()
            && !before_hello
                .history()
                .iter()
                .any(|message| matches!(message, SupervisorMessage::Welcome { .. })),
        "{:?}",
        before_hello.history()
    );

    let mut proxy = supervisor.proxy().await;
    let mut bystander = supervisor.proxy().await;
    poll_until(DEADLINE, "two proxies", || supervisor.status().proxies == 2);
    proxy.send_raw(&oversized).await;
    assert!(proxy.wait_closed(DEADLINE).await, "connection stays open");
    poll_until(DEADLINE, "the closed proxy to be forgotten", || {
        supervisor.status().proxies == 1
    });

    bystander.acquire(1, A).await;
    bystander.wait_granted(1).await;
    bystander.release(1).await;
    let mut fresh = supervisor.proxy().await;
    fresh.acquire(1, A).await;
    let grant = fresh.wait_granted(1).await;
    assert_eq!(grant.load_ms, None, "still loaded");
    assert_eq!(supervisor.status().loaded.as_deref(), Some(A));
    drop((bystander, fresh));
    supervisor.stop();
}

/// `SetDraining` shows in every proxy's state and in `status` until cleared or until the
/// draining proxy disconnects.
#[tokio::test]
async fn a_draining_proxy_is_reported_until_it_goes() {
    let supervisor = supervisor("draining");
    let mut old = supervisor.proxy().await;
    let mut new = supervisor.proxy().await;
    old.set_draining(true).await;
    new.wait_state("draining", |state| state.draining).await;
    assert!(supervisor.status().draining);
    old.set_draining(false).await;
    new.wait_state("not draining", |state| !state.draining)
        .await;
    old.set_draining(true).await;
    new.wait_state("draining again", |state| state.draining)
        .await;
    drop(old);
    new.wait_state("the draining proxy gone", |state| !state.draining)
        .await;
    assert!(!supervisor.status().draining);
    new.drain(Duration::from_millis(50)).await;
    drop(new);
    supervisor.stop();
}

/// Arrival sequence numbers start at 1 and are unique and increasing across every proxy of
/// the instance (tickets and `Arrive` share them), and are answered even while a model loads.
#[tokio::test]
async fn arrival_numbers_are_unique_across_proxies_and_do_not_wait_for_loads() {
    let supervisor = Supervisor::start(
        ConfigBuilder::new("arrive")
            .model(ModelSpec::new(A).load_ms(3_000))
            .build(),
    );
    let mut old = supervisor.proxy().await;
    let mut new = supervisor.proxy().await;
    old.acquire(1, A).await;
    old.wait_phase(
        1,
        strata_e2e::TicketPhase::Load(strata_protocol::wire::LoadPhase::Starting),
    )
    .await;
    let asked = std::time::Instant::now();
    let mut seen = Vec::new();
    for token in 0..6u64 {
        let proxy = if token % 2 == 0 { &mut old } else { &mut new };
        seen.push(proxy.arrive(100 + token).await);
    }
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "arrivals waited for the load: {:?}",
        asked.elapsed()
    );
    // The ticket was numbered first (1), when it entered the queue.
    assert_eq!(seen, [2, 3, 4, 5, 6, 7]);
    assert!(old.outcome(1).is_none(), "still loading");
    let queued = old.history().iter().find_map(|message| match message {
        strata_protocol::wire::SupervisorMessage::Queued { ticket: 1, arrival } => Some(*arrival),
        _ => None,
    });
    assert_eq!(queued.map(|arrival| arrival.arrival_seq), Some(1));
    drop((old, new));
    supervisor.stop();
}
