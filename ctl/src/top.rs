//! `strata-ctl top URL|SOCKET`: a live view of a running router.
//!
//! With a proxy URL it polls, every `--interval` seconds, `GET /metrics`
//! (JSON), `GET /health` (the drain state) and `GET /requests` from a
//! cursor, and `GET /v1/models` (each model's learned load time), and shows
//! the loaded or loading model (with how long the load has run and how
//! long its loads usually take), routing and drain state, the queue by tier and by model, the
//! requests it holds with their stage and age, and the last records with
//! their TTFT, decode rate and reason. Every document is read as its
//! `strata_protocol` type ([`Metrics`], [`Health`], [`RecordsPage`] of
//! [`RequestRecord`]s, [`Status`]), so a renamed field fails here instead
//! of showing nothing. With the control socket's path it shows what
//! `status` and `{"cmd":"models"}` say (records live behind the proxy). No endpoint of its own.
//!
//! On a terminal it draws in place (ratatui on crossterm: alternate screen,
//! redrawn on every poll and resize) and quits on `q`, Esc or Ctrl-C; when
//! stdout is not a terminal it prints the same lines as plain text, one
//! snapshot per poll (`--once`: one, then exit). The screen's text is
//! built once ([`Snapshot::lines`]) for both.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use strata_protocol::api::{Health, InFlightRequest, Metrics, ModelItem, ModelList};
use strata_protocol::control::{ControlRequest, ModelsAnswer, Status};
use strata_protocol::page::RecordsPage;
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{BackendState, typical_load_seconds};

use crate::requests::{BaseUrl, get, get_with_status};

#[derive(clap::Args)]
pub struct Args {
    /// The proxy's base URL (http://127.0.0.1:8088) or the control socket's path
    pub target: String,
    /// How many of the newest records to show
    #[arg(long, default_value_t = 10)]
    pub records: usize,
    /// Seconds between polls
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Print one plain snapshot and exit (also on a terminal)
    #[arg(long)]
    pub once: bool,
}

/// Where the figures come from.
enum Source {
    Proxy(BaseUrl),
    Socket(std::path::PathBuf),
}

/// One record's line in the view.
struct RecordLine {
    seq: u64,
    model: String,
    reason: String,
    status: String,
    ttft_ms: Option<u64>,
    decode: Option<f64>,
    total_ms: u64,
}

/// What one poll found, and what the view remembers between polls.
#[derive(Default)]
pub struct Snapshot {
    target: String,
    error: Option<String>,
    loaded: Option<String>,
    loading: Option<String>,
    /// When the current load was first seen.
    loading_since: Option<(String, Instant)>,
    /// Each model's learned load time (`typical_load_ms`), where known.
    typical_load_ms: HashMap<String, u64>,
    routing: Option<bool>,
    draining: Option<bool>,
    in_flight: Option<u64>,
    queue_depth: Option<u64>,
    by_tier: Vec<(String, u64)>,
    by_model: Vec<(String, u64)>,
    /// The oldest held requests, oldest first (proxy URL only).
    held: Vec<InFlightRequest>,
    operation: Option<String>,
    /// The backend's state, the age of its last good probe and, when it
    /// is unresponsive, why.
    backend: Option<(BackendState, Option<u64>, Option<String>)>,
    last_startup_error: Option<String>,
    records: VecDeque<RecordLine>,
    cursor: u64,
    instance: Option<String>,
}

