//! The proxy's end of the link, against a fake supervisor.
//!
//! [`SupervisorLink::spawn`] connects to a real Unix socket, so the fake
//! supervisor listens on one in a private (0700) temp dir and speaks the
//! protocol crate's framing; it can refuse, answer out of order, drop the
//! connection, vanish (unbind) and come back, which is what the link's
//! reconnect and record-keeping are for. Cache lookups go to a fake
//! backend: a loopback TCP listener that reads each `POST
//! /v1/cache/lookup` and answers as scripted, HTTP/1.0 and close, like
//! Strata.
//!
//! Every wait is bounded by [`LIMIT`]; nothing sleeps to synchronise. The
//! one test that must show that something does *not* happen (a refused
//! link never reconnects) runs under tokio's paused clock, where waiting
//! out many backoffs costs nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use strata_protocol::page::RecordsPage;
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{
    ArrivalInfo, BackendInstance, CacheScores, Grant, LeaseFailure, LoadPhase, LookupFailure,
    PROTOCOL_VERSION, ProxyMessage, RefuseReason, RequestLogStats, RevokeReason, RouterMetrics,
    RouterState, ServiceTier, SubmittedRecord, SupervisorMessage, TicketId, TicketRequest,
    TicketScore, read_frame, write_frame,
};
use strata_test_support::record_json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use super::*;

/// The bound on every wait; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(10);
const FINGERPRINT: u64 = 0xfeed_beef;

// ---- the fake supervisor -----------------------------------------------------

/// A private directory (0700) for the socket, removed at the end.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new() -> PrivateDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("proxy-link-{}-{nanos}", std::process::id()));
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

struct FakeSupervisor {
    _dir: PrivateDir,
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl FakeSupervisor {
    fn new() -> FakeSupervisor {
        let dir = PrivateDir::new();
        let path = dir.0.join("supervisor.sock");
        let listener = UnixListener::bind(&path).expect("bind the fake supervisor");
        FakeSupervisor {
            _dir: dir,
            path,
            listener: Some(listener),
        }
    }

    fn link(&self) -> SupervisorLink {
        SupervisorLink::spawn(self.path.clone(), FINGERPRINT)
    }

    async fn accept(&self) -> Peer {
        self.accept_within(LIMIT).await
    }

    async fn accept_within(&self, limit: Duration) -> Peer {
        let listener = self.listener.as_ref().expect("listening");
        let (stream, _) = tokio::time::timeout(limit, listener.accept())
            .await
            .expect("the proxy connected within the limit")
            .expect("accept");
        Peer { stream }
    }

    /// The supervisor is gone: nothing listens, connecting fails.
    fn unbind(&mut self) {
        self.listener = None;
        std::fs::remove_file(&self.path).unwrap();
    }

    fn rebind(&mut self) {
        self.listener = Some(UnixListener::bind(&self.path).expect("rebind"));
    }
}

/// One accepted proxy connection, seen from the supervisor.
struct Peer {
    stream: UnixStream,
}

impl Peer {
    async fn recv(&mut self) -> ProxyMessage {
        match tokio::time::timeout(LIMIT, read_frame::<_, ProxyMessage>(&mut self.stream)).await {
            Ok(Ok(Some(message))) => message,
            other => panic!("expected a frame from the proxy, got {other:?}"),
        }
    }

    async fn send(&mut self, message: SupervisorMessage) {
        write_frame(&mut self.stream, &message)
            .await
            .expect("the proxy end is open");
    }

    /// Reads the hello (checking what the proxy says about itself) and
    /// accepts it, then sends the first state snapshot.
    async fn welcome(&mut self, instance_id: &str, state: RouterState) {
        assert_eq!(
            self.recv().await,
            ProxyMessage::Hello {
                protocol_version: PROTOCOL_VERSION,
                fingerprint: FINGERPRINT,
                pid: std::process::id(),
            }
        );
        self.send(SupervisorMessage::Welcome {
            protocol_version: PROTOCOL_VERSION,
            instance_id: instance_id.into(),
            supervisor_pid: 1,
        })
        .await;
        self.send(SupervisorMessage::State(state)).await;
    }

