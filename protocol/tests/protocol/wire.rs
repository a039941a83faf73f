//! Every supervisor-socket message survives a frame round trip, the
//! encoding is pinned together with `PROTOCOL_VERSION` (and the hello
//! frames for every version), and the framing rejects oversized, truncated
//! and malformed input.

use strata_protocol::config::{ModelStatus, ReadinessBasis, ReadinessChoice, ReadinessMode};
use strata_protocol::page::RecordsPage;
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{
    ArrivalInfo, BackendHealth, BackendInstance, BackendState, CacheScores, FrameReader, Grant,
    LeaseFailure, LoadPhase, LookupFailure, MAX_FRAME_BYTES, ModelStatusEntry, PROTOCOL_VERSION,
    ProxyMessage, RequestLogStats, RevokeReason, RouterMetrics, RouterState, ServiceTier,
    SubmittedRecord, SupervisorMessage, TicketRequest, TicketScore, WireError, decode_payload,
    encode_frame, encode_frame_into, proxy_frame_limit, read_frame, write_frame,
};

fn sample_request() -> TicketRequest {
    TicketRequest {
        model_requested: "qwen3.8-flash".into(),
        stream: true,
        arrived_unix_ms: 1_764_474_000_123,
    }
}

fn sample_record() -> RequestRecord {
    let json = serde_json::json!({
        "schema_version": 1, "seq": 0, "arrival_seq": 7, "request_id": "1-2-7",
        "endpoint": "/v1/chat/completions", "stream": true, "model_requested": "qwen3.8-flash-next",
        "model_resolved": "m", "upstream_model": "up-m",
        "arrived_at": "2026-11-30T04:58:45.123Z", "completed_at": "2026-11-30T04:58:46.000Z",
        "lease_at": "2026-11-30T04:58:45.124Z", "first_token_at": null, "last_token_at": null,
        "queue_depth_at_arrival": 0, "in_flight_at_arrival": 1, "queue_wait_ms": 1,
        "model_switch": true, "model_load_ms": 800, "upstream_headers_ms": 810,
        "ttft_ms": null, "ttft_after_lease_ms": null, "generation_ms": null, "total_ms": 877,
        "prompt_tokens": 22, "completion_tokens": 5, "reasoning_tokens": null,
        "prompt_n": 22, "cache_n": 0, "predicted_n": 5, "prompt_ms": 11.25, "predicted_ms": 500.25,
        "prompt_per_second": 1955.556, "predicted_per_second": 9.995, "finish_reason": "stop",
        "status": 200, "upstream_status": 200, "success": true, "reason": "completed",
        "response_bytes": 1234, "disconnect_phase": null
    });
    serde_json::from_value(json).unwrap()
}

fn arrival(seq: u64) -> ArrivalInfo {
    ArrivalInfo {
        arrival_seq: seq,
        queue_depth: 3,
        in_flight: u64::MAX,
    }
}

fn proxy_messages() -> Vec<ProxyMessage> {
    let mut out = vec![
        ProxyMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            fingerprint: 0xdead_beef_cafe_f00d,
            pid: 4242,
        },
        ProxyMessage::Enqueue {
            ticket: 7,
            model: "qwen3.8-flash-next-q4_k_m".into(),
            tier: ServiceTier::Priority,
            request: sample_request(),
        },
        ProxyMessage::Enqueue {
            ticket: 8,
            model: "m".into(),
            tier: ServiceTier::Flex,
            request: sample_request(),
        },
        ProxyMessage::HeadersReceived { ticket: 8 },
        ProxyMessage::Finish {
            ticket: u64::MAX,
            record: Box::new(SubmittedRecord {
                record: sample_record(),
                tier: ServiceTier::Priority,
            }),
        },
        ProxyMessage::SetDraining { draining: true },
        ProxyMessage::Arrive { token: 99 },
        ProxyMessage::SubmitRecord {
            record: Box::new(SubmittedRecord {
                record: sample_record(),
                tier: ServiceTier::Flex,
            }),
        },
        ProxyMessage::QueryRecords {
            query: 1,
            after: Some(123),
            limit: 100,
        },
        ProxyMessage::QueryRecords {
            query: 2,
            after: None,
            limit: 1000,
        },
        ProxyMessage::QueryMetrics { query: 3 },
        ProxyMessage::TicketScores {
            lookup: 4,
            scores: Ok(CacheScores {
                min_tokens: 1024,
                results: vec![TicketScore {
                    ticket: 7,
                    input_tokens: 2048,
                    cached_tokens: 1800,
                }],
            }),
        },
    ];
    for failure in [
        LookupFailure::Unsupported,
        LookupFailure::Busy,
        LookupFailure::Timeout,
        LookupFailure::Unavailable,
        LookupFailure::Invalid,
        LookupFailure::UnknownTickets,
    ] {
        out.push(ProxyMessage::TicketScores {
            lookup: 5,
            scores: Err(failure),
        });
    }
    out
}

