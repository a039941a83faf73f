//! `e2e-unix-client SOCKET HEX`: a minimal Unix-socket client for end-to-end tests that must
//! talk to a daemon as another process (for example as another user, spawned with
//! `CommandExt::uid`). Connects to SOCKET, writes the bytes given in hex, shuts down its
//! sending side, and copies everything received until EOF (at most 10 s) to stdout.
//! `hello:FINGERPRINT` instead of HEX sends a proxy hello frame carrying this process's own
//! pid (the supervisor checks it against the connection's peer credentials).
//! Exit status: 0 after EOF, 1 on a usage error, 2 if the connection fails.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, hex] = args.as_slice() else {
        eprintln!("usage: e2e-unix-client SOCKET HEX");
        return ExitCode::from(1);
    };
    let payload = match hex.strip_prefix("hello:") {
        Some(fingerprint) => {
            let Ok(fingerprint) = fingerprint.parse() else {
                eprintln!("e2e-unix-client: hello:FINGERPRINT needs a number");
                return ExitCode::from(1);
            };
            let hello = strata_protocol::wire::ProxyMessage::Hello {
                protocol_version: strata_protocol::wire::PROTOCOL_VERSION,
                fingerprint,
                pid: std::process::id(),
            };
            strata_protocol::wire::encode_frame(&hello).expect("a hello encodes")
        }
        None => match decode_hex(hex) {
            Some(payload) => payload,
            None => {
                eprintln!("e2e-unix-client: HEX must be an even number of hex digits");
                return ExitCode::from(1);
            }
        },
    };
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(err) => {
            eprintln!("e2e-unix-client: connect {socket}: {err}");
            return ExitCode::from(2);
        }
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if let Err(err) = stream.write_all(&payload) {
        eprintln!("e2e-unix-client: write: {err}");
    }
    let _ = stream.shutdown(Shutdown::Write);
    let mut reply = Vec::new();
    if let Err(err) = stream.read_to_end(&mut reply) {
        eprintln!("e2e-unix-client: read: {err}");
    }
    let _ = std::io::stdout().write_all(&reply);
    ExitCode::SUCCESS
}