    /// Reads the `Enqueue` of the next ticket and returns its ID.
    async fn enqueued(&mut self, model: &str, tier: ServiceTier) -> TicketId {
        match self.recv().await {
            ProxyMessage::Enqueue {
                ticket,
                model: got,
                tier: got_tier,
                request,
            } => {
                assert_eq!((got.as_str(), got_tier), (model, tier));
                assert_eq!(
                    request,
                    ticket_request(),
                    "the request facts pass unchanged"
                );
                ticket
            }
            other => panic!("expected Enqueue, got {other:?}"),
        }
    }
}

const SERVING: BackendInstance = BackendInstance {
    epoch: 3,
    pid: 4242,
};

/// What a request tells the supervisor with its ticket (fixed, so tests can compare it).
fn ticket_request() -> TicketRequest {
    TicketRequest {
        model_requested: "fam".into(),
        stream: true,
        arrived_unix_ms: 1_764_474_000_123,
    }
}

fn router_state(backend: Option<BackendInstance>) -> RouterState {
    RouterState {
        routing: true,
        draining: false,
        loaded: backend.map(|_| "m".into()),
        loading: None,
        backend,
        last_startup_error: None,
        statuses: Vec::new(),
        backend_health: Default::default(),
        readiness: None,
    }
}

async fn wait_state(link: &SupervisorLink, what: impl Fn(&LinkState) -> bool) -> LinkState {
    let mut watch = link.watch();
    let seen = tokio::time::timeout(LIMIT, watch.wait_for(|state| what(state)))
        .await
        .expect("the link state changed within the limit")
        .expect("the link task is alive");
    // Cloned before `seen` (a borrow of `watch`) goes.
    seen.clone()
}

/// A fake supervisor, a link to it, and the accepted, welcomed connection.
async fn connected() -> (FakeSupervisor, SupervisorLink, Peer) {
    let fake = FakeSupervisor::new();
    let link = fake.link();
    let mut peer = fake.accept().await;
    peer.welcome("inst-1", router_state(Some(SERVING))).await;
    wait_state(&link, |state| state.connected && state.router.is_some()).await;
    (fake, link, peer)
}

async fn event(events: &mut TicketEvents) -> TicketEvent {
    tokio::time::timeout(LIMIT, events.next_event())
        .await
        .expect("a ticket event within the limit")
}

fn arrival(seq: u64) -> ArrivalInfo {
    ArrivalInfo {
        arrival_seq: seq,
        queue_depth: 1,
        in_flight: 2,
    }
}

fn grant(ticket: TicketId, backend: std::net::SocketAddr) -> Grant {
    Grant {
        ticket,
        arrival: arrival(1),
        backend,
        instance: SERVING,
        upstream_model: "up-m".into(),
        model_switch: false,
        load_ms: None,
    }
}

/// A complete record, as a trace would build it.
fn record(request_id: &str) -> RequestRecord {
    serde_json::from_value(record_json(request_id)).expect("a valid record")
}

fn submitted(message: ProxyMessage) -> String {
    match message {
        ProxyMessage::SubmitRecord { record } => record.record.request_id,
        other => panic!("expected SubmitRecord, got {other:?}"),
    }
}

// ---- handshake ------------------------------------------------------------------

/// The hello names this build's protocol version, the config fingerprint
/// and this process; after the `Welcome` the link is connected, knows the
/// instance and the first state, and a lease is usable only on the backend
/// instance that state names.
#[tokio::test]
async fn the_welcome_connects_and_the_state_names_the_serving_backend() {
    let (_fake, link, _peer) = connected().await;
    let state = link.state();
    assert_eq!(state.instance_id.as_deref(), Some("inst-1"));
    assert_eq!(state.refused, None);
    assert_eq!(
        link.routing_view(),
        RoutingView {
            connected: true,
            mismatch: None,
            instance_id: Some("inst-1".into()),
            loaded: Some("m".into()),
        }
    );
    assert!(link.serves(&SERVING));
    assert!(!link.serves(&BackendInstance {
        epoch: 4,
        ..SERVING
    }));
}

/// The welcome alone does not make the link connected: the first `State`
/// does, so a proxy that reports itself connected (`/health` 200) always
/// knows routing and the serving backend.
#[tokio::test]
async fn the_link_is_connected_only_once_the_first_state_arrives() {
    let fake = FakeSupervisor::new();
    let link = fake.link();
    let mut peer = fake.accept().await;
    assert_eq!(
        peer.recv().await,
        ProxyMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            fingerprint: FINGERPRINT,
            pid: std::process::id(),
        }
    );
    peer.send(SupervisorMessage::Welcome {
        protocol_version: PROTOCOL_VERSION,
        instance_id: "inst-1".into(),
        supervisor_pid: 1,
    })
    .await;
    wait_state(&link, |state| state.instance_id.is_some()).await;
    assert!(!link.state().connected, "connected before any State");
    peer.send(SupervisorMessage::State(router_state(Some(SERVING))))
        .await;
    wait_state(&link, |state| state.connected).await;
    assert!(link.state().router.is_some());
}

