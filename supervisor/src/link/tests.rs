//! The supervisor's end of the link, driven over an in-memory socket pair.
//!
//! The test plays the proxy with the protocol crate's own framing
//! (`read_frame`/`write_frame`, or raw bytes for broken frames), so every
//! assertion is about what crosses the socket. The engine is either a
//! detached handle ([`EngineHandle::detached`]), which shows exactly which
//! commands the link hands the engine and lets the test answer as the
//! engine, or the real engine task with a config whose one model is not
//! installed, which answers tickets without ever starting a backend.
//!
//! `UnixStream::pair` gives both ends this process's credentials, so the
//! `SO_PEERCRED` check passes as it does for a proxy of the same user (the
//! wrong-user refusal needs a second user and is not covered here), and the
//! hello's pid must be this process's. Every
//! wait is bounded by [`LIMIT`] or runs under tokio's paused clock; nothing
//! sleeps to synchronise.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use strata_protocol::config::Config;
use strata_protocol::config::testing::one_model_config;
use strata_protocol::record::RequestRecord;
use strata_protocol::stats::RequestStats;
use strata_protocol::wire::{
    ArrivalInfo, BackendInstance, Grant, LeaseFailure, LookupFailure, MAX_FRAME_BYTES,
    PROTOCOL_VERSION, RefuseReason, RequestLogStats, RevokeReason, RouterMetrics, RouterState,
    ServiceTier, SubmittedRecord, TicketRequest,
};
use strata_protocol::wire::{encode_frame, read_frame, write_frame};
use strata_test_support::record_json;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::task::JoinHandle;

use super::hello::{HELLO_TIMEOUT, hello};
use super::orphans::Orphans;
use super::*;
use crate::accounting::Accounting;
use crate::counters::Counters;
use crate::sockets;

/// The bound on every wait for a frame, a command or a task's end. Far
/// above what any step takes; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(10);
const FINGERPRINT: u64 = 0x5eed_f00d;
const INSTANCE: &str = "4242-1700000000000";
/// The connection number the tests give `handle_connection`.
const CONN: u64 = 7;
/// The frame limit of a config whose upstream names are short.
const PROXY_FRAME_LIMIT: u32 = 64 * 1024;

fn shared(capacity: usize) -> Arc<LinkShared> {
    // The peer of a socket pair is this test process, which never exits.
    shared_with(capacity, |_| true)
}

/// [`shared`], with `is_alive` saying whether a proxy process still runs.
fn shared_with(capacity: usize, is_alive: fn(u32) -> bool) -> Arc<LinkShared> {
    Arc::new(LinkShared {
        fingerprint: FINGERPRINT,
        proxy_frame_limit: PROXY_FRAME_LIMIT,
        instance_id: INSTANCE.into(),
        counters: Arc::new(Counters::default()),
        accounting: Accounting::new(capacity, None),
        orphans: Orphans::with_liveness(is_alive),
        stats: Default::default(),
        refusals: std::sync::Mutex::new(strata_os::WarnLimit::new(
            crate::link::REFUSALS_REPORTED_EVERY,
        )),
    })
}

/// Every stored record, oldest first.
fn stored(shared: &LinkShared) -> Vec<serde_json::Value> {
    shared
        .accounting
        .page(Some(0), 1000)
        .records
        .iter()
        .map(|text| serde_json::from_str(text).expect("a stored record is JSON"))
        .collect()
}

/// Polls until `count` records are stored (bounded), then returns them.
async fn stored_when(shared: &LinkShared, count: usize) -> Vec<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let records = stored(shared);
        if records.len() >= count {
            return records;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {count} records were stored: {records:?}",
            records.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`record`] as a proxy hands it over (it waited in the default tier).
fn submitted(arrival_seq: u64, request_id: &str) -> SubmittedRecord {
    SubmittedRecord {
        record: record(arrival_seq, request_id),
        tier: ServiceTier::Default,
    }
}

/// What a proxy says of a non-streaming request for `m` that arrived now.
fn test_request() -> TicketRequest {
    TicketRequest {
        model_requested: "m".into(),
        stream: false,
        arrived_unix_ms: strata_protocol::record::unix_ms(std::time::SystemTime::now()),
    }
}

/// A complete record, as a proxy would send it.
fn record(arrival_seq: u64, request_id: &str) -> RequestRecord {
    let mut record = record_json(request_id);
    record["arrival_seq"] = arrival_seq.into();
    serde_json::from_value(record).expect("a valid record")
}

fn hello_frame(protocol_version: u32, fingerprint: u64) -> ProxyMessage {
    ProxyMessage::Hello {
        protocol_version,
        fingerprint,
        // Both ends of the pair are this process, so this is the peer's pid.
        pid: std::process::id(),
    }
}

/// The test's end of the socket: the proxy.
struct Proxy {
    stream: UnixStream,
}

impl Proxy {
    async fn send(&mut self, message: &ProxyMessage) {
        write_frame(&mut self.stream, message)
            .await
            .expect("the supervisor end is open");
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("raw write");
    }

    async fn recv(&mut self) -> SupervisorMessage {
        match tokio::time::timeout(LIMIT, read_frame::<_, SupervisorMessage>(&mut self.stream))
            .await
        {
            Ok(Ok(Some(message))) => message,
            other => panic!("expected a frame from the supervisor, got {other:?}"),
        }
    }

    /// The supervisor closed the connection, cleanly between frames.
    async fn expect_closed(&mut self) {
        match tokio::time::timeout(LIMIT, read_frame::<_, SupervisorMessage>(&mut self.stream))
            .await
        {
            Ok(Ok(None)) => {}
            other => panic!("expected the supervisor to close, got {other:?}"),
        }
    }
}