fn supervisor_messages() -> Vec<SupervisorMessage> {
    let mut out = vec![
        SupervisorMessage::Welcome {
            protocol_version: PROTOCOL_VERSION,
            instance_id: "1-2".into(),
            supervisor_pid: 1,
        },
        SupervisorMessage::Refused {
            reason: "registry fingerprint differs".into(),
        },
        SupervisorMessage::State(RouterState {
            routing: true,
            draining: false,
            loaded: Some("a".into()),
            loading: None,
            backend: Some(BackendInstance {
                epoch: 7,
                pid: 4242,
            }),
            last_startup_error: Some("backend exited during startup (exit code 3)".into()),
            statuses: vec![
                ModelStatusEntry {
                    id: "a".into(),
                    status: ModelStatus::Loaded,
                    last_error: None,
                    cooldown_remaining_ms: None,
                    typical_load_ms: Some(21_500),
                },
                ModelStatusEntry {
                    id: "b".into(),
                    status: ModelStatus::InvalidProfile,
                    last_error: Some("backend exited during startup (exit code 3)".into()),
                    cooldown_remaining_ms: Some(29_000),
                    typical_load_ms: None,
                },
            ],
            backend_health: BackendHealth {
                state: BackendState::Unresponsive,
                last_good_probe_unix_ms: Some(1_764_650_000_000),
                cause: Some("no answer to GET /health for 3 probes in a row".into()),
            },
            readiness: Some(ReadinessChoice {
                mode: ReadinessMode::Health,
                basis: ReadinessBasis::HelpLacksReadyFile,
            }),
        }),
        SupervisorMessage::Queued {
            ticket: 1,
            arrival: arrival(1),
        },
        SupervisorMessage::Admitted { ticket: 1 },
        SupervisorMessage::Granted(Grant {
            ticket: 3,
            arrival: arrival(3),
            backend: "127.0.0.1:8095".parse().unwrap(),
            instance: BackendInstance { epoch: 1, pid: 2 },
            upstream_model: "qwen".into(),
            model_switch: true,
            load_ms: Some(9300),
        }),
        SupervisorMessage::Granted(Grant {
            ticket: 4,
            arrival: arrival(u64::MAX),
            backend: "[::1]:1".parse().unwrap(),
            instance: BackendInstance {
                epoch: u64::MAX,
                pid: u32::MAX,
            },
            upstream_model: String::new(),
            model_switch: false,
            load_ms: None,
        }),
        SupervisorMessage::Revoked {
            ticket: 3,
            reason: RevokeReason::RoutingOff,
        },
        SupervisorMessage::Revoked {
            ticket: 4,
            reason: RevokeReason::Shutdown,
        },
        SupervisorMessage::Revoked {
            ticket: 3,
            reason: RevokeReason::BackendUnresponsive,
        },
        SupervisorMessage::Arrival {
            token: 99,
            arrival: arrival(1),
        },
        SupervisorMessage::Records {
            query: 1,
            page: RecordsPage {
                records: vec![sample_record().to_json().into()],
                next_seq: 1,
                dropped: 0,
                oldest_seq: Some(1),
                instance_id: "inst".into(),
            },
        },
        SupervisorMessage::Metrics {
            query: 3,
            metrics: Box::new(RouterMetrics {
                queue_depth: 6,
                queue_depth_by_tier: [1, 2, 3],
                queue_depth_by_model: [("a".to_owned(), 4), ("b".to_owned(), 2)].into(),
                in_flight: 2,
                proxies: 1,
                model_loads: [(("a".to_owned(), "verified".to_owned()), 3)].into(),
                model_switches: [("grace_expired".to_owned(), 2)].into(),
                prefetch: [
                    (
                        "a".to_owned(),
                        strata_protocol::wire::PrefetchFigures {
                            bytes: 1 << 30,
                            seconds: 0.75,
                            resident_at_load: Some(0.98),
                        },
                    ),
                    ("b".to_owned(), Default::default()),
                ]
                .into(),
                supervisor_process: strata_protocol::wire::ProcessFigures {
                    cpu_seconds: Some(1.25),
                    resident_memory_bytes: Some(24 << 20),
                    virtual_memory_bytes: None,
                    open_fds: Some(17),
                    max_fds: Some(20_000),
                    start_time_seconds: Some(1.8e9),
                },
                in_flight_requests: vec![strata_protocol::api::InFlightRequest {
                    request_id: "inst-4".into(),
                    model: "a".into(),
                    tier: "flex".into(),
                    stage: "waiting".into(),
                    age_ms: 12,
                }],
                requests: {
                    let mut stats = strata_protocol::stats::RequestStats::default();
                    stats.observe(&sample_record(), ServiceTier::Priority);
                    stats
                },
                request_log: RequestLogStats {
                    write_errors: 1,
                    write_drops: 2,
                    evicted: 3,
                    records_in_ring: 4,
                    next_seq: 5,
                    instance_id: "1-2".into(),
                },
            }),
        },
        SupervisorMessage::ScoreTickets {
            lookup: 9,
            backend: "127.0.0.1:8095".parse().unwrap(),
            tickets: vec![1, 2, u64::MAX],
            budget_ms: 1000,
        },
        SupervisorMessage::ProtocolError {
            message: "malformed frame".into(),
        },
    ];
    for phase in [
        LoadPhase::StoppingOldBackend,
        LoadPhase::Starting,
        LoadPhase::WaitingForReadiness,
        LoadPhase::CheckingHealth,
        LoadPhase::Verified,
    ] {
        out.push(SupervisorMessage::Progress {
            ticket: 1,
            phase,
            elapsed_ms: 12,
            typical_load_ms: Some(20_000),
        });
    }
    for failure in [
        LeaseFailure::RoutingOff,
        LeaseFailure::UnknownModel,
        LeaseFailure::NotPrepared {
            status: ModelStatus::MissingProfile,
        },
        LeaseFailure::LoadFailed {
            message: "backend did not become ready within 120000 ms".into(),
            model_switch: true,
            load_ms: Some(120_450),
            cooldown_ms: 30_000,
            typical_load_ms: Some(21_000),
        },
        LeaseFailure::Cooldown {
            message: "x".into(),
            remaining_ms: 29_000,
            typical_load_ms: None,
        },
        LeaseFailure::QueueFull,
        LeaseFailure::QueueTimeout,
        LeaseFailure::ShuttingDown,
    ] {
        out.push(SupervisorMessage::Failed {
            ticket: 2,
            arrival: arrival(2),
            failure,
        });
    }
    out
}