/// A later `State` replaces the snapshot: a replaced backend instance is no
/// longer served, even at the same address.
#[tokio::test]
async fn a_new_state_replaces_the_serving_instance() {
    let (_fake, link, mut peer) = connected().await;
    let next = BackendInstance {
        epoch: 4,
        pid: 4243,
    };
    peer.send(SupervisorMessage::State(router_state(Some(next))))
        .await;
    wait_state(&link, |state| {
        state.router.as_ref().and_then(|router| router.backend) == Some(next)
    })
    .await;
    assert!(!link.serves(&SERVING));
    assert!(link.serves(&next));
}

/// A supervisor with other settings or another build is waited out: the
/// link publishes the mismatch (never a final refusal), says hello again
/// with backoff, and once a supervisor with the same settings answers it is
/// connected and the mismatch is gone.
#[tokio::test(start_paused = true)]
async fn a_mismatched_supervisor_is_waited_out() {
    let mismatches = [
        (RefuseReason::Fingerprint, Mismatch::Config),
        (
            RefuseReason::ProtocolVersion {
                proxy: PROTOCOL_VERSION,
                supervisor: PROTOCOL_VERSION + 1,
            },
            Mismatch::Version,
        ),
    ];
    for (reason, mismatch) in mismatches {
        let fake = FakeSupervisor::new();
        let link = fake.link();
        // Refused three times: still waiting, never final.
        for _ in 0..3 {
            let mut peer = fake.accept().await;
            assert!(matches!(peer.recv().await, ProxyMessage::Hello { .. }));
            peer.send(reason.clone().into()).await;
            let state = wait_state(&link, |state| state.mismatch.is_some()).await;
            assert_eq!(state.mismatch, Some(mismatch));
            assert_eq!(state.refused, None);
            assert!(!state.connected);
            assert_eq!(link.routing_view().mismatch, Some(mismatch));
        }
        let (_handle, mut events) =
            link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
        assert_eq!(event(&mut events).await, TicketEvent::LinkLost);
        // The matching supervisor: connected, the mismatch forgotten.
        let mut peer = fake.accept().await;
        peer.welcome("inst-2", router_state(Some(SERVING))).await;
        let state = wait_state(&link, |state| state.connected).await;
        assert_eq!(state.mismatch, None);
        assert_eq!(state.instance_id.as_deref(), Some("inst-2"));
    }
}

/// A refusal for good (not the supervisor's user, a hello that was not
/// one), or any other answer to the hello (a `Welcome` of another protocol
/// version included), is final: the reason is published for the proxy to
/// exit with, the link never connects again, and tickets fail at once.
/// (Paused clock: waiting out many backoffs takes no time.)
#[tokio::test(start_paused = true)]
async fn a_refused_hello_is_final() {
    let cases = [
        (
            RefuseReason::WrongUser.into(),
            "permission denied: wrong user",
        ),
        (
            SupervisorMessage::Refused {
                reason: "a reason this build does not know".into(),
            },
            "a reason this build does not know",
        ),
        (
            SupervisorMessage::Welcome {
                protocol_version: PROTOCOL_VERSION + 1,
                instance_id: "i".into(),
                supervisor_pid: 1,
            },
            "unexpected answer to hello: Welcome",
        ),
    ];
    for (answer, reason) in cases {
        let fake = FakeSupervisor::new();
        let link = fake.link();
        let mut peer = fake.accept().await;
        assert!(matches!(peer.recv().await, ProxyMessage::Hello { .. }));
        peer.send(answer).await;
        let state = wait_state(&link, |state| state.refused.is_some()).await;
        assert!(!state.connected);
        assert!(
            state.refused.as_deref().unwrap().starts_with(reason),
            "{state:?}"
        );
        // A minute: thirty times the longest backoff (2 s). A link that
        // retried would have connected many times over.
        let again = tokio::time::timeout(
            Duration::from_secs(60),
            fake.listener.as_ref().unwrap().accept(),
        )
        .await;
        assert!(again.is_err(), "a refused link reconnected");
        let (_handle, mut events) =
            link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
        assert_eq!(event(&mut events).await, TicketEvent::LinkLost);
        assert_eq!(link.arrival().await, None);
    }
}

// ---- tickets -------------------------------------------------------------------------

