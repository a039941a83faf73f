//! What `strata-ctl top` polls and remembers between polls: [`Snapshot`].
//!
//! With a proxy URL each poll reads `GET /metrics` (JSON), `GET /health` (the drain state),
//! `GET /requests` from a cursor and `GET /v1/models` (each model's learned load time); with
//! the control socket's path, what `status` and `{"cmd":"models"}` say (records live behind
//! the proxy). Every document is read as its `strata_protocol` type ([`Metrics`], [`Health`],
//! [`RecordsPage`] of [`RequestRecord`]s, [`Status`]), so a renamed field fails here instead
//! of showing nothing. A failed poll marks the router unreachable from the local time of the
//! first failure until a poll succeeds again; the view then shows none of the older figures.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use strata_protocol::api::{Health, InFlightRequest, Metrics, ModelItem, ModelList};
use strata_protocol::control::{ControlRequest, ModelsAnswer, Status};
use strata_protocol::page::RecordsPage;
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::BackendState;

use strata_os::{ClockTime, local_clock_time};

use crate::requests::{BaseUrl, get, get_with_status};

/// Where the figures come from.
pub(super) enum Source {
    Proxy(BaseUrl),
    Socket(std::path::PathBuf),
}

/// One record's line in the view.
pub(super) struct RecordLine {
    pub(super) seq: u64,
    pub(super) model: String,
    pub(super) reason: String,
    pub(super) status: String,
    pub(super) ttft_ms: Option<u64>,
    pub(super) decode: Option<f64>,
    pub(super) total_ms: u64,
}

/// What one poll found, and what the view remembers between polls.
#[derive(Default)]
pub(super) struct Snapshot {
    pub(super) target: String,
    /// Why the last poll failed, and the local time of the first failed poll of this run of
    /// failures; both cleared by a poll that succeeds.
    pub(super) unreachable: Option<Unreachable>,
    pub(super) loaded: Option<String>,
    pub(super) loading: Option<String>,
    /// When the current load was first seen.
    pub(super) loading_since: Option<(String, Instant)>,
    /// Each model's learned load time (`typical_load_ms`), where known.
    pub(super) typical_load_ms: HashMap<String, u64>,
    pub(super) routing: Option<bool>,
    pub(super) draining: Option<bool>,
    pub(super) in_flight: Option<u64>,
    pub(super) queue_depth: Option<u64>,
    pub(super) by_tier: Vec<(String, u64)>,
    pub(super) by_model: Vec<(String, u64)>,
    /// The oldest held requests, oldest first (proxy URL only).
    pub(super) held: Vec<InFlightRequest>,
    pub(super) operation: Option<String>,
    /// The backend's state, the age of its last good probe and, when it
    /// is unresponsive, why.
    pub(super) backend: Option<(BackendState, Option<u64>, Option<String>)>,
    pub(super) last_startup_error: Option<String>,
    pub(super) records: VecDeque<RecordLine>,
    /// Where the next `/requests` page starts, and which router instance the sequence
    /// numbers belong to (the poll's own).
    pub(super) cursor: u64,
    pub(super) instance: Option<String>,
}

/// The router could not be polled.
pub(super) struct Unreachable {
    /// The local time of the first failed poll (`HH:MM:SS`).
    pub(super) since: ClockTime,
    /// The last poll's error.
    pub(super) error: String,
}

impl Snapshot {
    pub(super) fn new(target: String) -> Self {
        Snapshot {
            target,
            ..Snapshot::default()
        }
    }

    pub(super) fn is_unreachable(&self) -> bool {
        self.unreachable.is_some()
    }

    pub(super) fn set_loading(&mut self, loading: Option<String>, now: Instant) {
        match &loading {
            Some(model) if self.loading_since.as_ref().map(|(m, _)| m) != Some(model) => {
                self.loading_since = Some((model.clone(), now));
            }
            None => self.loading_since = None,
            _ => {}
        }
        self.loading = loading;
    }

    pub(super) fn poll(&mut self, source: &Source, keep: usize) {
        let now = Instant::now();
        let result = match source {
            Source::Proxy(base) => self.poll_proxy(base, keep, now),
            Source::Socket(path) => self.poll_socket(path, now),
        };
        self.set_result(result, SystemTime::now());
    }

    /// A poll's outcome: an error keeps the time of the first failure of the run.
    pub(super) fn set_result(&mut self, result: Result<(), String>, at: SystemTime) {
        self.unreachable = match (result, self.unreachable.take()) {
            (Ok(()), _) => None,
            (Err(error), Some(before)) => Some(Unreachable {
                since: before.since,
                error,
            }),
            (Err(error), None) => Some(Unreachable {
                since: local_clock_time(at),
                error,
            }),
        };
    }