/// The variant names of `ProxyMessage`. No wildcard: a new variant stops
/// this from compiling until it has a name here and a sample in
/// [`proxy_messages`], so the golden hash below covers it.
fn proxy_variant(message: &ProxyMessage) -> &'static str {
    match message {
        ProxyMessage::Hello { .. } => "Hello",
        ProxyMessage::Enqueue { .. } => "Enqueue",
        ProxyMessage::HeadersReceived { .. } => "HeadersReceived",
        ProxyMessage::Finish { .. } => "Finish",
        ProxyMessage::Arrive { .. } => "Arrive",
        ProxyMessage::SubmitRecord { .. } => "SubmitRecord",
        ProxyMessage::SetDraining { .. } => "SetDraining",
        ProxyMessage::QueryRecords { .. } => "QueryRecords",
        ProxyMessage::QueryMetrics { .. } => "QueryMetrics",
        ProxyMessage::TicketScores { .. } => "TicketScores",
    }
}

/// The variant names of `SupervisorMessage` (see [`proxy_variant`]).
fn supervisor_variant(message: &SupervisorMessage) -> &'static str {
    match message {
        SupervisorMessage::Welcome { .. } => "Welcome",
        SupervisorMessage::Refused { .. } => "Refused",
        SupervisorMessage::State(_) => "State",
        SupervisorMessage::Queued { .. } => "Queued",
        SupervisorMessage::Admitted { .. } => "Admitted",
        SupervisorMessage::Progress { .. } => "Progress",
        SupervisorMessage::Granted(_) => "Granted",
        SupervisorMessage::Failed { .. } => "Failed",
        SupervisorMessage::Revoked { .. } => "Revoked",
        SupervisorMessage::ProtocolError { .. } => "ProtocolError",
        SupervisorMessage::Arrival { .. } => "Arrival",
        SupervisorMessage::Records { .. } => "Records",
        SupervisorMessage::Metrics { .. } => "Metrics",
        SupervisorMessage::ScoreTickets { .. } => "ScoreTickets",
    }
}