/// Each ticket gets its own events, in the order the supervisor sent them;
/// events for another ticket, or for one this proxy does not know, never
/// reach it; after `Failed` the ticket is over.
#[tokio::test]
async fn ticket_events_reach_their_own_ticket_in_order() {
    let (_fake, link, mut peer) = connected().await;
    let (_first_handle, mut first) =
        link.enqueue("m", ServiceTier::Priority, ticket_request(), Bytes::new());
    let one = peer.enqueued("m", ServiceTier::Priority).await;
    let (_second_handle, mut second) =
        link.enqueue("n", ServiceTier::Flex, ticket_request(), Bytes::new());
    let two = peer.enqueued("n", ServiceTier::Flex).await;
    assert_ne!(one, two);

    let backend = "127.0.0.1:9".parse().unwrap();
    for message in [
        SupervisorMessage::Queued {
            ticket: two,
            arrival: arrival(2),
        },
        SupervisorMessage::Queued {
            ticket: one,
            arrival: arrival(1),
        },
        SupervisorMessage::Admitted { ticket: 999 },
        SupervisorMessage::Admitted { ticket: one },
        SupervisorMessage::Progress {
            ticket: one,
            phase: LoadPhase::WaitingForReadiness,
            elapsed_ms: 10,
            typical_load_ms: Some(9_000),
        },
        SupervisorMessage::Granted(grant(one, backend)),
        SupervisorMessage::Failed {
            ticket: two,
            arrival: arrival(2),
            failure: LeaseFailure::QueueTimeout,
        },
    ] {
        peer.send(message).await;
    }
    assert_eq!(event(&mut first).await, TicketEvent::Queued(arrival(1)));
    assert_eq!(event(&mut first).await, TicketEvent::Admitted);
    assert_eq!(
        event(&mut first).await,
        TicketEvent::Progress(LoadPhase::WaitingForReadiness, 10, Some(9_000))
    );
    assert_eq!(
        event(&mut first).await,
        TicketEvent::Granted(Box::new(grant(one, backend)))
    );
    assert_eq!(first.check(), Ok(()));

    assert_eq!(event(&mut second).await, TicketEvent::Queued(arrival(2)));
    assert_eq!(
        event(&mut second).await,
        TicketEvent::Failed {
            arrival: arrival(2),
            failure: LeaseFailure::QueueTimeout
        }
    );
    // Over: no more events, whatever the supervisor sends.
    assert_eq!(event(&mut second).await, TicketEvent::LinkLost);
}

/// `Revoked` ends the lease for the request (`check` and `ended` say so),
/// but the ticket is still this connection's until the request finishes
/// it: its `Finish` goes out as a `Finish`, which is what releases the
/// backend in the supervisor.
#[tokio::test]
async fn a_revoked_lease_ends_but_is_held_until_finished() {
    let (_fake, link, mut peer) = connected().await;
    let (handle, mut events) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let ticket = peer.enqueued("m", ServiceTier::Default).await;
    let backend = "127.0.0.1:9".parse().unwrap();
    peer.send(SupervisorMessage::Granted(grant(ticket, backend)))
        .await;
    assert!(matches!(event(&mut events).await, TicketEvent::Granted(_)));
    peer.send(SupervisorMessage::Revoked {
        ticket,
        reason: RevokeReason::Shutdown,
    })
    .await;
    let end = tokio::time::timeout(LIMIT, events.ended()).await.unwrap();
    assert_eq!(end, LeaseEnd::Revoked(RevokeReason::Shutdown));
    assert_eq!(
        events.check(),
        Err(LeaseEnd::Revoked(RevokeReason::Shutdown))
    );

    handle.finish(record("r-1"), ServiceTier::Default);
    match peer.recv().await {
        ProxyMessage::Finish {
            ticket: got,
            record,
        } => {
            assert_eq!(got, ticket);
            assert_eq!(record.record.request_id, "r-1");
        }
        other => panic!("expected Finish, got {other:?}"),
    }
}

/// The handle reports on its own ticket: `HeadersReceived`, then the one
/// `Finish` with the record.
#[tokio::test]
async fn the_handle_sends_headers_received_and_finish_for_its_ticket() {
    let (_fake, link, mut peer) = connected().await;
    let (handle, _events) = link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let ticket = peer.enqueued("m", ServiceTier::Default).await;
    handle.headers_received();
    assert_eq!(peer.recv().await, ProxyMessage::HeadersReceived { ticket });
    handle.finish(record("r-2"), ServiceTier::Default);
    assert_eq!(
        peer.recv().await,
        ProxyMessage::Finish {
            ticket,
            record: Box::new(SubmittedRecord {
                record: record("r-2"),
                tier: ServiceTier::Default,
            })
        }
    );
}