/// Runs `handle_connection` for one socket pair as connection [`CONN`];
/// returns the proxy's end.
fn start(engine: EngineHandle, shared: Arc<LinkShared>) -> (Proxy, JoinHandle<()>) {
    start_conn(CONN, engine, shared)
}

fn start_conn(conn: u64, engine: EngineHandle, shared: Arc<LinkShared>) -> (Proxy, JoinHandle<()>) {
    let (proxy, supervisor) = UnixStream::pair().expect("socketpair");
    let task = tokio::spawn(async move {
        handle_connection(supervisor, conn, engine, shared, None).await;
    });
    (Proxy { stream: proxy }, task)
}

async fn command(commands: &mut mpsc::UnboundedReceiver<Command>) -> Command {
    tokio::time::timeout(LIMIT, commands.recv())
        .await
        .expect("a command within the limit")
        .expect("the link still holds the engine handle")
}

async fn ended(task: JoinHandle<()>) {
    tokio::time::timeout(LIMIT, task)
        .await
        .expect("the connection task ended")
        .expect("the connection task did not panic");
}

/// Says hello as a matching proxy and returns the channel the link gave
/// the engine for this proxy.
async fn handshake(
    proxy: &mut Proxy,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> mpsc::UnboundedSender<SupervisorMessage> {
    proxy
        .send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT))
        .await;
    assert_eq!(
        proxy.recv().await,
        SupervisorMessage::Welcome {
            protocol_version: PROTOCOL_VERSION,
            instance_id: INSTANCE.into(),
            supervisor_pid: std::process::id(),
        }
    );
    match command(commands).await {
        Command::Connect { conn, pid, events } => {
            assert_eq!((conn, pid), (CONN, std::process::id()));
            events
        }
        other => panic!("expected Connect, got {other:?}"),
    }
}

/// The engine was never told anything: the link dropped its handle without
/// sending a single command (no `Connect`, so no `Disconnect` either).
fn engine_heard_nothing(commands: &mut mpsc::UnboundedReceiver<Command>) {
    match commands.try_recv() {
        Err(TryRecvError::Disconnected) => {}
        other => panic!("the engine was told something: {other:?}"),
    }
}

/// Nothing more has reached the engine so far.
fn no_command_yet(commands: &mut mpsc::UnboundedReceiver<Command>) {
    match commands.try_recv() {
        Err(TryRecvError::Empty) => {}
        other => panic!("unexpected engine command: {other:?}"),
    }
}

fn arrival(seq: u64) -> ArrivalInfo {
    ArrivalInfo {
        arrival_seq: seq,
        queue_depth: 0,
        in_flight: 0,
    }
}

// ---- handshake --------------------------------------------------------

/// The accepted hello: `Welcome` with this instance, then the engine learns
/// of the proxy (with its PID) and gets the channel that reaches it.
/// Whatever the engine puts there arrives framed, after the `Welcome`.
#[tokio::test]
async fn a_matching_hello_is_welcomed_and_the_proxy_handed_to_the_engine() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, _task) = start(engine, shared(8));
    let events = handshake(&mut proxy, &mut commands).await;
    let state = RouterState {
        routing: true,
        draining: false,
        loaded: Some("m".into()),
        loading: None,
        backend: Some(BackendInstance { epoch: 1, pid: 99 }),
        last_startup_error: None,
        statuses: Vec::new(),
        backend_health: Default::default(),
        readiness: None,
    };
    events
        .send(SupervisorMessage::State(state.clone()))
        .unwrap();
    assert_eq!(proxy.recv().await, SupervisorMessage::State(state));
}

/// The hello's decision alone, without a socket: the pid of a hello that
/// passes, and each way a first frame is refused, the checks in their order
/// (version, then pid, then fingerprint).
#[test]
fn the_hello_check_names_the_first_mismatch() {
    let me = 4242;
    let frame = |protocol_version, fingerprint, pid| {
        Ok(ProxyMessage::Hello {
            protocol_version,
            fingerprint,
            pid,
        })
    };
    let cases = [
        (frame(PROTOCOL_VERSION, FINGERPRINT, me), Some(me), Ok(me)),
        // The kernel could not tell: the hello's pid stands.
        (frame(PROTOCOL_VERSION, FINGERPRINT, me), None, Ok(me)),
        (
            frame(PROTOCOL_VERSION + 1, FINGERPRINT ^ 1, me + 1),
            Some(me),
            Err(RefuseReason::ProtocolVersion {
                proxy: PROTOCOL_VERSION + 1,
                supervisor: PROTOCOL_VERSION,
            }),
        ),
        (
            frame(PROTOCOL_VERSION, FINGERPRINT ^ 1, me + 1),
            Some(me),
            Err(RefuseReason::PidMismatch {
                hello: me + 1,
                peer: me,
            }),
        ),
        (
            frame(PROTOCOL_VERSION, FINGERPRINT ^ 1, me),
            Some(me),
            Err(RefuseReason::Fingerprint),
        ),
        (
            Ok(ProxyMessage::Arrive { token: 1 }),
            Some(me),
            Err(RefuseReason::NotAHello),
        ),
        (
            Err(WireError::Decode("x".into())),
            Some(me),
            Err(RefuseReason::BadHello("malformed frame: x".into())),
        ),
    ];
    for (i, (first, peer, expected)) in cases.into_iter().enumerate() {
        assert_eq!(hello(first, peer, FINGERPRINT), expected, "case {i}");
    }
}

