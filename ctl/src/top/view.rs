//! `strata-ctl top`'s screen as lines of text, laid out for a terminal of a given size: a
//! pure function of the [`Snapshot`], the [`Area`] and the time, for the live view and the
//! plain output alike.
//!
//! No line is wider than the area, and no more lines than its height are returned (the
//! oldest records go first). The two tables size each column to its widest cell; where the
//! table is wider than the terminal, whole columns are dropped, least important first, until
//! it fits with every model ID whole:
//! - the records: `seq`, then `tok/s`, `ttft ms`, `total ms`, `status`, `reason`; the model
//!   stays;
//! - the held requests: `tier`, then `age`, `stage`; the request ID and the model stay.
//!
//! Only when even that is too wide is a model ID cut, with `…` where it was cut. Lines of
//! prose (the model and routing line, the backend's cause, errors) wrap at spaces instead.
//! While the router is unreachable the screen says since when, and shows none of the older
//! figures.

use std::time::Instant;

use strata_protocol::wire::typical_load_seconds;

use super::poll::Snapshot;

/// The terminal's size in character cells (`usize::MAX` for no limit).
#[derive(Clone, Copy, Debug)]
pub(super) struct Area {
    pub(super) width: usize,
    pub(super) height: usize,
}

/// Between two table columns.
const GAP: &str = "  ";
/// Between the parts of a status line (`model: …   routing: on   drain: no`).
const PART_GAP: &str = "   ";