/// A `TicketHandle` is finished by the request's trace, and a trace that is
/// dropped unfinished (hyper cancelled the handler: the client went away)
/// still finishes its ticket, as a client disconnect in the phase it had
/// reached. (The handle alone has no `Drop`: the trace is what guarantees
/// the one `Finish`.)
#[tokio::test]
async fn a_dropped_trace_finishes_its_ticket_as_a_client_disconnect() {
    let (_fake, link, mut peer) = connected().await;
    let app = crate::app::App::for_tests(link.clone());
    let mut trace = crate::chat::trace::Trace::start(&app);
    let (handle, _events) = link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let ticket = peer.enqueued("m", ServiceTier::Default).await;
    trace.enqueued(handle);
    drop(trace);
    match peer.recv().await {
        ProxyMessage::Finish {
            ticket: got,
            record,
        } => {
            assert_eq!(got, ticket);
            assert_eq!(
                record.record.reason,
                strata_protocol::record::Reason::ClientDisconnect
            );
            assert_eq!(
                record.record.disconnect_phase,
                Some(strata_protocol::record::Phase::Queued)
            );
        }
        other => panic!("expected Finish, got {other:?}"),
    }
}

// ---- link loss and reconnect ----------------------------------------------------------

/// When the connection is lost, every ticket of it is over (the supervisor
/// dropped them with the socket): a waiting one gets `LinkLost`, a granted
/// one's lease ends, and no instance is served any more. The last state
/// is kept for `/v1/models`.
#[tokio::test]
async fn losing_the_link_ends_every_ticket_of_it() {
    let (mut fake, link, mut peer) = connected().await;
    let (_waiting_handle, mut waiting) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let _ = peer.enqueued("m", ServiceTier::Default).await;
    let (_granted_handle, mut granted) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let ticket = peer.enqueued("m", ServiceTier::Default).await;
    peer.send(SupervisorMessage::Granted(grant(
        ticket,
        "127.0.0.1:9".parse().unwrap(),
    )))
    .await;
    assert!(matches!(event(&mut granted).await, TicketEvent::Granted(_)));

    // A question in flight when the link goes.
    let asking = link.clone();
    let question = tokio::spawn(async move { asking.arrival().await });
    assert!(matches!(peer.recv().await, ProxyMessage::Arrive { .. }));

    // Unbound first, so the link cannot reconnect at once.
    fake.unbind();
    drop(peer);
    assert_eq!(event(&mut waiting).await, TicketEvent::LinkLost);
    let answer = tokio::time::timeout(LIMIT, question)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, None, "an unanswered question answers None");
    let end = tokio::time::timeout(LIMIT, granted.ended()).await.unwrap();
    assert_eq!(end, LeaseEnd::LinkLost);
    assert_eq!(granted.check(), Err(LeaseEnd::LinkLost));
    let state = wait_state(&link, |state| !state.connected).await;
    assert!(state.router.is_some(), "the last state is kept");
    assert!(!link.serves(&SERVING));
}

/// While the supervisor is unreachable nothing waits for it: a new ticket
/// fails at once, questions answer `None`, a flush answers `false`. What
/// must not be lost waits: records (finished tickets' too) and the
/// draining flag go out right after the next hello, in that order, and a
/// ticket of the old connection finished later is sent as a bare record
/// (the supervisor forgot the ticket with the connection).
#[tokio::test]
async fn the_link_reconnects_and_delivers_what_waited() {
    let (mut fake, link, mut peer) = connected().await;
    let (old_handle, _old_events) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let _ = peer.enqueued("m", ServiceTier::Default).await;
    let (later_handle, _later_events) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let _ = peer.enqueued("m", ServiceTier::Default).await;

    fake.unbind();
    drop(peer);
    wait_state(&link, |state| !state.connected).await;

    let (_handle, mut events) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    assert_eq!(event(&mut events).await, TicketEvent::LinkLost);
    assert_eq!(link.arrival().await, None);
    assert_eq!(link.records(None, 10).await, None);
    assert_eq!(link.metrics().await, None);
    // Answered `false` at once, not when its own (long) bound runs out.
    let flushed = tokio::time::timeout(LIMIT, link.flush(LIMIT * 100)).await;
    assert_eq!(flushed, Ok(false));
    link.submit_record(record("kept-1"), ServiceTier::Default);
    old_handle.finish(record("kept-2"), ServiceTier::Default);
    link.set_draining(true);

    fake.rebind();
    let mut peer = fake.accept().await;
    peer.welcome("inst-2", router_state(None)).await;
    assert_eq!(
        peer.recv().await,
        ProxyMessage::SetDraining { draining: true }
    );
    assert_eq!(submitted(peer.recv().await), "kept-1");
    assert_eq!(submitted(peer.recv().await), "kept-2");
    let state = wait_state(&link, |state| state.connected).await;
    assert_eq!(state.instance_id.as_deref(), Some("inst-2"));

    later_handle.finish(record("late"), ServiceTier::Default);
    assert_eq!(submitted(peer.recv().await), "late");
}