/// A proxy of another build: refused with a message naming both versions
/// and the fix, the connection closed, and the engine never hears of it.
#[tokio::test]
async fn a_different_protocol_version_is_refused_naming_both_versions() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine, shared(8));
    let theirs = PROTOCOL_VERSION + 1;
    proxy.send(&hello_frame(theirs, FINGERPRINT)).await;
    let refused = proxy.recv().await;
    assert_eq!(
        refused,
        RefuseReason::ProtocolVersion {
            proxy: theirs,
            supervisor: PROTOCOL_VERSION
        }
        .into()
    );
    let SupervisorMessage::Refused { reason } = refused else {
        unreachable!()
    };
    assert!(
        reason.starts_with(&format!(
            "protocol version {theirs} is not supported (supervisor speaks {PROTOCOL_VERSION})"
        )),
        "{reason}"
    );
    assert!(reason.contains("matching strata-proxy and strata-supervisor builds"));
    proxy.expect_closed().await;
    ended(task).await;
    engine_heard_nothing(&mut commands);
}

/// A proxy started with another config: refused (the version check passed,
/// so it is the fingerprint message) and unknown to the engine; but its
/// records, which do not depend on the settings, are still stored from that
/// connection. Anything else ends it.
#[tokio::test]
async fn a_different_config_fingerprint_is_refused_but_its_records_are_kept() {
    let (engine, mut commands) = EngineHandle::detached();
    let shared = shared(8);
    let (mut proxy, task) = start(engine, shared.clone());
    proxy
        .send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT ^ 1))
        .await;
    assert_eq!(proxy.recv().await, RefuseReason::Fingerprint.into());
    for id in ["proxy-1-2-1", "proxy-1-2-2"] {
        proxy
            .send(&ProxyMessage::SubmitRecord {
                record: Box::new(submitted(0, id)),
            })
            .await;
    }
    // A ticket is not taken from it: the connection ends.
    proxy
        .send(&ProxyMessage::SetDraining { draining: true })
        .await;
    proxy.expect_closed().await;
    ended(task).await;
    engine_heard_nothing(&mut commands);
    let page = shared.accounting.page(Some(0), 10);
    let ids: Vec<String> = page
        .records
        .iter()
        .map(|text| {
            serde_json::from_str::<serde_json::Value>(text).unwrap()["request_id"].to_string()
        })
        .collect();
    assert_eq!(ids, ["\"proxy-1-2-1\"", "\"proxy-1-2-2\""]);
}

/// A proxy of another protocol version is refused and closed at once: its
/// records' encoding may differ.
#[tokio::test]
async fn another_protocol_version_is_closed_at_once() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine, shared(8));
    proxy
        .send(&hello_frame(PROTOCOL_VERSION + 1, FINGERPRINT))
        .await;
    assert!(matches!(
        proxy.recv().await,
        SupervisorMessage::Refused { .. }
    ));
    proxy.expect_closed().await;
    ended(task).await;
    engine_heard_nothing(&mut commands);
}

/// A hello whose pid is not the connecting process's (`SO_PEERCRED`) is
/// refused naming both, closed, and unknown to the engine: a peer cannot
/// pass itself off as another process in the supervisor's logs and status.
#[tokio::test]
async fn a_hello_with_another_processs_pid_is_refused() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine, shared(8));
    let own = std::process::id();
    proxy
        .send(&ProxyMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            fingerprint: FINGERPRINT,
            pid: own + 1,
        })
        .await;
    assert_eq!(
        proxy.recv().await,
        RefuseReason::PidMismatch {
            hello: own + 1,
            peer: own
        }
        .into()
    );
    proxy.expect_closed().await;
    ended(task).await;
    engine_heard_nothing(&mut commands);
}

/// Anything but a hello first is refused, and is not acted on: an `Arrive`
/// before the hello numbers nothing.
#[tokio::test]
async fn a_first_frame_other_than_hello_is_refused_and_not_acted_on() {
    let (engine, mut commands) = EngineHandle::detached();
    let shared = shared(8);
    let (mut proxy, task) = start(engine, shared.clone());
    proxy.send(&ProxyMessage::Arrive { token: 1 }).await;
    assert_eq!(proxy.recv().await, RefuseReason::NotAHello.into());
    proxy.expect_closed().await;
    ended(task).await;
    engine_heard_nothing(&mut commands);
    assert_eq!(
        shared.counters.arrive().arrival_seq,
        1,
        "no arrival was used"
    );
}

/// A first frame that is not a message, or whose length prefix is over the
/// limit, is refused as a bad hello with the framing error, and closed.
#[tokio::test]
async fn a_broken_first_frame_is_refused_as_a_bad_hello() {
    let too_large = u32::MAX.to_be_bytes();
    let undecodable = [0, 0, 0, 3, 0xff, 0xff, 0xff];
    for (bytes, expected) in [
        (&undecodable[..], "bad hello: malformed frame: ".to_string()),
        (
            &too_large[..],
            format!("bad hello: frame of {} bytes exceeds", u32::MAX),
        ),
    ] {
        let (engine, mut commands) = EngineHandle::detached();
        let (mut proxy, task) = start(engine, shared(8));
        proxy.send_raw(bytes).await;
        let SupervisorMessage::Refused { reason } = proxy.recv().await else {
            panic!("expected Refused for {bytes:?}");
        };
        assert!(reason.starts_with(&expected), "{reason}");
        proxy.expect_closed().await;
        ended(task).await;
        engine_heard_nothing(&mut commands);
    }
}

/// A peer that connects and says nothing holds the task for exactly
/// `HELLO_TIMEOUT`, then is dropped without an answer. (Paused clock: the
/// ten seconds pass at once.)
#[tokio::test(start_paused = true)]
async fn a_silent_peer_is_dropped_after_the_hello_timeout() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine, shared(8));
    let started = tokio::time::Instant::now();
    let closed = tokio::time::timeout(
        Duration::from_secs(60),
        read_frame::<_, SupervisorMessage>(&mut proxy.stream),
    )
    .await;
    assert!(matches!(closed, Ok(Ok(None))), "{closed:?}");
    assert_eq!(started.elapsed(), HELLO_TIMEOUT);
    ended(task).await;
    engine_heard_nothing(&mut commands);
}