/// Every variant of both enums has a sample, so a change to any of them
/// changes the golden hash.
#[test]
fn every_variant_has_a_sample() {
    let proxy: std::collections::BTreeSet<_> = proxy_messages().iter().map(proxy_variant).collect();
    assert_eq!(
        proxy.len(),
        10,
        "a ProxyMessage variant has no sample: {proxy:?}"
    );
    let supervisor: std::collections::BTreeSet<_> = supervisor_messages()
        .iter()
        .map(supervisor_variant)
        .collect();
    assert_eq!(
        supervisor.len(),
        14,
        "a SupervisorMessage variant has no sample: {supervisor:?}"
    );
}

/// FNV-1a, 64 bits: a hash written out here, so the pin below never moves
/// with a library.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The wire format as of a protocol version: `PROTOCOL_VERSION` and the
/// hash of every sample message's frame. Round trips cannot notice a change
/// (both ends are built from the same source); this can.
const PINNED_WIRE: (u32, u64) = (15, 0xda44_0698_8630_db44);

/// A change to any message's shape (a field, a variant, its order or type)
/// changes the encoded samples; the test fails until `PROTOCOL_VERSION` and
/// the pin are updated together.
#[test]
fn the_encoding_is_pinned_with_the_protocol_version() {
    let mut frames = Vec::new();
    for message in proxy_messages() {
        encode_frame_into(&mut frames, &message).unwrap();
    }
    for message in supervisor_messages() {
        encode_frame_into(&mut frames, &message).unwrap();
    }
    let hash = fnv1a_64(&frames);
    let (version, pinned) = PINNED_WIRE;
    assert!(
        (PROTOCOL_VERSION, hash) == PINNED_WIRE,
        "the supervisor-socket encoding is ({PROTOCOL_VERSION}, {hash:#018x}), pinned as \
         ({version}, {pinned:#018x}). If a message or field changed shape, bump PROTOCOL_VERSION \
         (protocol/src/wire/messages.rs), run this test again and pin the pair it prints in \
         PINNED_WIRE; if only the samples here changed, pin the new hash with the same version."
    );
}