/// A frame from the supervisor that does not decode cannot be matched to a
/// ticket, so the connection is dropped as lost (its tickets end, and the
/// supervisor releases them when the socket closes) and the link
/// reconnects.
#[tokio::test]
async fn an_undecodable_frame_from_the_supervisor_is_a_lost_link() {
    let (fake, link, mut peer) = connected().await;
    let (_handle, mut events) =
        link.enqueue("m", ServiceTier::Default, ticket_request(), Bytes::new());
    let _ = peer.enqueued("m", ServiceTier::Default).await;
    // Variant index 200 does not exist.
    peer.stream.write_all(&[0, 0, 0, 1, 200]).await.unwrap();
    assert_eq!(event(&mut events).await, TicketEvent::LinkLost);
    let mut again = fake.accept().await;
    again.welcome("inst-1", router_state(Some(SERVING))).await;
    wait_state(&link, |state| state.connected).await;
}

/// A supervisor that accepts the connection but never answers the hello is
/// given up on after the hello timeout (10 s), and tried again after a
/// backoff; the link never counts as connected meanwhile. (Paused clock.)
#[tokio::test(start_paused = true)]
async fn an_unanswered_hello_is_given_up_and_retried() {
    let fake = FakeSupervisor::new();
    let link = fake.link();
    let mut silent = fake.accept().await;
    let started = tokio::time::Instant::now();
    assert!(matches!(silent.recv().await, ProxyMessage::Hello { .. }));
    let mut again = fake.accept_within(Duration::from_secs(60)).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited <= Duration::from_secs(12),
        "retried after {waited:?}"
    );
    assert!(!link.state().connected);
    again.welcome("inst-1", router_state(None)).await;
    wait_state(&link, |state| state.connected).await;
}

// ---- questions answered by the supervisor ---------------------------------------------

/// Arrivals, `/requests` pages and `/metrics` are answered by token, so
/// answers in another order still reach the right caller; an answer to a
/// question nobody asked is ignored.
#[tokio::test]
async fn questions_are_matched_to_their_answers_by_token() {
    let (_fake, link, mut peer) = connected().await;
    let asking = link.clone();
    let asked = tokio::spawn(async move {
        tokio::join!(
            asking.arrival(),
            asking.records(Some(5), 7),
            asking.metrics()
        )
    });
    let mut arrive = None;
    let mut page = None;
    let mut figures = None;
    for _ in 0..3 {
        match peer.recv().await {
            ProxyMessage::Arrive { token } => arrive = Some(token),
            ProxyMessage::QueryRecords {
                query,
                after,
                limit,
            } => {
                assert_eq!((after, limit), (Some(5), 7));
                page = Some(query);
            }
            ProxyMessage::QueryMetrics { query } => figures = Some(query),
            other => panic!("unexpected {other:?}"),
        }
    }
    let (arrive, page, figures) = (arrive.unwrap(), page.unwrap(), figures.unwrap());
    let metrics = RouterMetrics {
        queue_depth: 1,
        queue_depth_by_tier: [0, 1, 0],
        queue_depth_by_model: Default::default(),
        in_flight: 2,
        proxies: 1,
        model_loads: Default::default(),
        model_switches: Default::default(),
        prefetch: Default::default(),
        in_flight_requests: Vec::new(),
        requests: Default::default(),
        supervisor_process: Default::default(),
        request_log: RequestLogStats {
            write_errors: 0,
            write_drops: 0,
            evicted: 0,
            records_in_ring: 3,
            next_seq: 4,
            instance_id: "inst-1".into(),
        },
    };
    peer.send(SupervisorMessage::Arrival {
        token: 9999,
        arrival: arrival(99),
    })
    .await;
    peer.send(SupervisorMessage::Metrics {
        query: figures,
        metrics: Box::new(metrics.clone()),
    })
    .await;
    let sent_page = RecordsPage {
        records: vec![],
        next_seq: 0,
        dropped: 0,
        oldest_seq: None,
        instance_id: "inst".into(),
    };
    peer.send(SupervisorMessage::Records {
        query: page,
        page: sent_page.clone(),
    })
    .await;
    peer.send(SupervisorMessage::Arrival {
        token: arrive,
        arrival: arrival(7),
    })
    .await;
    let (got_arrival, got_page, got_metrics) =
        tokio::time::timeout(LIMIT, asked).await.unwrap().unwrap();
    assert_eq!(got_arrival, Some(arrival(7)));
    assert_eq!(got_page, Some(sent_page));
    assert_eq!(got_metrics, Some(metrics));
}