/// A peer that closes before its hello ends the task quietly.
#[tokio::test]
async fn a_peer_that_closes_before_its_hello_is_forgotten() {
    let (engine, mut commands) = EngineHandle::detached();
    let (proxy, task) = start(engine, shared(8));
    drop(proxy);
    ended(task).await;
    engine_heard_nothing(&mut commands);
}

// ---- tickets ------------------------------------------------------------

/// Each ticket message becomes the engine command of this connection, in
/// the order it was sent, with its fields unchanged.
#[tokio::test]
async fn ticket_messages_reach_the_engine_as_commands_of_this_connection() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, _task) = start(engine, shared(8));
    let _events = handshake(&mut proxy, &mut commands).await;

    proxy
        .send(&ProxyMessage::Enqueue {
            ticket: 11,
            model: "m".into(),
            tier: ServiceTier::Priority,
            request: test_request(),
        })
        .await;
    proxy
        .send(&ProxyMessage::HeadersReceived { ticket: 11 })
        .await;
    proxy
        .send(&ProxyMessage::TicketScores {
            lookup: 5,
            scores: Err(LookupFailure::Busy),
        })
        .await;
    proxy
        .send(&ProxyMessage::SetDraining { draining: true })
        .await;

    match command(&mut commands).await {
        Command::Enqueue {
            conn,
            ticket,
            model,
            tier,
            request,
        } => {
            assert_eq!(
                (conn, ticket, model.as_str(), tier),
                (CONN, 11, "m", ServiceTier::Priority)
            );
            assert_eq!(request.model_requested, "m");
        }
        other => panic!("expected Enqueue, got {other:?}"),
    }
    match command(&mut commands).await {
        Command::HeadersReceived { conn, ticket } => assert_eq!((conn, ticket), (CONN, 11)),
        other => panic!("expected HeadersReceived, got {other:?}"),
    }
    match command(&mut commands).await {
        Command::Scores {
            conn,
            lookup,
            scores,
        } => assert_eq!((conn, lookup, scores), (CONN, 5, Err(LookupFailure::Busy))),
        other => panic!("expected Scores, got {other:?}"),
    }
    match command(&mut commands).await {
        Command::SetDraining { conn, draining } => assert_eq!((conn, draining), (CONN, true)),
        other => panic!("expected SetDraining, got {other:?}"),
    }
}

/// The engine's answers to a ticket come back as frames, in the order the
/// engine sent them.
#[tokio::test]
async fn engine_answers_come_back_framed_in_order() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, _task) = start(engine, shared(8));
    let events = handshake(&mut proxy, &mut commands).await;
    let grant = Grant {
        ticket: 3,
        arrival: arrival(1),
        backend: "127.0.0.1:9".parse().unwrap(),
        instance: BackendInstance { epoch: 2, pid: 77 },
        upstream_model: "up-m".into(),
        model_switch: true,
        load_ms: Some(800),
    };
    let answers = vec![
        SupervisorMessage::Queued {
            ticket: 3,
            arrival: arrival(1),
        },
        SupervisorMessage::Admitted { ticket: 3 },
        SupervisorMessage::Granted(grant),
        SupervisorMessage::Revoked {
            ticket: 3,
            reason: RevokeReason::RoutingOff,
        },
        SupervisorMessage::Failed {
            ticket: 4,
            arrival: arrival(2),
            failure: LeaseFailure::QueueFull,
        },
    ];
    for answer in &answers {
        events.send(answer.clone()).unwrap();
    }
    for answer in answers {
        assert_eq!(proxy.recv().await, answer);
    }
}

/// `Finish` stores the record (with a completion seq) and ends the ticket
/// in the engine.
#[tokio::test]
async fn finish_stores_the_record_and_ends_the_ticket() {
    let (engine, mut commands) = EngineHandle::detached();
    let shared = shared(8);
    let (mut proxy, _task) = start(engine, shared.clone());
    let _events = handshake(&mut proxy, &mut commands).await;
    proxy
        .send(&ProxyMessage::Finish {
            ticket: 9,
            record: Box::new(submitted(5, "x-5")),
        })
        .await;
    match command(&mut commands).await {
        Command::Finish { conn, ticket } => assert_eq!((conn, ticket), (CONN, 9)),
        other => panic!("expected Finish, got {other:?}"),
    }
    let page = shared.accounting.page(None, 10);
    assert_eq!(page.records.len(), 1);
    let stored: serde_json::Value = serde_json::from_str(&page.records[0]).unwrap();
    assert_eq!(stored["seq"], 1);
    assert_eq!(stored["arrival_seq"], 5);
    assert_eq!(stored["request_id"], "x-5");
}

// ---- connection end -----------------------------------------------------