/// The screen for `snapshot` in `area` at `now`.
pub(super) fn lines(snapshot: &Snapshot, area: Area, now: Instant) -> Vec<String> {
    let width = area.width.max(1);
    let mut out = vec![clip(&format!("strata-router  {}", snapshot.target), width)];
    if let Some(unreachable) = &snapshot.unreachable {
        out.push(clip(
            &format!("router unreachable since {}", unreachable.since),
            width,
        ));
        out.extend(wrap(&format!("({})", unreachable.error), width));
        return fit_height(out, area);
    }
    let model = match (&snapshot.loaded, &snapshot.loading) {
        (_, Some(loading)) => {
            let secs = snapshot
                .loading_since
                .as_ref()
                .filter(|(model, _)| model == loading)
                .map_or(0, |(_, since)| now.duration_since(*since).as_secs());
            match snapshot.typical_load_ms.get(loading) {
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
    out.extend(pack(
        &[
            format!("model: {model}"),
            format!("routing: {}", flag(snapshot.routing, "on", "off")),
            format!("drain: {}", flag(snapshot.draining, "draining", "no")),
        ],
        width,
    ));
    if let Some((state, age_ms, cause)) = &snapshot.backend {
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
        out.extend(wrap(&line, width));
    }
    if let Some(operation) = &snapshot.operation {
        out.extend(wrap(&format!("operation: {operation}"), width));
    }
    if let Some(error) = &snapshot.last_startup_error {
        out.extend(wrap(&format!("last startup error: {error}"), width));
    }
    let count = |n: Option<u64>| n.map_or("?".to_owned(), |n| n.to_string());
    out.extend(pack(
        &[
            format!("in flight: {}", count(snapshot.in_flight)),
            format!("queued: {}", count(snapshot.queue_depth)),
        ],
        width,
    ));
    if !snapshot.by_tier.is_empty() {
        let tiers: Vec<String> = snapshot
            .by_tier
            .iter()
            .map(|(tier, n)| format!("{tier} {n}"))
            .collect();
        out.extend(wrap(
            &format!("queued by tier: {}", tiers.join(", ")),
            width,
        ));
    }
    let models: Vec<String> = snapshot
        .by_model
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(model, n)| format!("{model} {n}"))
        .collect();
    if !models.is_empty() {
        out.extend(wrap(
            &format!("queued by model: {}", models.join(", ")),
            width,
        ));
    }
    if !snapshot.held.is_empty() {
        out.push(String::new());
        let held = &snapshot.held;
        out.extend(table(
            vec![
                Column::kept(
                    "held (oldest first)",
                    Align::Left,
                    held.iter().map(|h| h.request_id.clone()).collect(),
                ),
                Column::model(held.iter().map(|h| h.model.clone()).collect()),
                Column::dropped(
                    3,
                    "tier",
                    Align::Left,
                    held.iter().map(|h| h.tier.clone()).collect(),
                ),
                Column::dropped(
                    1,
                    "stage",
                    Align::Left,
                    held.iter().map(|h| h.stage.clone()).collect(),
                ),
                Column::dropped(
                    2,
                    "age",
                    Align::Right,
                    held.iter()
                        .map(|h| format!("{}s", h.age_ms / 1000))
                        .collect(),
                ),
            ],
            width,
        ));
    }
    out.push(String::new());
    let records: Vec<_> = snapshot.records.iter().rev().collect();
    let cells = |cell: fn(&super::poll::RecordLine) -> String| -> Vec<String> {
        records.iter().map(|record| cell(record)).collect()
    };
    out.extend(table(
        vec![
            Column::dropped(6, "seq", Align::Right, cells(|r| r.seq.to_string())),
            Column::model(cells(|r| r.model.clone())),
            Column::dropped(0, "reason", Align::Left, cells(|r| r.reason.clone())),
            Column::dropped(1, "status", Align::Right, cells(|r| r.status.clone())),
            Column::dropped(
                4,
                "ttft ms",
                Align::Right,
                cells(|r| r.ttft_ms.map_or("-".to_owned(), |ms| ms.to_string())),
            ),
            Column::dropped(
                5,
                "tok/s",
                Align::Right,
                cells(|r| r.decode.map_or("-".to_owned(), |rate| format!("{rate:.1}"))),
            ),
            Column::dropped(
                3,
                "total ms",
                Align::Right,
                cells(|r| r.total_ms.to_string()),
            ),
        ],
        width,
    ));
    fit_height(out, area)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// One column of a table: its heading, its cells (one per row) and how expendable it is.
struct Column {
    header: &'static str,
    align: Align,
    cells: Vec<String>,
    /// `None`: always shown. `Some(n)`: dropped when the table is too wide, the highest `n`
    /// first.
    drop_rank: Option<u8>,
    /// The model column: cut (rather than dropped) when nothing else is left to drop.
    cut: bool,
}

impl Column {
    fn kept(header: &'static str, align: Align, cells: Vec<String>) -> Self {
        Column {
            header,
            align,
            cells,
            drop_rank: None,
            cut: false,
        }
    }

    fn model(cells: Vec<String>) -> Self {
        Column {
            cut: true,
            ..Column::kept("model", Align::Left, cells)
        }
    }

    fn dropped(rank: u8, header: &'static str, align: Align, cells: Vec<String>) -> Self {
        Column {
            drop_rank: Some(rank),
            ..Column::kept(header, align, cells)
        }
    }

    fn width(&self) -> usize {
        self.cells
            .iter()
            .map(|cell| chars(cell))
            .chain([chars(self.header)])
            .max()
            .unwrap_or(0)
    }
}

/// The table's heading and rows within `width`: its most expendable columns dropped until
/// it fits, then the model cut if it still does not.
fn table(mut columns: Vec<Column>, width: usize) -> Vec<String> {
    let total = |columns: &[Column]| {
        columns.iter().map(Column::width).sum::<usize>()
            + GAP.len() * columns.len().saturating_sub(1)
    };
    while total(&columns) > width {
        let most_expendable = columns
            .iter()
            .enumerate()
            .filter_map(|(at, column)| Some((column.drop_rank?, at)))
            .max();
        match most_expendable {
            Some((_, at)) => {
                columns.remove(at);
            }
            None => break,
        }
    }
    let mut widths: Vec<usize> = columns.iter().map(Column::width).collect();
    let over = total(&columns).saturating_sub(width);
    if over > 0
        && let Some(at) = columns.iter().position(|column| column.cut)
    {
        widths[at] = widths[at].saturating_sub(over).max(1);
    }
    let rows = columns.first().map_or(0, |column| column.cells.len());
    let row = |cell: &dyn Fn(&Column) -> &str| -> String {
        let cells: Vec<String> = columns
            .iter()
            .zip(&widths)
            .map(|(column, &w)| {
                let text = clip(cell(column), w);
                match column.align {
                    Align::Left => format!("{text:<w$}"),
                    Align::Right => format!("{text:>w$}"),
                }
            })
            .collect();
        clip(cells.join(GAP).trim_end(), width)
    };
    let mut out = vec![row(&|column| column.header)];
    for at in 0..rows {
        out.push(row(&|column| column.cells[at].as_str()));
    }
    out
}

/// The parts on as few lines as fit in `width`, `PART_GAP` between them on a line.
fn pack(parts: &[String], width: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in parts {
        match out.last_mut() {
            Some(line) if chars(line) + PART_GAP.len() + chars(part) <= width => {
                line.push_str(PART_GAP);
                line.push_str(part);
            }
            _ => out.extend(wrap(part, width)),
        }
    }
    out
}

/// `text` broken at spaces into lines of at most `width`; a word longer than that is cut.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if line.is_empty() {
            line = clip(word, width);
        } else if chars(&line) + 1 + chars(word) <= width {
            line.push(' ');
            line.push_str(word);
        } else {
            out.push(line.trim_end().to_owned());
            line = clip(word, width);
        }
    }
    out.push(line);
    out
}