/// The hello and its two answers are how builds of different protocol
/// versions tell each other apart: whatever its version, a proxy must be
/// able to send a hello any supervisor reads, and to read the `Welcome` (to
/// compare its version) or the `Refused` (to log why and exit 78) that
/// comes back. So these three frames are the same bytes in every version,
/// whatever else changes; this pins them, with a literal version number.
#[test]
fn the_hello_frames_are_the_same_in_every_protocol_version() {
    let why = "the Hello, Welcome and Refused frames must decode alike in every protocol version \
               (a proxy of another version could no longer be told why it is refused): keep \
               their variant index and fields, and change the rest of the protocol instead";
    let hello = ProxyMessage::Hello {
        protocol_version: 7,
        fingerprint: 0x0102_0304_0506_0708,
        pid: 4242,
    };
    assert_eq!(
        encode_frame(&hello).unwrap(),
        [0, 0, 0, 14, 0, 7, 253, 8, 7, 6, 5, 4, 3, 2, 1, 251, 146, 16],
        "{why}"
    );
    let welcome = SupervisorMessage::Welcome {
        protocol_version: 7,
        instance_id: "4242-1".into(),
        supervisor_pid: 4242,
    };
    assert_eq!(
        encode_frame(&welcome).unwrap(),
        [0, 0, 0, 12, 0, 7, 6, 52, 50, 52, 50, 45, 49, 251, 146, 16],
        "{why}"
    );
    let refused = SupervisorMessage::Refused {
        reason: "no".into(),
    };
    assert_eq!(
        encode_frame(&refused).unwrap(),
        [0, 0, 0, 4, 1, 2, 110, 111],
        "{why}"
    );
}

#[test]
fn every_message_round_trips_through_a_frame() {
    for msg in proxy_messages() {
        let frame = encode_frame(&msg).unwrap();
        let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4);
        let back: ProxyMessage = decode_payload(&frame[4..]).unwrap();
        assert_eq!(back, msg);
    }
    for msg in supervisor_messages() {
        let frame = encode_frame(&msg).unwrap();
        let back: SupervisorMessage = decode_payload(&frame[4..]).unwrap();
        assert_eq!(back, msg);
    }
}