/// However the connection ends after the hello (a clean close, a close in
/// the middle of a frame, a length prefix over the general limit or over the
/// proxy frame limit, though under the general one), the engine is
/// told once that this proxy is gone (which ends all its tickets and
/// leases there), and the socket is closed.
#[tokio::test]
async fn the_end_of_the_connection_tells_the_engine_once() {
    #[derive(Debug, Clone, Copy)]
    enum End {
        Close,
        CloseMidFrame,
        TooLarge,
        OverProxyLimit,
    }
    for end in [
        End::Close,
        End::CloseMidFrame,
        End::TooLarge,
        End::OverProxyLimit,
    ] {
        let (engine, mut commands) = EngineHandle::detached();
        let (mut proxy, task) = start(engine, shared(8));
        let _events = handshake(&mut proxy, &mut commands).await;
        proxy
            .send(&ProxyMessage::Enqueue {
                ticket: 1,
                model: "m".into(),
                tier: ServiceTier::Default,
                request: test_request(),
            })
            .await;
        assert!(matches!(
            command(&mut commands).await,
            Command::Enqueue { .. }
        ));
        match end {
            End::Close => drop(proxy),
            End::CloseMidFrame => {
                // A prefix announcing 100 bytes, then 10 of them, then EOF.
                proxy.send_raw(&[0, 0, 0, 100]).await;
                proxy.send_raw(&[0; 10]).await;
                proxy.stream.shutdown().await.unwrap();
                proxy.expect_closed().await;
            }
            End::TooLarge => {
                proxy.send_raw(&(MAX_FRAME_BYTES + 1).to_be_bytes()).await;
                proxy.expect_closed().await;
            }
            End::OverProxyLimit => {
                // Closed at the prefix: the supervisor does not wait for (or keep) the
                // payload, though the proxy has started sending it.
                proxy.send_raw(&(PROXY_FRAME_LIMIT + 1).to_be_bytes()).await;
                proxy.send_raw(&[0; 1024]).await;
                proxy.expect_closed().await;
            }
        }
        match command(&mut commands).await {
            Command::Disconnect { conn, .. } => assert_eq!(conn, CONN, "{end:?}"),
            other => panic!("{end:?}: expected Disconnect, got {other:?}"),
        }
        ended(task).await;
        // Nothing after the Disconnect, and the handle is gone.
        engine_heard_nothing(&mut commands);
    }
}

/// An engine that has stopped cannot serve the proxy: the link closes the
/// connection at the next command instead of swallowing it.
#[tokio::test]
async fn a_stopped_engine_closes_the_connection() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine, shared(8));
    let _events = handshake(&mut proxy, &mut commands).await;
    drop(commands);
    proxy
        .send(&ProxyMessage::Enqueue {
            ticket: 1,
            model: "m".into(),
            tier: ServiceTier::Default,
            request: test_request(),
        })
        .await;
    proxy.expect_closed().await;
    ended(task).await;
}

// ---- malformed frames -----------------------------------------------------

/// A whole frame that does not decode, and a second hello, are answered
/// with `ProtocolError`; the stream is still in sync, so the connection
/// stays usable and the engine hears nothing of either.
#[tokio::test]
async fn malformed_frames_are_answered_and_the_connection_stays_usable() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, _task) = start(engine, shared(8));
    let _events = handshake(&mut proxy, &mut commands).await;

    // Variant index 200 does not exist.
    proxy.send_raw(&[0, 0, 0, 1, 200]).await;
    let SupervisorMessage::ProtocolError { message } = proxy.recv().await else {
        panic!("expected ProtocolError");
    };
    assert!(message.starts_with("malformed frame: "), "{message}");

    proxy
        .send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT))
        .await;
    assert_eq!(
        proxy.recv().await,
        SupervisorMessage::ProtocolError {
            message: "hello was already accepted".into()
        }
    );

    proxy.send(&ProxyMessage::Arrive { token: 8 }).await;
    assert_eq!(
        proxy.recv().await,
        SupervisorMessage::Arrival {
            token: 8,
            arrival: arrival(1)
        }
    );
    no_command_yet(&mut commands);
}

// ---- answered by the link itself ------------------------------------------

/// Arrival numbers come from the shared counters, in order, answered by the
/// link without the engine (an arrival must not wait behind a load).
#[tokio::test]
async fn arrivals_are_numbered_by_the_link_without_the_engine() {
    let (engine, mut commands) = EngineHandle::detached();
    let shared = shared(8);
    let (mut proxy, _task) = start(engine, shared.clone());
    let _events = handshake(&mut proxy, &mut commands).await;
    for token in [40, 41] {
        proxy.send(&ProxyMessage::Arrive { token }).await;
    }
    assert_eq!(
        proxy.recv().await,
        SupervisorMessage::Arrival {
            token: 40,
            arrival: arrival(1)
        }
    );
    assert_eq!(
        proxy.recv().await,
        SupervisorMessage::Arrival {
            token: 41,
            arrival: arrival(2)
        }
    );
    no_command_yet(&mut commands);
    // The same counter the engine numbers tickets with.
    assert_eq!(shared.counters.arrive().arrival_seq, 3);
}

/// A submitted record is stored with a completion seq; one that has no
/// arrival number or request ID (its request ended before the proxy could
/// number it) gets both here. `/requests` reads it back, answered by the
/// link, the engine never involved.
#[tokio::test]
async fn submitted_records_are_numbered_stored_and_read_back() {
    let (engine, mut commands) = EngineHandle::detached();
    let shared = shared(8);
    let (mut proxy, _task) = start(engine, shared.clone());
    let _events = handshake(&mut proxy, &mut commands).await;
    proxy
        .send(&ProxyMessage::SubmitRecord {
            record: Box::new(submitted(0, "")),
        })
        .await;
    proxy
        .send(&ProxyMessage::SubmitRecord {
            record: Box::new(submitted(9, "other-9")),
        })
        .await;
    proxy
        .send(&ProxyMessage::QueryRecords {
            query: 12,
            after: Some(0),
            limit: 10,
        })
        .await;
    let SupervisorMessage::Records { query, page } = proxy.recv().await else {
        panic!("expected Records");
    };
    assert_eq!(query, 12);
    assert_eq!(page.instance_id, INSTANCE);
    assert_eq!(page.next_seq, 2);
    let records: Vec<serde_json::Value> = page
        .records
        .iter()
        .map(|text| serde_json::from_str(text).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["seq"], 1);
    assert_eq!(records[0]["arrival_seq"], 1);
    assert_eq!(records[0]["request_id"], format!("{INSTANCE}-1"));
    assert_eq!(records[1]["seq"], 2);
    assert_eq!(records[1]["arrival_seq"], 9);
    assert_eq!(records[1]["request_id"], "other-9");
    no_command_yet(&mut commands);
}