impl Snapshot {
    /// The view as lines of text (the terminal and the plain output alike).
    pub fn lines(&self, now: Instant) -> Vec<String> {
        let mut out = vec![format!("strata-router  {}", self.target)];
        if let Some(error) = &self.error {
            out.push(format!("unreachable: {error}"));
        }
        let model = match (&self.loaded, &self.loading) {
            (_, Some(loading)) => {
                let secs = self
                    .loading_since
                    .as_ref()
                    .filter(|(model, _)| model == loading)
                    .map_or(0, |(_, since)| now.duration_since(*since).as_secs());
                match self.typical_load_ms.get(loading) {
                    Some(&ms) => format!(
                        "loading {loading} ({secs}s, usually {}s)",
                        typical_load_seconds(ms)
                    ),
                    None => format!("loading {loading} ({secs}s)"),
                }
            }
            (Some(loaded), None) => format!("loaded {loaded}"),
            (None, None) => "no model loaded".to_owned(),
        };
        let flag = |value: Option<bool>, on: &str, off: &str| match value {
            Some(true) => on.to_owned(),
            Some(false) => off.to_owned(),
            None => "?".to_owned(),
        };
        out.push(format!(
            "model: {model}   routing: {}   drain: {}",
            flag(self.routing, "on", "off"),
            flag(self.draining, "draining", "no")
        ));
        if let Some((state, age_ms, cause)) = &self.backend {
            let mut line = format!("backend: {}", state.as_str());
            match (cause, age_ms) {
                (Some(cause), Some(age)) => {
                    line.push_str(&format!(" ({cause}; last good probe {}s ago)", age / 1000));
                }
                (Some(cause), None) => line.push_str(&format!(" ({cause})")),
                (None, Some(age)) => {
                    line.push_str(&format!(" (last good probe {}s ago)", age / 1000));
                }
                (None, None) => {}
            }
            out.push(line);
        }
        if let Some(operation) = &self.operation {
            out.push(format!("operation: {operation}"));
        }
        if let Some(error) = &self.last_startup_error {
            out.push(format!("last startup error: {error}"));
        }
        let count = |n: Option<u64>| n.map_or("?".to_owned(), |n| n.to_string());
        out.push(format!(
            "in flight: {}   queued: {}",
            count(self.in_flight),
            count(self.queue_depth)
        ));
        if !self.by_tier.is_empty() {
            let tiers: Vec<String> = self
                .by_tier
                .iter()
                .map(|(tier, n)| format!("{tier} {n}"))
                .collect();
            out.push(format!("queued by tier: {}", tiers.join(", ")));
        }
        let models: Vec<String> = self
            .by_model
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(model, n)| format!("{model} {n}"))
            .collect();
        if !models.is_empty() {
            out.push(format!("queued by model: {}", models.join(", ")));
        }
        if !self.held.is_empty() {
            out.push(String::new());
            out.push(format!(
                "{:<36} {:<28} {:<8} {:<8} {:>6}",
                "held (oldest first)", "model", "tier", "stage", "age"
            ));
            for held in &self.held {
                out.push(format!(
                    "{:<36} {:<28} {:<8} {:<8} {:>5}s",
                    held.request_id,
                    held.model.chars().take(28).collect::<String>(),
                    held.tier,
                    held.stage,
                    held.age_ms / 1000
                ));
            }
        }
        out.push(String::new());
        out.push(format!(
            "{:>6}  {:<28} {:<18} {:>6} {:>8} {:>9} {:>8}",
            "seq", "model", "reason", "status", "ttft ms", "tok/s", "total ms"
        ));
        for record in self.records.iter().rev() {
            out.push(format!(
                "{:>6}  {:<28} {:<18} {:>6} {:>8} {:>9} {:>8}",
                record.seq,
                record.model,
                record.reason,
                record.status,
                record.ttft_ms.map_or("-".to_owned(), |ms| ms.to_string()),
                record
                    .decode
                    .map_or("-".to_owned(), |rate| format!("{rate:.1}")),
                record.total_ms
            ));
        }
        out
    }

    fn set_loading(&mut self, loading: Option<String>, now: Instant) {
        match &loading {
            Some(model) if self.loading_since.as_ref().map(|(m, _)| m) != Some(model) => {
                self.loading_since = Some((model.clone(), now));
            }
            None => self.loading_since = None,
            _ => {}
        }
        self.loading = loading;
    }

    fn poll(&mut self, source: &Source, keep: usize) {
        let now = Instant::now();
        let result = match source {
            Source::Proxy(base) => self.poll_proxy(base, keep, now),
            Source::Socket(path) => self.poll_socket(path, now),
        };
        self.error = result.err();
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

fn record_line(record: &RequestRecord) -> RecordLine {
    let decode = record.predicted_per_second.or_else(|| {
        let tokens = record.completion_tokens.filter(|n| *n >= 2)?;
        let ms = record.generation_ms.filter(|ms| *ms > 0)?;
        Some((tokens - 1) as f64 * 1000.0 / ms as f64)
    });
    RecordLine {
        seq: record.seq,
        model: record
            .model_resolved
            .as_deref()
            .unwrap_or("-")
            .chars()
            .take(28)
            .collect(),
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

pub fn run(args: Args) -> ExitCode {
    // A URL names its scheme; anything else that exists is the socket's path
    // (`HOST:PORT` alone is read as a URL too).
    let is_socket = !args.target.contains("://") && Path::new(&args.target).exists();
    let source = if !is_socket {
        match BaseUrl::parse(&args.target) {
            Ok(base) => Source::Proxy(base),
            Err(message) => {
                note!("top: invalid URL {:?}: {message}", args.target);
                return ExitCode::FAILURE;
            }
        }
    } else {
        Source::Socket(args.target.clone().into())
    };
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    let mut snapshot = Snapshot {
        target: args.target.clone(),
        ..Snapshot::default()
    };
    if args.once || !std::io::stdout().is_terminal() {
        return plain(&mut snapshot, &source, args.records, interval, args.once);
    }
    match live(&mut snapshot, &source, args.records, interval) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            note!("top: terminal error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Plain text, one snapshot per poll (or one with `once`).
fn plain(
    snapshot: &mut Snapshot,
    source: &Source,
    keep: usize,
    interval: Duration,
    once: bool,
) -> ExitCode {
    loop {
        snapshot.poll(source, keep);
        let text = snapshot.lines(Instant::now()).join("\n");
        let mut stdout = std::io::stdout().lock();
        if writeln!(stdout, "{text}\n")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        if once {
            return if snapshot.error.is_some() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
        std::thread::sleep(interval);
    }
}

/// The live view: alternate screen, raw mode, redrawn on every poll, until
/// `q`, Esc or Ctrl-C.
fn live(
    snapshot: &mut Snapshot,
    source: &Source,
    keep: usize,
    interval: Duration,
) -> std::io::Result<()> {
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::widgets::Paragraph;

    let mut terminal = ratatui::init();
    let result = (|| -> std::io::Result<()> {
        let mut next_poll = Instant::now();
        loop {
            if Instant::now() >= next_poll {
                snapshot.poll(source, keep);
                next_poll = Instant::now() + interval;
            }
            let text = snapshot.lines(Instant::now()).join("\n");
            terminal.draw(|frame| frame.render_widget(Paragraph::new(text), frame.area()))?;
            let wait = next_poll.saturating_duration_since(Instant::now());
            if event::poll(wait.min(Duration::from_millis(250)))? {
                match event::read()? {
                    Event::Key(key) if key.kind == KeyEventKind::Press => {
                        let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL)
                            && key.code == KeyCode::Char('c');
                        if ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_shows_the_model_the_queue_and_the_records() {
        let now = Instant::now();
        let mut snapshot = Snapshot {
            target: "http://127.0.0.1:8088".into(),
            loaded: Some("m-q4".into()),
            routing: Some(true),
            draining: Some(false),
            in_flight: Some(1),
            queue_depth: Some(2),
            by_tier: vec![("priority".into(), 2)],
            by_model: vec![("m-q4".into(), 0), ("n-q8".into(), 2)],
            held: vec![InFlightRequest {
                request_id: "1-2-9".into(),
                model: "m-q4".into(),
                tier: "flex".into(),
                stage: "leased".into(),
                age_ms: 12_500,
            }],
            ..Snapshot::default()
        };
        let mut record: RequestRecord =
            serde_json::from_value(strata_test_support::record_json("1-2-7")).unwrap();
        record.seq = 7;
        record.model_resolved = Some("m-q4".into());
        record.ttft_ms = Some(120);
        record.completion_tokens = Some(11);
        record.generation_ms = Some(500);
        record.total_ms = 700;
        snapshot.records.push_back(record_line(&record));
        let text = snapshot.lines(now).join("\n");
        assert!(
            text.contains("model: loaded m-q4   routing: on   drain: no"),
            "{text}"
        );
        assert!(text.contains("in flight: 1   queued: 2"), "{text}");
        assert!(text.contains("queued by tier: priority 2"), "{text}");
        assert!(text.contains("queued by model: n-q8 2"), "{text}");
        assert!(!text.contains("m-q4 0"), "{text}");
        let held = text
            .lines()
            .find(|line| line.starts_with("1-2-9"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            held.contains("m-q4")
                && held.contains("flex")
                && held.contains("leased")
                && held.ends_with("12s"),
            "{held}"
        );
        let row = text.lines().last().unwrap();
        assert!(
            row.contains("completed") && row.contains("120") && row.contains("20.0"),
            "{row}"
        );

        snapshot.backend = Some((
            BackendState::Unresponsive,
            Some(16_400),
            Some("no answer to GET /health for 3 probes in a row".into()),
        ));
        assert!(
            snapshot.lines(now).iter().any(|line| line
                == "backend: unresponsive (no answer to GET /health for 3 probes in a row; last good probe 16s ago)"),
            "{:?}",
            snapshot.lines(now)
        );
        snapshot.set_loading(Some("n-q8".into()), now - Duration::from_secs(5));
        assert!(snapshot.lines(now)[1].starts_with("model: loading n-q8 (5s)   "));
        // Once a load of it was seen, with how long its loads usually take.
        snapshot.typical_load_ms.insert("n-q8".into(), 19_600);
        snapshot.typical_load_ms.insert("m-q4".into(), 3_000);
        assert!(
            snapshot.lines(now)[1].starts_with("model: loading n-q8 (5s, usually 20s)   "),
            "{:?}",
            snapshot.lines(now)
        );
    }
}
