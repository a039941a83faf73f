//! `strata-ctl top URL|SOCKET`: a live view of a running router.
//!
//! - `poll.rs`: [`Snapshot`], what each poll of the proxy (`/metrics`, `/health`,
//!   `/requests`, `/v1/models`) or of the control socket (`status`, `models`) found, and
//!   since when the router has been unreachable.
//! - `view.rs`: [`view::lines`], the screen as lines of text for a terminal of a given size,
//!   a pure function (columns sized to the width, the least important dropped first).
//!
//! On a terminal it draws in place (ratatui on crossterm: alternate screen, redrawn on every
//! poll and resize, laid out for the size of each frame) and quits on `q`, Esc or Ctrl-C;
//! when stdout is not a terminal it prints the same lines as plain text, one snapshot per
//! poll (`--once`: one, then exit), as wide as `COLUMNS` says or unbounded. No endpoint of
//! its own.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::requests::BaseUrl;

mod poll;
mod view;

use poll::{Snapshot, Source};
use view::Area;

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
    let mut snapshot = Snapshot::new(args.target.clone());
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

/// The plain output's area: as wide as `COLUMNS` when it is set (a pipe into a pager of that
/// width), otherwise unbounded; never cut in height.
fn plain_area() -> Area {
    let width = std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.trim().parse::<usize>().ok())
        .filter(|columns| *columns > 0)
        .unwrap_or(usize::MAX);
    Area {
        width,
        height: usize::MAX,
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
        let text = view::lines(snapshot, plain_area(), Instant::now()).join("\n");
        let mut stdout = std::io::stdout().lock();
        if writeln!(stdout, "{text}\n")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        if once {
            return if snapshot.is_unreachable() {
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
            // ratatui reads the terminal's size (TIOCGWINSZ, through crossterm) before each
            // frame, so the layout follows a resize on the next draw.
            terminal.draw(|frame| {
                let area = frame.area();
                let size = Area {
                    width: usize::from(area.width),
                    height: usize::from(area.height),
                };
                let text = view::lines(snapshot, size, Instant::now()).join("\n");
                frame.render_widget(Paragraph::new(text), area);
            })?;
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