/// `/metrics` figures: the engine's published counts and the store's
/// counters, with this instance, answered by the link; only the list of held
/// requests is asked of the engine.
#[tokio::test]
async fn metrics_come_from_the_shared_counters_and_the_store() {
    let (engine, mut commands) = EngineHandle::detached();
    // A ring of two, so the third record evicts one.
    let shared = shared(2);
    let (mut proxy, _task) = start(engine, shared.clone());
    let _events = handshake(&mut proxy, &mut commands).await;
    for n in 1..=3 {
        proxy
            .send(&ProxyMessage::SubmitRecord {
                record: Box::new(submitted(n, &format!("r-{n}"))),
            })
            .await;
    }
    proxy.send(&ProxyMessage::QueryMetrics { query: 4 }).await;
    // Only the list of held requests comes from the engine.
    let held = crate::engine::InFlightRequest {
        request_id: format!("{INSTANCE}-9"),
        model: "m".into(),
        tier: "default".into(),
        stage: "leased".into(),
        age_ms: 1200,
    };
    match command(&mut commands).await {
        Command::InFlight { limit, reply } => {
            assert_eq!(limit, IN_FLIGHT_SHOWN);
            reply.send(vec![held.clone()]).unwrap();
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
    let mut answer = proxy.recv().await;
    // The supervisor's own process figures are read live: present, then set aside.
    if let SupervisorMessage::Metrics { metrics, .. } = &mut answer {
        let process = std::mem::take(&mut metrics.supervisor_process);
        assert!(
            process.resident_memory_bytes.is_some_and(|bytes| bytes > 0)
                && process.open_fds.is_some_and(|fds| fds > 0),
            "{process:?}"
        );
    }
    assert_eq!(
        answer,
        SupervisorMessage::Metrics {
            query: 4,
            metrics: Box::new(RouterMetrics {
                queue_depth: 0,
                queue_depth_by_tier: [0, 0, 0],
                queue_depth_by_model: Default::default(),
                in_flight: 0,
                proxies: 0,
                model_loads: Default::default(),
                model_switches: Default::default(),
                prefetch: Default::default(),
                in_flight_requests: vec![held],
                supervisor_process: Default::default(),
                // Counted over all three stored records, the evicted one too.
                requests: {
                    let mut stats = RequestStats::default();
                    for n in 1..=3 {
                        stats.observe(&record(n, &format!("r-{n}")), ServiceTier::Default);
                    }
                    stats
                },
                request_log: RequestLogStats {
                    write_errors: 0,
                    write_drops: 0,
                    evicted: 1,
                    records_in_ring: 2,
                    next_seq: 4,
                    instance_id: INSTANCE.into(),
                },
            }),
        }
    );
    no_command_yet(&mut commands);
}

// ---- the accept loop --------------------------------------------------------

/// A private directory (0700) for a socket, removed at the end.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new(tag: &str) -> PrivateDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("sup-link-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        PrivateDir(dir)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve` gives every accepted proxy its own connection number, so two
/// proxies' tickets can never be confused in the engine.
#[tokio::test]
async fn serve_gives_each_proxy_its_own_connection() {
    let dir = PrivateDir::new("serve");
    let path = dir.0.join("supervisor.sock");
    let listener = sockets::bind_private(&path).expect("bind");
    let (engine, mut commands) = EngineHandle::detached();
    let server = tokio::spawn(serve(listener, engine, shared(8)));
    let mut conns = Vec::new();
    let mut proxies = Vec::new();
    for _ in 0..2 {
        let mut proxy = Proxy {
            stream: UnixStream::connect(&path).await.expect("connect"),
        };
        proxy
            .send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT))
            .await;
        assert!(matches!(
            proxy.recv().await,
            SupervisorMessage::Welcome { .. }
        ));
        match command(&mut commands).await {
            Command::Connect { conn, .. } => conns.push(conn),
            other => panic!("expected Connect, got {other:?}"),
        }
        proxies.push(proxy);
    }
    assert_eq!(conns, [1, 2]);
    server.abort();
}

// ---- with the real engine ---------------------------------------------------

/// A config with one model, `m`, that is not installed: the engine refuses
/// its tickets at once and never launches anything.
fn config() -> Arc<Config> {
    Arc::new(one_model_config(Path::new("/nonexistent/control.sock")))
}

