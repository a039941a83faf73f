//! The operator control socket: one JSON-lines request per connection.
//!
//! A client sends one line, a [`ControlRequest`]: a bare word (`status`,
//! legacy `on`, legacy `off`) or a JSON object (`{"cmd":"on","model":...}`,
//! `{"cmd":"off","now":...}`). `status` and the bare words get one JSON
//! line back. `on`/`off` get progress events and exactly one `done` event.
//! Anything else gets `{"error":"unknown control command"}`. Every line is
//! one of `strata_protocol::control`'s types.
//!
//! Only one `on`/`off` runs at a time; a second waits its turn. A client
//! that disconnects cancels its wait or load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use strata_protocol::control::{self, ControlRequest, ErrorAnswer, RoutingAnswer};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::engine::{Command, ControlEvent, EngineHandle};
use crate::sockets;

/// Longest request line accepted.
const MAX_LINE: usize = 64 * 1024;

/// How often a half-closed client is checked for having gone away.
const HANGUP_POLL: Duration = Duration::from_millis(100);

/// A client gets this long to send its one request line.
const REQUEST_LINE_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts control connections until the listener fails.
pub async fn serve(listener: UnixListener, engine: EngineHandle) {
    let operation_lock = Arc::new(Mutex::new(()));
    let next_op = Arc::new(AtomicU64::new(1));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let engine = engine.clone();
        let lock = operation_lock.clone();
        let id = next_op.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(err) = handle_connection(stream, engine, lock, id).await {
                tracing::debug!(error = %err, "control connection ended");
            }
        });
    }
}

async fn write_line(writer: &mut OwnedWriteHalf, answer: &impl Serialize) -> std::io::Result<()> {
    let mut line = control::to_line(answer);
    line.push('\n');
    writer.write_all(line.as_bytes()).await?;
    writer.flush().await
}

fn error(message: &str) -> ErrorAnswer {
    ErrorAnswer::new(message)
}

async fn handle_connection(
    stream: UnixStream,
    engine: EngineHandle,
    operation_lock: Arc<Mutex<()>>,
    id: u64,
) -> std::io::Result<()> {
    let same_user = sockets::peer_is_allowed(&stream);
    let (reader, mut writer) = stream.into_split();
    if !same_user {
        return write_line(&mut writer, &error("permission denied")).await;
    }
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
    let read_line = limited.read_until(b'\n', &mut line);
    let Ok(read) = tokio::time::timeout(REQUEST_LINE_TIMEOUT, read_line).await else {
        return write_line(&mut writer, &error("no request line received")).await;
    };
    let read = read?;
    if read == 0 {
        return Ok(());
    }
    if line.len() > MAX_LINE {
        return write_line(&mut writer, &error("request line too long")).await;
    }
    let request = std::str::from_utf8(&line)
        .ok()
        .and_then(ControlRequest::parse);
    let Some(request) = request else {
        return write_line(&mut writer, &error(ErrorAnswer::UNKNOWN_COMMAND)).await;
    };
    match request {
        ControlRequest::Status => match engine.status().await {
            Some(status) => write_line(&mut writer, &status).await,
            None => write_line(&mut writer, &error("daemon is shutting down")).await,
        },
        ControlRequest::Models => match engine.models().await {
            Some(models) => write_line(&mut writer, &models).await,
            None => write_line(&mut writer, &error("daemon is shutting down")).await,
        },
        ControlRequest::LegacyRouting(routing) => {
            let (reply, rx) = oneshot::channel();
            engine.send(Command::SetRouting { routing, reply });
            match rx.await {
                Ok(routing) => write_line(&mut writer, &RoutingAnswer { routing }).await,
                Err(_) => write_line(&mut writer, &error("daemon is shutting down")).await,
            }
        }
        ControlRequest::On { model } => {
            run_operation(reader, writer, engine, operation_lock, id, |events| {
                Command::On { id, model, events }
            })
            .await
        }
        ControlRequest::Off { now } => {
            run_operation(reader, writer, engine, operation_lock, id, |events| {
                Command::Off { id, now, events }
            })
            .await
        }
    }
}

/// Runs one `on`/`off`, relaying its events, and cancels it if the client
/// goes away first.
async fn run_operation(
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut writer: OwnedWriteHalf,
    engine: EngineHandle,
    operation_lock: Arc<Mutex<()>>,
    id: u64,
    command: impl FnOnce(mpsc::UnboundedSender<ControlEvent>) -> Command,
) -> std::io::Result<()> {
    let mut hangup = Box::pin(client_gone(reader));
    let _turn = tokio::select! {
        turn = operation_lock.lock() => turn,
        _ = &mut hangup => return Ok(()),
    };
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    if !engine.send(command(events_tx)) {
        return write_line(&mut writer, &error("daemon is shutting down")).await;
    }
    loop {
        let event = tokio::select! {
            event = events_rx.recv() => event,
            _ = &mut hangup => {
                engine.send(Command::CancelControl { id });
                // The turn is held until the engine says the operation is
                // over (a cancelled `off` may still be stopping the
                // backend), so the next `on`/`off` waits for it instead of
                // finding the engine busy.
                wait_for_done(&mut events_rx).await;
                return Ok(());
            }
        };
        let Some(event) = event else {
            // The engine stopped without a final event; the client sees the
            // connection close and reports failure.
            return Ok(());
        };
        let done = matches!(event, ControlEvent::Done(_));
        if write_line(&mut writer, &event).await.is_err() && !done {
            engine.send(Command::CancelControl { id });
            wait_for_done(&mut events_rx).await;
            return Ok(());
        }
        if done {
            return Ok(());
        }
    }
}

/// Waits (not relaying anything) until the engine ends the operation.
async fn wait_for_done(events: &mut mpsc::UnboundedReceiver<ControlEvent>) {
    while let Some(event) = events.recv().await {
        if matches!(event, ControlEvent::Done(_)) {
            return;
        }
    }
}

/// Resolves when the client has closed its connection. A client that only
/// shut down its write side (it sent its line and is reading) is still
/// there, so end of input alone is not enough: after it, the socket is
/// polled until the peer has hung up completely.
async fn client_gone(mut reader: BufReader<tokio::net::unix::OwnedReadHalf>) {
    let mut scratch = [0u8; 256];
    loop {
        match reader.read(&mut scratch).await {
            Ok(0) | Err(_) => break,
            // Extra input after the request line is ignored.
            Ok(_) => continue,
        }
    }
    loop {
        match reader
            .get_ref()
            .as_ref()
            .ready(tokio::io::Interest::WRITABLE)
            .await
        {
            Ok(ready) if ready.is_write_closed() => return,
            Err(_) => return,
            Ok(_) => tokio::time::sleep(HANGUP_POLL).await,
        }
    }
}