#[tokio::test]
async fn frames_stream_over_a_byte_pipe() {
    let (mut client, mut server) = tokio::io::duplex(64);
    let sent = supervisor_messages();
    let expected = sent.clone();
    let writer = tokio::spawn(async move {
        for msg in &sent {
            write_frame(&mut client, msg).await.unwrap();
        }
        // Dropping the writer closes the pipe between frames.
    });
    let mut got = Vec::new();
    while let Some(msg) = read_frame::<_, SupervisorMessage>(&mut server)
        .await
        .unwrap()
    {
        got.push(msg);
    }
    writer.await.unwrap();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn oversized_length_prefix_is_rejected_before_reading_the_payload() {
    let prefix = (MAX_FRAME_BYTES + 1).to_be_bytes();
    let mut input: &[u8] = &prefix;
    let err = read_frame::<_, ProxyMessage>(&mut input).await.unwrap_err();
    assert!(matches!(err, WireError::TooLarge { .. }), "{err}");
}

#[test]
fn oversized_message_cannot_be_encoded() {
    let msg = ProxyMessage::Enqueue {
        ticket: 1,
        model: "x".repeat(MAX_FRAME_BYTES as usize + 1),
        tier: ServiceTier::Default,
        request: sample_request(),
    };
    assert!(encode_frame(&msg).is_err());
}

#[tokio::test]
async fn truncated_frame_is_an_error_not_a_clean_close() {
    let frame = encode_frame(&ProxyMessage::SetDraining { draining: false }).unwrap();
    for cut in 1..frame.len() {
        let mut input: &[u8] = &frame[..cut];
        let result = read_frame::<_, ProxyMessage>(&mut input).await;
        assert!(result.is_err(), "cut at {cut} should fail");
    }
    let mut empty: &[u8] = &[];
    assert!(
        read_frame::<_, ProxyMessage>(&mut empty)
            .await
            .unwrap()
            .is_none()
    );
}

#[test]
fn garbage_and_trailing_bytes_are_decode_errors() {
    assert!(matches!(
        decode_payload::<ProxyMessage>(&[0xff, 0xff, 0xff]),
        Err(WireError::Decode(_))
    ));
    let frame = encode_frame(&ProxyMessage::HeadersReceived { ticket: 1 }).unwrap();
    let mut payload = frame[4..].to_vec();
    payload.push(0);
    assert!(matches!(
        decode_payload::<ProxyMessage>(&payload),
        Err(WireError::Decode(_))
    ));
}

/// A `FrameReader` takes every frame out of one read, whatever the split of the bytes, and
/// its `next` can be cancelled mid-frame without losing or corrupting anything.
#[tokio::test]
async fn the_frame_reader_reads_any_split_and_survives_cancellation() {
    let messages = proxy_messages();
    let mut bytes = Vec::new();
    for message in &messages {
        encode_frame_into(&mut bytes, message).unwrap();
    }
    // All at once: one read holds every frame.
    let mut reader = FrameReader::new(&bytes[..]);
    for message in &messages {
        assert_eq!(
            reader.next::<ProxyMessage>().await.unwrap().as_ref(),
            Some(message)
        );
    }
    assert!(reader.next::<ProxyMessage>().await.unwrap().is_none());

    // A byte at a time, with a `next` cancelled while a frame is half there.
    let (mut client, server) = tokio::io::duplex(64);
    let mut reader = FrameReader::new(server);
    let mut got = Vec::new();
    for (i, byte) in bytes.iter().enumerate() {
        tokio::io::AsyncWriteExt::write_all(&mut client, &[*byte])
            .await
            .unwrap();
        if i % 7 == 3 {
            // Nothing complete may be due yet, or it is; either way the bytes stay.
            let polled =
                tokio::time::timeout(std::time::Duration::ZERO, reader.next::<ProxyMessage>())
                    .await;
            if let Ok(frame) = polled {
                got.push(frame.unwrap().unwrap());
            }
        }
    }
    drop(client);
    while let Some(message) = reader.next::<ProxyMessage>().await.unwrap() {
        got.push(message);
    }
    assert_eq!(got, messages);
}

#[tokio::test]
async fn the_frame_reader_refuses_what_read_frame_refuses() {
    // An oversized prefix, before any payload.
    let prefix = (MAX_FRAME_BYTES + 1).to_be_bytes();
    let mut reader = FrameReader::new(&prefix[..]);
    assert!(matches!(
        reader.next::<ProxyMessage>().await,
        Err(WireError::TooLarge { .. })
    ));
    // A close inside a frame.
    let frame = encode_frame(&ProxyMessage::QueryMetrics { query: 1 }).unwrap();
    let mut reader = FrameReader::new(&frame[..frame.len() - 1]);
    assert!(matches!(
        reader.next::<ProxyMessage>().await,
        Err(WireError::Io(_))
    ));
    // A frame that does not decode is consumed whole: the next one reads.
    let mut bytes = vec![0, 0, 0, 3, 0xff, 0xff, 0xff];
    bytes.extend_from_slice(&frame);
    let mut reader = FrameReader::new(&bytes[..]);
    assert!(matches!(
        reader.next::<ProxyMessage>().await,
        Err(WireError::Decode(_))
    ));
    assert_eq!(
        reader.next::<ProxyMessage>().await.unwrap(),
        Some(ProxyMessage::QueryMetrics { query: 1 })
    );
}

/// The proxy frame limit is sized from the largest real messages: a record with the longest
/// names a config allows (three 128-byte model names, a proxy-made request ID with the
/// largest numbers, a long upstream name) and every other field at its widest, an `Enqueue`
/// of such names, and a cache-lookup answer for the 256 tickets the engine asks at most.
/// Each fits with room to spare; and the limit stays far below the general frame limit.
#[test]
fn the_largest_real_proxy_messages_fit_the_proxy_frame_limit() {
    let upstream = "u".repeat(4096);
    let limit = proxy_frame_limit(upstream.len());
    let name = "m".repeat(128);
    let mut record = sample_record();
    record.request_id = format!("proxy-{}-{}-{}", u32::MAX, u128::MAX, u64::MAX);
    record.model_requested = Some(name.clone());
    record.model_resolved = Some(name.clone());
    record.upstream_model = Some(upstream.clone());
    record.seq = u64::MAX;
    record.arrival_seq = u64::MAX;
    record.first_token_at = record.lease_at.clone();
    record.last_token_at = record.lease_at.clone();
    record.disconnect_phase = Some(strata_protocol::record::Phase::Generating);
    let messages = [
        ProxyMessage::Finish {
            ticket: u64::MAX,
            record: Box::new(SubmittedRecord {
                record: record.clone(),
                tier: ServiceTier::Priority,
            }),
        },
        ProxyMessage::SubmitRecord {
            record: Box::new(SubmittedRecord {
                record,
                tier: ServiceTier::Flex,
            }),
        },
        ProxyMessage::Enqueue {
            ticket: u64::MAX,
            model: name.clone(),
            tier: ServiceTier::Flex,
            request: TicketRequest {
                model_requested: name,
                stream: true,
                arrived_unix_ms: u64::MAX,
            },
        },
        ProxyMessage::TicketScores {
            lookup: u64::MAX,
            scores: Ok(CacheScores {
                min_tokens: u64::MAX,
                results: (0..256)
                    .map(|ticket| TicketScore {
                        ticket,
                        input_tokens: u64::MAX,
                        cached_tokens: u64::MAX,
                    })
                    .collect(),
            }),
        },
    ];
    for message in &messages {
        let frame = encode_frame(message).unwrap();
        assert!(
            frame.len() * 2 < limit as usize,
            "{} bytes against a limit of {limit}: {message:?}",
            frame.len()
        );
    }
    assert!(proxy_frame_limit(0) >= 64 * 1024);
    assert!(limit < MAX_FRAME_BYTES / 64);
    // An absurd upstream name cannot lift the limit past the general one.
    assert_eq!(proxy_frame_limit(usize::MAX / 4), MAX_FRAME_BYTES);
}

/// A reader with a limit refuses a longer frame at its length prefix (naming the limit),
/// before a byte of its payload is buffered; frames up to the limit read.
#[tokio::test]
async fn a_limited_frame_reader_refuses_a_longer_frame_at_its_prefix() {
    let limit: u32 = 1000;
    let mut bytes = encode_frame(&ProxyMessage::QueryMetrics { query: 1 }).unwrap();
    bytes.extend_from_slice(&(limit + 1).to_be_bytes());
    bytes.extend_from_slice(&[0; 100]);
    let mut reader = FrameReader::with_limit(&bytes[..], limit);
    assert_eq!(
        reader.next::<ProxyMessage>().await.unwrap(),
        Some(ProxyMessage::QueryMetrics { query: 1 })
    );
    let err = reader.next::<ProxyMessage>().await.unwrap_err();
    assert!(
        matches!(
            err,
            WireError::TooLarge {
                len: 1001,
                limit: 1000
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("1000-byte limit"), "{err}");

    // A frame exactly at the limit is read whole.
    let payload_len = limit as usize;
    let mut exact = (limit).to_be_bytes().to_vec();
    exact.extend(std::iter::repeat_n(0xffu8, payload_len));
    let mut reader = FrameReader::with_limit(&exact[..], limit);
    assert!(matches!(
        reader.next::<ProxyMessage>().await,
        Err(WireError::Decode(_))
    ));
    assert_eq!(
        reader.buffered(),
        0,
        "the undecodable frame was consumed whole"
    );
}