/// A record without a ticket goes out as `SubmitRecord`; a flush returns
/// once everything handed over before it is written.
#[tokio::test]
async fn records_are_submitted_and_flushed() {
    let (_fake, link, mut peer) = connected().await;
    link.submit_record(record("solo-1"), ServiceTier::Default);
    link.submit_record(record("solo-2"), ServiceTier::Default);
    assert!(link.flush(LIMIT).await);
    assert_eq!(submitted(peer.recv().await), "solo-1");
    assert_eq!(submitted(peer.recv().await), "solo-2");
}

// ---- cache lookups -------------------------------------------------------------------

/// How the fake backend answers one `POST /v1/cache/lookup`.
#[derive(Debug, Clone)]
enum Answer {
    /// 200 with a score for every ticket of the request: ID `n` has
    /// `10 * n` input tokens, `n` of them cached.
    Scores,
    /// This status, with an empty JSON object.
    Status(u16),
    /// 200 with this body.
    Body(&'static str),
    /// Read the request, never answer.
    Hang,
}

/// What the fake backend was asked: the path and the request body.
type Asked = tokio::sync::mpsc::UnboundedReceiver<(String, serde_json::Value)>;

/// A loopback listener answering lookups in the order of `answers` (the
/// last one repeats).
async fn fake_backend(answers: Vec<Answer>) -> (std::net::SocketAddr, Asked) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (asked_tx, asked) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        // Connections that got no answer stay open here.
        let mut hung = Vec::new();
        for n in 0.. {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let answer = answers
                .get(n)
                .or(answers.last())
                .cloned()
                .expect("an answer");
            let (path, body) = read_request(&mut stream).await;
            let value: serde_json::Value =
                serde_json::from_slice(&body).expect("the lookup body is JSON");
            let _ = asked_tx.send((path, value.clone()));
            let (status, reply) = match answer {
                Answer::Scores => (200, scores_for(&value)),
                Answer::Status(status) => (status, "{}".to_string()),
                Answer::Body(body) => (200, body.to_string()),
                Answer::Hang => {
                    hung.push(stream);
                    continue;
                }
            };
            let head = format!(
                "HTTP/1.0 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                reply.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    (addr, asked)
}

/// Reads one HTTP/1 request with a `Content-Length` body.
async fn read_request(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.expect("read the request");
        assert!(n > 0, "the request ended inside its head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("a content-length");
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.expect("read the body");
        assert!(n > 0, "the request ended inside its body");
        buf.extend_from_slice(&chunk[..n]);
    }
    (path, buf[head_end..head_end + length].to_vec())
}

fn scores_for(request: &serde_json::Value) -> String {
    let results: Vec<serde_json::Value> = request["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let id: u64 = item["id"].as_str().unwrap().parse().unwrap();
            serde_json::json!({"id": id.to_string(), "input_tokens": 10 * id, "cached_tokens": id})
        })
        .collect();
    serde_json::json!({"min_tokens": 64, "results": results}).to_string()
}

fn score(ticket: TicketId) -> TicketScore {
    TicketScore {
        ticket,
        input_tokens: 10 * ticket,
        cached_tokens: ticket,
    }
}

fn body_of(ticket: TicketId) -> Bytes {
    Bytes::from(format!(
        "{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":\"t{ticket}\"}}]}}"
    ))
}

/// The IDs of one lookup request, and each body as the client sent it.
fn ids_and_bodies(request: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    request["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["id"].as_str().unwrap().to_owned(),
                item["body"].clone(),
            )
        })
        .collect()
}

/// Twenty tickets go to the backend as one batch of sixteen, then one of
/// four, each body unchanged; the scores come back merged, in ticket order.
#[tokio::test]
async fn a_lookup_posts_batches_of_sixteen_and_merges_the_scores() {
    let (backend, mut asked) = fake_backend(vec![Answer::Scores]).await;
    let bodies: Vec<(TicketId, Bytes)> = (1..=20).map(|t| (t, body_of(t))).collect();
    let scores = lookup::run(backend, bodies, LIMIT).await;
    assert_eq!(
        scores,
        Ok(CacheScores {
            min_tokens: 64,
            results: (1..=20).map(score).collect(),
        })
    );
    let mut batches = Vec::new();
    while let Ok((path, request)) = asked.try_recv() {
        assert_eq!(path, "/v1/cache/lookup");
        batches.push(ids_and_bodies(&request));
    }
    assert_eq!(
        batches.iter().map(Vec::len).collect::<Vec<_>>(),
        [lookup::BATCH, 20 - lookup::BATCH]
    );
    let sent: Vec<(String, serde_json::Value)> = batches.into_iter().flatten().collect();
    let expected: Vec<(String, serde_json::Value)> = (1..=20)
        .map(|t| (t.to_string(), serde_json::from_slice(&body_of(t)).unwrap()))
        .collect();
    assert_eq!(sent, expected);
}