/// With the real engine behind it: `Welcome` comes before the engine's
/// first `State`, tickets are answered through the link (numbered from the
/// counters the link shares with the engine), and when a proxy's connection
/// ends the engine forgets it: its draining flag, which held the router
/// state `draining` for every proxy, goes with it.
#[tokio::test]
async fn the_real_engine_answers_through_the_link_and_forgets_a_closed_proxy() {
    let shared = shared(8);
    let (engine, engine_task) =
        crate::engine::spawn(config(), INSTANCE.into(), shared.counters.clone());

    let (mut a, task_a) = start(engine.clone(), shared.clone());
    a.send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT)).await;
    assert!(matches!(a.recv().await, SupervisorMessage::Welcome { .. }));
    let SupervisorMessage::State(state) = a.recv().await else {
        panic!("expected the first State right after Welcome");
    };
    assert!(state.routing && !state.draining);
    assert_eq!(state.statuses.len(), 1);

    a.send(&ProxyMessage::Enqueue {
        ticket: 1,
        model: "nope".into(),
        tier: ServiceTier::Default,
        request: test_request(),
    })
    .await;
    assert_eq!(
        a.recv().await,
        SupervisorMessage::Failed {
            ticket: 1,
            arrival: arrival(1),
            failure: LeaseFailure::UnknownModel,
        }
    );
    a.send(&ProxyMessage::Enqueue {
        ticket: 2,
        model: "m".into(),
        tier: ServiceTier::Default,
        request: test_request(),
    })
    .await;
    match a.recv().await {
        SupervisorMessage::Failed {
            ticket: 2,
            arrival: got,
            failure: LeaseFailure::NotPrepared { .. },
        } => assert_eq!(got, arrival(2)),
        other => panic!("expected Failed NotPrepared, got {other:?}"),
    }
    a.send(&ProxyMessage::Arrive { token: 1 }).await;
    assert_eq!(
        a.recv().await,
        SupervisorMessage::Arrival {
            token: 1,
            arrival: arrival(3)
        }
    );

    // A second proxy; then the first one drains and leaves.
    let (mut b, _task_b) = start_conn(CONN + 1, engine.clone(), shared.clone());
    b.send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT)).await;
    assert!(matches!(b.recv().await, SupervisorMessage::Welcome { .. }));
    assert!(matches!(b.recv().await, SupervisorMessage::State(_)));
    a.send(&ProxyMessage::SetDraining { draining: true }).await;
    let SupervisorMessage::State(state) = b.recv().await else {
        panic!("expected State");
    };
    assert!(state.draining, "a's draining is everyone's state");
    drop(a);
    ended(task_a).await;
    let SupervisorMessage::State(state) = b.recv().await else {
        panic!("expected State");
    };
    assert!(!state.draining, "the closed proxy's draining went with it");

    engine_task.abort();
}

/// At most [`MAX_UNWELCOMED`] connections may sit without a finished hello: the next one is
/// closed at once, and a place frees when one of them goes away (or says hello).
#[tokio::test]
async fn connections_without_a_hello_are_capped() {
    let dir = strata_test_support::tempdir::TempDir::new("link-cap");
    let path = dir.join("supervisor.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let (engine, _commands) = EngineHandle::detached();
    let server = tokio::spawn(serve(listener, engine, shared(8)));
    let connect = || async { UnixStream::connect(&path).await.expect("connect") };

    let mut silent = Vec::new();
    for _ in 0..MAX_UNWELCOMED {
        silent.push(Proxy {
            stream: connect().await,
        });
    }
    // Accepted in order, so these are counted before the next one is: it is closed at once.
    let mut over = Proxy {
        stream: connect().await,
    };
    over.expect_closed().await;

    // One silent peer leaves; a proxy that says hello gets in (as soon as the supervisor
    // noticed the departure: until then it is closed like the one above).
    drop(silent.pop());
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let mut proxy = Proxy {
            stream: connect().await,
        };
        proxy
            .send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT))
            .await;
        let mut reply = [0u8; 4];
        use tokio::io::AsyncReadExt;
        match tokio::time::timeout(LIMIT, proxy.stream.read(&mut reply)).await {
            Ok(Ok(n)) if n > 0 => break,
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "no place freed after a silent peer left"
            ),
        }
        tokio::task::yield_now().await;
    }
    server.abort();
}

/// Before the hello too: a first frame over the proxy limit is refused as a bad hello that
/// names the limit, and the engine hears nothing.
#[tokio::test]
async fn a_first_frame_over_the_proxy_limit_is_refused_at_its_prefix() {
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine, shared(8));
    proxy.send_raw(&(PROXY_FRAME_LIMIT + 1).to_be_bytes()).await;
    match proxy.recv().await {
        SupervisorMessage::Refused { reason } => assert!(
            reason.contains(&format!("{PROXY_FRAME_LIMIT}-byte limit")),
            "{reason}"
        ),
        other => panic!("expected Refused, got {other:?}"),
    }
    proxy.expect_closed().await;
    ended(task).await;
    engine_heard_nothing(&mut commands);
}

// ---- records of a closed connection's open tickets ----------------------------