    fn poll_proxy(&mut self, base: &BaseUrl, keep: usize, now: Instant) -> Result<(), String> {
        let body = get(base, &format!("{}/metrics", base.path))?;
        let metrics: Metrics =
            serde_json::from_slice(&body).map_err(|err| format!("unexpected /metrics: {err}"))?;
        self.loaded = metrics.loaded_model;
        self.set_loading(metrics.loading_model, now);
        self.routing = metrics.routing;
        self.in_flight = metrics.in_flight;
        self.queue_depth = metrics.queue_depth;
        self.held = metrics.in_flight_requests.unwrap_or_default();
        let tiers = metrics.queue_depth_by_tier;
        self.by_tier = [
            ("priority", tiers.priority),
            ("default", tiers.default),
            ("flex", tiers.flex),
        ]
        .into_iter()
        .filter_map(|(tier, n)| n.map(|n| (tier.to_owned(), n)))
        .collect();
        self.by_model = metrics
            .queue_depth_by_model
            .unwrap_or_default()
            .into_iter()
            .collect();
        // The load times are an addition: an older proxy's list (or none)
        // leaves them unknown rather than failing the view.
        if let Some(models) = get(base, &format!("{}/v1/models", base.path))
            .ok()
            .and_then(|body| serde_json::from_slice::<ModelList>(&body).ok())
        {
            self.typical_load_ms = models
                .data
                .iter()
                .filter_map(|item| match item {
                    ModelItem::Concrete(model) => Some((model.id.clone(), model.typical_load_ms?)),
                    ModelItem::Alias(_) => None,
                })
                .collect();
        }
        // /health answers 503 while the supervisor is away (or the backend is
        // unresponsive); that is no error here.
        let health = get_with_status(base, &format!("{}/health", base.path))
            .ok()
            .and_then(|(_, body)| serde_json::from_slice::<Health>(&body).ok());
        self.draining = health.as_ref().and_then(|health| health.draining);
        self.backend = health.and_then(|health| {
            Some((
                health.backend_state?,
                health.last_good_probe_age_ms,
                health.cause,
            ))
        });
        loop {
            let target = format!("{}/requests?after={}&limit=1000", base.path, self.cursor);
            let body = get(base, &target)?;
            let text =
                std::str::from_utf8(&body).map_err(|_| "/requests is not UTF-8".to_owned())?;
            let page = RecordsPage::from_json(text)
                .map_err(|err| format!("unexpected /requests: {err}"))?;
            if self.instance.as_deref() != Some(page.instance_id.as_str()) {
                if self.instance.is_some() {
                    // A new router instance: sequences start again.
                    self.records.clear();
                    self.cursor = 0;
                    self.instance = Some(page.instance_id);
                    continue;
                }
                self.instance = Some(page.instance_id.clone());
            }
            if page.records.is_empty() {
                break;
            }
            // The whole page, or (with the cursor where it was) an error.
            let records = page
                .records
                .iter()
                .map(|text| serde_json::from_str::<RequestRecord>(text))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| format!("unexpected /requests record: {err}"))?;
            self.cursor = page.next_seq;
            for record in &records {
                self.records.push_back(record_line(record));
                while self.records.len() > keep {
                    self.records.pop_front();
                }
            }
        }
        Ok(())
    }

    fn poll_socket(&mut self, path: &Path, now: Instant) -> Result<(), String> {
        let status: Status = control_request(path, &ControlRequest::Status).and_then(|line| {
            serde_json::from_str(&line).map_err(|err| format!("unexpected status answer: {err}"))
        })?;
        // An older supervisor answers `models` with "unknown control
        // command": the load times stay unknown.
        if let Some(models) = control_request(path, &ControlRequest::Models)
            .ok()
            .and_then(|line| serde_json::from_str::<ModelsAnswer>(&line).ok())
        {
            self.typical_load_ms = models
                .models
                .into_iter()
                .filter_map(|model| Some((model.id, model.typical_load_ms?)))
                .collect();
        }
        self.loaded = status.loaded;
        self.set_loading(status.loading, now);
        self.routing = Some(status.routing);
        self.draining = Some(status.draining);
        self.in_flight = Some(status.active_leases as u64);
        self.queue_depth = Some(status.waiting_requests as u64);
        self.operation = status.operation;
        self.backend = Some((status.backend_state, status.last_good_probe_age_ms, None));
        self.last_startup_error = status.last_startup_error;
        Ok(())
    }
}

pub(super) fn record_line(record: &RequestRecord) -> RecordLine {
    let decode = record.predicted_per_second.or_else(|| {
        let tokens = record.completion_tokens.filter(|n| *n >= 2)?;
        let ms = record.generation_ms.filter(|ms| *ms > 0)?;
        Some((tokens - 1) as f64 * 1000.0 / ms as f64)
    });
    RecordLine {
        seq: record.seq,
        model: record.model_resolved.as_deref().unwrap_or("-").to_owned(),
        reason: record.reason.as_str().to_owned(),
        status: record.status.map_or("-".to_owned(), |s| s.to_string()),
        ttft_ms: record.ttft_ms,
        decode,
        total_ms: record.total_ms,
    }
}

/// `status` over the control socket.
/// One request on its own connection, and the first answer line.
fn control_request(path: &Path, request: &ControlRequest) -> Result<String, String> {
    let mut stream =
        UnixStream::connect(path).map_err(|err| format!("{}: {err}", path.display()))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    writeln!(stream, "{}", request.to_line())
        .map_err(|err| format!("{}: {err}", path.display()))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    Ok(line)
}