/// One failed batch fails the whole lookup, whatever the earlier batches
/// scored; and each way a backend can fail has its own `LookupFailure`.
#[tokio::test]
async fn every_backend_failure_fails_the_whole_lookup() {
    let twenty: Vec<(TicketId, Bytes)> = (1..=20).map(|t| (t, body_of(t))).collect();
    let cases = [
        (
            vec![Answer::Scores, Answer::Status(409)],
            LookupFailure::Busy,
        ),
        (vec![Answer::Status(404)], LookupFailure::Unsupported),
        (vec![Answer::Status(500)], LookupFailure::Invalid),
        (vec![Answer::Body("not json")], LookupFailure::Invalid),
        (
            vec![Answer::Body(
                r#"{"min_tokens":1,"results":[{"id":"1","input_tokens":1,"cached_tokens":0}]}"#,
            )],
            LookupFailure::Invalid,
        ),
    ];
    for (answers, failure) in cases {
        let (backend, _asked) = fake_backend(answers.clone()).await;
        assert_eq!(
            lookup::run(backend, twenty.clone(), LIMIT).await,
            Err(failure),
            "{answers:?}"
        );
    }
}

/// Nobody listening at the backend address: `Unavailable`.
#[tokio::test]
async fn a_backend_that_is_not_there_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = listener.local_addr().unwrap();
    drop(listener);
    assert_eq!(
        lookup::run(backend, vec![(1, body_of(1))], LIMIT).await,
        Err(LookupFailure::Unavailable)
    );
}

/// A backend that never answers: the lookup gives up when its budget runs
/// out, not later. (Paused clock: the budget passes at once.)
#[tokio::test(start_paused = true)]
async fn a_silent_backend_times_the_lookup_out_at_its_budget() {
    let (backend, _asked) = fake_backend(vec![Answer::Hang]).await;
    let budget = Duration::from_millis(750);
    let started = tokio::time::Instant::now();
    assert_eq!(
        lookup::run(backend, vec![(1, body_of(1))], budget).await,
        Err(LookupFailure::Timeout)
    );
    assert_eq!(started.elapsed(), budget);
}

/// Through the link: the supervisor's `ScoreTickets` is answered with the
/// scores of the bodies this proxy holds for those tickets. A granted
/// ticket's body is gone (it went to the backend), and an unknown ticket
/// has none: either makes the lookup `UnknownTickets`, without asking the
/// backend.
#[tokio::test]
async fn score_tickets_is_answered_with_the_held_bodies() {
    let (_fake, link, mut peer) = connected().await;
    let (backend, mut asked) = fake_backend(vec![Answer::Scores]).await;
    let mut tickets = Vec::new();
    let mut handles = Vec::new();
    for n in 0..3 {
        let (handle, events) = link.enqueue(
            "m",
            ServiceTier::Default,
            ticket_request(),
            body_of(100 + n),
        );
        tickets.push(peer.enqueued("m", ServiceTier::Default).await);
        handles.push((handle, events));
    }
    peer.send(SupervisorMessage::ScoreTickets {
        lookup: 21,
        backend,
        tickets: tickets.clone(),
        budget_ms: LIMIT.as_millis() as u64,
    })
    .await;
    let ProxyMessage::TicketScores { lookup, scores } = peer.recv().await else {
        panic!("expected TicketScores");
    };
    assert_eq!(lookup, 21);
    assert_eq!(
        scores,
        Ok(CacheScores {
            min_tokens: 64,
            results: tickets.iter().copied().map(score).collect(),
        })
    );
    let (_, request) = asked.try_recv().expect("the backend was asked");
    let sent = ids_and_bodies(&request);
    for ((id, body), (ticket, n)) in sent.iter().zip(tickets.iter().zip(100..)) {
        assert_eq!(id, &ticket.to_string());
        assert_eq!(
            body,
            &serde_json::from_slice::<serde_json::Value>(&body_of(n)).unwrap()
        );
    }

    // Granted: the body is released.
    peer.send(SupervisorMessage::Granted(grant(tickets[0], backend)))
        .await;
    assert!(matches!(
        event(&mut handles[0].1).await,
        TicketEvent::Granted(_)
    ));
    for (lookup, names) in [
        (22, vec![tickets[0], tickets[1]]),
        (23, vec![tickets[1], 999]),
    ] {
        peer.send(SupervisorMessage::ScoreTickets {
            lookup,
            backend,
            tickets: names,
            budget_ms: 1000,
        })
        .await;
        assert_eq!(
            peer.recv().await,
            ProxyMessage::TicketScores {
                lookup,
                scores: Err(LookupFailure::UnknownTickets)
            }
        );
    }
    assert!(asked.try_recv().is_err(), "the backend was asked again");
}