/// At most `height` lines: when cut, the last one says how many more there were.
fn fit_height(mut lines: Vec<String>, Area { width, height }: Area) -> Vec<String> {
    if lines.len() > height {
        let more = lines.len() - height + 1;
        lines.truncate(height.saturating_sub(1));
        if height > 0 {
            lines.push(clip(&format!("… {more} more lines"), width));
        }
    }
    lines
}

/// `text` in at most `width` characters, with `…` where it was cut.
fn clip(text: &str, width: usize) -> String {
    if chars(text) <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        cut.push('…');
    }
    cut
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use strata_protocol::api::InFlightRequest;
    use strata_protocol::record::RequestRecord;
    use strata_protocol::wire::BackendState;

    use super::super::poll::record_line;
    use super::*;

    const UNBOUNDED: Area = Area {
        width: usize::MAX,
        height: usize::MAX,
    };
    /// A long model ID, as the Hugging Face names with their quantisation make them.
    const LONG: &str = "qwen2.5-coder-32b-instruct-abliterated-q4_k_m";

    fn record(seq: u64, model: &str) -> RequestRecord {
        let mut record: RequestRecord =
            serde_json::from_value(strata_test_support::record_json("1-2-7")).unwrap();
        record.seq = seq;
        record.model_resolved = Some(model.into());
        record.ttft_ms = Some(120);
        record.completion_tokens = Some(11);
        record.generation_ms = Some(500);
        record.total_ms = 700;
        record
    }

    fn held(id: &str, model: &str) -> InFlightRequest {
        InFlightRequest {
            request_id: id.into(),
            model: model.into(),
            tier: "flex".into(),
            stage: "leased".into(),
            age_ms: 12_500,
        }
    }

    fn busy(model: &str) -> Snapshot {
        let mut snapshot = Snapshot {
            loaded: Some(model.into()),
            routing: Some(true),
            draining: Some(false),
            in_flight: Some(1),
            queue_depth: Some(0),
            held: vec![held("1-2-9", model)],
            ..Snapshot::new("http://127.0.0.1:8088".into())
        };
        for seq in 1..=3 {
            snapshot.records.push_back(record_line(&record(seq, model)));
        }
        snapshot
    }

    fn area(width: usize, height: usize) -> Area {
        Area { width, height }
    }

    /// The heading line of the table whose first heading is `first`.
    fn heading<'a>(lines: &'a [String], first: &str) -> &'a str {
        lines
            .iter()
            .find(|line| line.trim_start().starts_with(first))
            .unwrap_or_else(|| panic!("no {first:?} heading in {lines:#?}"))
    }

    fn assert_within(lines: &[String], area: Area) {
        assert!(
            lines.len() <= area.height,
            "{} lines: {lines:#?}",
            lines.len()
        );
        for line in lines {
            assert!(
                line.chars().count() <= area.width,
                "wider than {}: {line:?}",
                area.width
            );
        }
    }

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
            held: vec![held("1-2-9", "m-q4")],
            ..Snapshot::default()
        };
        snapshot.records.push_back(record_line(&record(7, "m-q4")));
        let text = lines(&snapshot, UNBOUNDED, now).join("\n");
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
        let view = lines(&snapshot, UNBOUNDED, now);
        assert!(
            view.iter().any(|line| line
                == "backend: unresponsive (no answer to GET /health for 3 probes in a row; last good probe 16s ago)"),
            "{view:?}"
        );
        snapshot.set_loading(Some("n-q8".into()), now - Duration::from_secs(5));
        assert!(lines(&snapshot, UNBOUNDED, now)[1].starts_with("model: loading n-q8 (5s)   "));
        // Once a load of it was seen, with how long its loads usually take.
        snapshot.typical_load_ms.insert("n-q8".into(), 19_600);
        snapshot.typical_load_ms.insert("m-q4".into(), 3_000);
        let view = lines(&snapshot, UNBOUNDED, now);
        assert!(
            view[1].starts_with("model: loading n-q8 (5s, usually 20s)   "),
            "{view:?}"
        );
    }

    #[test]
    fn wide_terminals_show_every_column_and_the_whole_model_id() {
        let snapshot = busy(LONG);
        for width in [120, 160] {
            let size = area(width, 40);
            let view = lines(&snapshot, size, Instant::now());
            assert_within(&view, size);
            let records = heading(&view, "seq");
            for column in ["model", "reason", "status", "ttft ms", "tok/s", "total ms"] {
                assert!(records.contains(column), "{width}: {records}");
            }
            let held = heading(&view, "held (oldest first)");
            for column in ["model", "tier", "stage", "age"] {
                assert!(held.contains(column), "{width}: {held}");
            }
            // Every row names the model whole (the old view cut it at 28 characters).
            let rows = view.iter().filter(|line| line.contains(LONG)).count();
            assert_eq!(rows, 1 + 1 + 3, "{width}: {view:#?}");
            assert!(view[1].starts_with(&format!("model: loaded {LONG}   routing: on")));
        }
    }

    #[test]
    fn at_80_columns_the_least_important_columns_go_first_and_the_id_stays_whole() {
        let snapshot = busy(LONG);
        let size = area(80, 24);
        let view = lines(&snapshot, size, Instant::now());
        assert_within(&view, size);
        // The records (45 + 7 columns is 96 wide): seq, tok/s and ttft ms dropped, in that
        // order; total ms, status and reason kept.
        let records = heading(&view, "model  ");
        for column in ["reason", "status", "total ms"] {
            assert!(records.contains(column), "{records}");
        }
        for column in ["seq", "tok/s", "ttft ms"] {
            assert!(!records.contains(column), "{records}");
        }
        // The held requests (92 wide): tier dropped, stage and age kept; at 75, age too.
        let held = heading(&view, "held (oldest first)");
        assert!(held.contains("stage") && held.ends_with("age"), "{held}");
        assert!(!held.contains("tier"), "{held}");
        let narrower = lines(&snapshot, area(75, 24), Instant::now());
        let held = heading(&narrower, "held (oldest first)");
        assert!(held.ends_with("stage") && !held.contains("tier"), "{held}");
        let rows = view.iter().filter(|line| line.contains(LONG)).count();
        assert_eq!(rows, 1 + 1 + 3, "{view:#?}");
        // The model line no longer fits with the drain state: it goes on the next line.
        assert_eq!(view[1], format!("model: loaded {LONG}   routing: on"));
        assert_eq!(view[2], "drain: no");

        // A little wider, and the next column in the order comes back first.
        let wider = lines(&snapshot, area(85, 24), Instant::now());
        let records = heading(&wider, "model  ");
        assert!(
            records.contains("ttft ms") && !records.contains("tok/s"),
            "{records}"
        );
    }

    #[test]
    fn too_narrow_for_the_id_it_is_cut_with_a_mark_and_no_line_overflows() {
        let mut snapshot = busy(LONG);
        snapshot.backend = Some((
            BackendState::Unresponsive,
            Some(16_400),
            Some("no answer to GET /health for 3 probes in a row".into()),
        ));
        snapshot.by_model = vec![(LONG.into(), 3), ("n-q8".into(), 2)];
        for width in [1, 10, 30, 44] {
            let size = area(width, 24);
            let view = lines(&snapshot, size, Instant::now());
            assert_within(&view, size);
            assert!(!view.iter().any(|line| line.contains(LONG)), "{view:#?}");
        }
        let view = lines(&snapshot, area(30, 24), Instant::now());
        assert!(
            view.iter()
                .any(|line| line.starts_with("qwen2.5-coder") && line.contains('…')),
            "{view:#?}"
        );
    }

    #[test]
    fn a_short_terminal_keeps_the_newest_records_and_says_how_many_lines_are_left_out() {
        let mut snapshot = busy("m-q4");
        for seq in 4..=30 {
            snapshot
                .records
                .push_back(record_line(&record(seq, "m-q4")));
        }
        let size = area(80, 24);
        let view = lines(&snapshot, size, Instant::now());
        assert_within(&view, size);
        assert_eq!(view.len(), 24);
        assert!(
            view[23].starts_with("… ") && view[23].ends_with(" more lines"),
            "{view:#?}"
        );
        // Newest first: 30 is shown, 1 is not.
        assert!(
            view.iter().any(|line| line.trim_start().starts_with("30 ")),
            "{view:#?}"
        );
        assert!(
            !view.iter().any(|line| line.trim_start().starts_with("1 ")),
            "{view:#?}"
        );
    }

    #[test]
    fn an_unreachable_router_shows_since_when_and_no_stale_figures_until_it_answers() {
        let mut snapshot = busy(LONG);
        let first = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        snapshot.set_result(Err("connection refused".into()), first);
        let since = strata_os::local_clock_time(first).to_string();
        let view = lines(&snapshot, area(80, 24), Instant::now());
        assert_eq!(
            view,
            [
                "strata-router  http://127.0.0.1:8088".to_owned(),
                format!("router unreachable since {since}"),
                "(connection refused)".to_owned(),
            ]
        );
        // A later failure keeps the time of the first.
        snapshot.set_result(Err("timed out".into()), first + Duration::from_secs(7));
        let view = lines(&snapshot, area(80, 24), Instant::now());
        assert_eq!(view[1], format!("router unreachable since {since}"));
        assert_eq!(view[2], "(timed out)");
        // Back: the figures again.
        snapshot.set_result(Ok(()), first + Duration::from_secs(9));
        let view = lines(&snapshot, area(80, 24), Instant::now());
        assert!(
            !view.iter().any(|line| line.contains("unreachable")),
            "{view:#?}"
        );
        assert!(
            view[1].starts_with(&format!("model: loaded {LONG}")),
            "{view:#?}"
        );
    }
}