/// With the real engine: tickets the engine answered (here refused: the model is not
/// installed) but whose `Finish` never came get one substitute record each when the
/// connection closes and the proxy process is gone; a finished one keeps its own record
/// and gets no second. A real record arriving later (from a reconnected proxy) is dropped.
#[tokio::test]
async fn a_closed_connections_unfinished_tickets_get_one_substitute_record_each() {
    let shared = shared_with(64, |_| false);
    let (engine, engine_task) =
        crate::engine::spawn(config(), INSTANCE.into(), shared.counters.clone());
    let (mut a, task_a) = start(engine.clone(), shared.clone());
    a.send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT)).await;
    assert!(matches!(a.recv().await, SupervisorMessage::Welcome { .. }));
    assert!(matches!(a.recv().await, SupervisorMessage::State(_)));
    for ticket in 1..=3 {
        a.send(&ProxyMessage::Enqueue {
            ticket,
            model: "m".into(),
            tier: ServiceTier::Flex,
            request: TicketRequest {
                model_requested: "m".into(),
                stream: ticket == 2,
                arrived_unix_ms: 1_764_474_000_000,
            },
        })
        .await;
        assert!(matches!(a.recv().await, SupervisorMessage::Failed { .. }));
    }
    // Ticket 1 finishes with its own record; 2 and 3 never do.
    let own = submitted(1, &format!("{INSTANCE}-1"));
    a.send(&ProxyMessage::Finish {
        ticket: 1,
        record: Box::new(own),
    })
    .await;
    drop(a);
    ended(task_a).await;

    let records = stored_when(&shared, 3).await;
    let ids: Vec<&str> = records
        .iter()
        .map(|record| record["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            format!("{INSTANCE}-1"),
            format!("{INSTANCE}-2"),
            format!("{INSTANCE}-3")
        ]
    );
    assert_eq!(records[0]["reason"], "completed");
    for (substitute, stream) in records[1..].iter().zip([true, false]) {
        assert_eq!(substitute["reason"], "shutdown");
        assert_eq!(substitute["status"], serde_json::Value::Null);
        assert_eq!(substitute["success"], false);
        assert_eq!(substitute["stream"], stream);
        assert_eq!(substitute["model_requested"], "m");
        assert_eq!(substitute["model_resolved"], "m");
        assert_eq!(substitute["arrived_at"], "2025-11-30T03:40:00.000Z");
        assert_eq!(substitute["disconnect_phase"], serde_json::Value::Null);
    }

    // The proxy comes back after all with the record of ticket 2: dropped.
    let (mut b, _task_b) = start_conn(CONN + 1, engine.clone(), shared.clone());
    b.send(&hello_frame(PROTOCOL_VERSION, FINGERPRINT)).await;
    assert!(matches!(b.recv().await, SupervisorMessage::Welcome { .. }));
    let late = submitted(2, &format!("{INSTANCE}-2"));
    b.send(&ProxyMessage::SubmitRecord {
        record: Box::new(late),
    })
    .await;
    // A record after it is stored, so the late one was handled before it.
    let next = submitted(9, &format!("{INSTANCE}-9"));
    b.send(&ProxyMessage::SubmitRecord {
        record: Box::new(next),
    })
    .await;
    let records = stored_when(&shared, 4).await;
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(records[3]["request_id"], format!("{INSTANCE}-9"));
    drop(engine);
    engine_task.abort();
}

static PROXY_ALIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// While the proxy process still runs (it lost the link, not its requests), substitutes
/// wait: a real record sent after it reconnects replaces its substitute; once the process
/// is gone, the rest are written.
#[tokio::test]
async fn a_live_proxys_real_records_replace_their_substitutes() {
    let shared = shared_with(64, |_| PROXY_ALIVE.load(Ordering::SeqCst));
    let (engine, mut commands) = EngineHandle::detached();
    let (mut proxy, task) = start(engine.clone(), shared.clone());
    let _events = handshake(&mut proxy, &mut commands).await;
    drop(proxy);
    let Command::Disconnect { orphans, .. } = command(&mut commands).await else {
        panic!("expected Disconnect");
    };
    let open = |ticket: u64| crate::engine::OpenTicket {
        ticket,
        model: "m".into(),
        tier: ServiceTier::Default,
        request: test_request(),
        arrival: arrival(ticket),
        admitted_unix_ms: None,
        granted: false,
        upstream_model: None,
        model_switch: false,
        load_ms: None,
    };
    orphans.send(vec![open(1), open(2)]).unwrap();
    ended(task).await;
    assert_eq!(shared.orphans.waiting(), 2);
    assert!(
        stored(&shared).is_empty(),
        "nothing is written while the proxy lives"
    );

    // The same proxy reconnects and sends the record it kept for ticket 1.
    let (mut again, _task) = start(engine.clone(), shared.clone());
    let _events = handshake(&mut again, &mut commands).await;
    again
        .send(&ProxyMessage::SubmitRecord {
            record: Box::new(submitted(1, &format!("{INSTANCE}-1"))),
        })
        .await;
    let records = stored_when(&shared, 1).await;
    assert_eq!(records[0]["reason"], "completed");
    assert_eq!(shared.orphans.waiting(), 1);

    // It dies: ticket 2's substitute is written, and only it.
    PROXY_ALIVE.store(false, Ordering::SeqCst);
    let records = stored_when(&shared, 2).await;
    assert_eq!(records[1]["request_id"], format!("{INSTANCE}-2"));
    assert_eq!(records[1]["reason"], "shutdown");
    assert_eq!(shared.orphans.waiting(), 0);
}

/// A peer that keeps asking for `/requests` pages and never reads the answers is
/// disconnected once the unwritten answers pass their limit, instead of growing the
/// supervisor's memory without end; the engine hears that it is gone.
#[tokio::test]
async fn a_peer_that_never_reads_its_answers_is_disconnected() {
    let (engine, mut commands) = EngineHandle::detached();
    let shared = shared(1000);
    let (mut proxy, task) = start(engine, shared.clone());
    let _events = handshake(&mut proxy, &mut commands).await;
    for n in 1..=1000 {
        proxy
            .send(&ProxyMessage::SubmitRecord {
                record: Box::new(submitted(n, &format!("r-{n}"))),
            })
            .await;
    }
    let page_bytes: usize = stored(&shared)
        .iter()
        .map(|record| record.to_string().len())
        .sum();
    let queries = MAX_UNWRITTEN_ANSWERS / page_bytes + 8;
    // Written from a task: once the supervisor stops reading, these writes block.
    let mut stream = proxy.stream;
    let asking = tokio::spawn(async move {
        for query in 0..queries as u64 {
            let frame = encode_frame(&ProxyMessage::QueryRecords {
                query,
                after: None,
                limit: 1000,
            })
            .unwrap();
            if stream.write_all(&frame).await.is_err() {
                break;
            }
        }
        stream
    });
    // (Commands of the 1000 submissions came first: records go to the store, not the
    // engine, so the next command is the end.)
    match command(&mut commands).await {
        Command::Disconnect { conn, .. } => assert_eq!(conn, CONN),
        other => panic!("expected Disconnect, got {other:?}"),
    }
    ended(task).await;
    drop(asking.await.unwrap());
}
