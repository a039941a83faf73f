//! The benchmark's fast upstream (`bench-upstream`): its HTTP modes on its own, and as the
//! supervisor's backend (ready file, `/health`) behind the real router. The benchmark itself
//! (`cargo bench -p strata-e2e --bench router`) relies on both.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use strata_e2e::bench::wire::{self, Shape};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, Daemon, ModelSpec, TempDir, free_port, poll_until};

const UPSTREAM: &str = env!("CARGO_BIN_EXE_bench-upstream");

fn start(dir: &TempDir, http: &str) -> (Daemon, SocketAddr) {
    let profile = dir.join(format!("p{http}.json"));
    let ready = dir.join(format!("ready{http}.json"));
    std::fs::write(
        &profile,
        json!({"model_name": "up-bench", "bench": {"http": http}}).to_string(),
    )
    .unwrap();
    let port = free_port();
    let mut command = Command::new(UPSTREAM);
    command
        .args(["-m", "serve.server", "--engine", "strata", "--config"])
        .arg(&profile)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--idle-unload", "0", "--ready-file"])
        .arg(&ready);
    let daemon = Daemon::spawn(&format!("upstream{http}"), command, dir.path());
    poll_until(DEADLINE, "the ready file", || ready.exists());
    let contents: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&ready).unwrap()).unwrap();
    assert_eq!(
        contents,
        json!({"pid": daemon.pid(), "model_name": "up-bench", "port": port})
    );
    (daemon, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn post(conn: &mut TcpStream, body: &[u8]) {
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body).unwrap();
}

/// Reads one response framed by `Content-Length`: (head, body).
fn read_sized(conn: &mut TcpStream) -> (String, Vec<u8>) {
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut byte).unwrap(), 1, "connection closed early");
        data.push(byte[0]);
    }
    let head = String::from_utf8(data).unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Length: "))
        .expect("content-length")
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    conn.read_exact(&mut body).unwrap();
    (head, body)
}

fn expected_sse(model: &str, shape: Shape) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..shape.chunks {
        out.extend(wire::sse_chunk(model, shape.bytes as usize));
    }
    out.extend(wire::sse_final(model, shape.chunks));
    out.extend(wire::SSE_DONE);
    out
}

#[test]
fn keep_alive_mode_serves_several_requests_per_connection_and_chunks_sse() {
    let dir = TempDir::new("bench-ka");
    let (_daemon, addr) = start(&dir, "1.1");
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let shape = Shape::new(3, 4);
    for _ in 0..2 {
        post(&mut conn, &wire::chat_request("any", false, shape));
        let (head, body) = read_sized(&mut conn);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(!head.contains("Connection: close"), "{head}");
        assert_eq!(body, wire::json_response("up-bench", &shape));
    }
    post(&mut conn, &wire::chat_request("any", true, shape));
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    while !data.ends_with(b"0\r\n\r\n") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the last chunk");
        data.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(data).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    // De-chunk: each frame is its own chunk.
    let mut rest = body;
    let mut decoded = Vec::new();
    let mut chunks = 0;
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        if size == 0 {
            break;
        }
        decoded.extend_from_slice(&after.as_bytes()[..size]);
        rest = &after[size + 2..];
        chunks += 1;
    }
    assert_eq!(chunks, shape.sse_events());
    assert_eq!(decoded, expected_sse("up-bench", shape));
    assert_eq!(decoded.len() as u64, shape.sse_len("up-bench"));
    let health = strata_e2e::http::get(addr, "/health")
        .expect_status(200)
        .json();
    assert_eq!(health["model"], "up-bench");
    assert_eq!(health["loaded"], true);
}

#[test]
fn close_mode_answers_http_1_0_and_ends_bodies_at_eof() {
    let dir = TempDir::new("bench-close");
    let (_daemon, addr) = start(&dir, "1.0");
    let shape = Shape::new(2, 3);
    for stream in [false, true] {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(DEADLINE)).unwrap();
        post(&mut conn, &wire::chat_request("any", stream, shape));
        let mut data = Vec::new();
        conn.read_to_end(&mut data).unwrap();
        let text = String::from_utf8(data).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
        assert!(head.contains("Connection: close"), "{head}");
        assert!(!head.contains("chunked"), "{head}");
        let expected = if stream {
            expected_sse("up-bench", shape)
        } else {
            wire::json_response("up-bench", &shape)
        };
        assert_eq!(body.as_bytes(), expected);
    }
}

#[test]
fn the_router_runs_it_as_its_backend_in_both_modes() {
    for http in ["1.1", "1.0"] {
        let config = ConfigBuilder::new("bench-router")
            .set("python", UPSTREAM)
            .wait_when_busy(true)
            .model(ModelSpec::new("m").profile_key("bench", json!({"http": http})))
            .build();
        let stack = Stack::start(config);
        let shape = Shape::new(5, 6);
        let body: serde_json::Value =
            serde_json::from_slice(&wire::chat_request("m", false, shape)).unwrap();
        let response = stack.chat(&body);
        response.expect_status(200);
        assert_eq!(response.body, wire::json_response("up-m", &shape));
        let body: serde_json::Value =
            serde_json::from_slice(&wire::chat_request("m", true, shape)).unwrap();
        let response = stack.chat(&body);
        response.expect_status(200);
        assert_eq!(response.body, expected_sse("up-m", shape));
        let starts = stack.fake_log().starts_for("up-m");
        assert_eq!(
            starts.len(),
            1,
            "one backend start, logged by bench-upstream"
        );
        stack.stop();
    }
}
