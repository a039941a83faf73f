//! The upstream client against a scripted backend on a loopback listener:
//! each framing, coalescing of chunks that arrive together, reuse of kept
//! connections (and not of stale or other-instance ones), and failures.

use std::time::Duration;

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

const LIMIT: Duration = Duration::from_secs(10);
const INSTANCE: BackendInstance = BackendInstance { epoch: 1, pid: 42 };

/// A backend that answers each accepted connection's requests with the
/// scripted byte strings, one script per connection, and reports each
/// connection's request bytes and how it ended.
struct Backend {
    addr: SocketAddr,
    accepted: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
}

impl Backend {
    /// `scripts[i]` serves the i-th connection: one answer (a list of
    /// writes) per request read on it; after the last answer it closes if
    /// `close` is set, else waits for the client to close.
    async fn start(scripts: Vec<(Vec<Vec<&'static [u8]>>, bool)>) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, accepted) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for (answers, close) in scripts {
                let (mut conn, _) = listener.accept().await.unwrap();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for writes in answers {
                        read_request(&mut conn, &mut seen).await;
                        for bytes in writes {
                            conn.write_all(bytes).await.unwrap();
                            conn.flush().await.unwrap();
                            tokio::task::yield_now().await;
                        }
                    }
                    if !close {
                        let mut rest = Vec::new();
                        let _ = conn.read_to_end(&mut rest).await;
                        seen.extend_from_slice(&rest);
                    }
                    let _ = tx.send(seen);
                });
            }
        });
        Backend { addr, accepted }
    }

    async fn connection(&mut self) -> Vec<u8> {
        tokio::time::timeout(LIMIT, self.accepted.recv())
            .await
            .expect("a finished connection")
            .expect("the backend task")
    }
}

/// Reads one request (head and content-length body).
async fn read_request(conn: &mut TcpStream, seen: &mut Vec<u8>) {
    let start = seen.len();
    let mut byte = [0u8; 1];
    while !seen[start..].ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).await.unwrap() == 0 {
            return;
        }
        seen.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&seen[start..]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .map_or(0, |len| len.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).await.unwrap();
    seen.extend_from_slice(&body);
}

async fn ask(pool: &Arc<UpstreamPool>, backend: &Backend) -> Upstream {
    tokio::time::timeout(
        LIMIT,
        send(
            pool,
            backend.addr,
            INSTANCE,
            Bytes::from_static(b"{\"model\":\"m\"}"),
            None,
        ),
    )
    .await
    .expect("an answer in time")
    .expect("an answer")
}

/// Every data frame of the body, as they came.
async fn frames(upstream: &mut Upstream) -> Result<Vec<Bytes>, io::Error> {
    let mut out = Vec::new();
    while let Some(frame) = upstream.response.body_mut().frame().await {
        if let Ok(data) = frame?.into_data() {
            out.push(data);
        }
    }
    Ok(out)
}

#[tokio::test]
async fn a_close_delimited_http_1_0_answer_reads_to_eof_and_is_not_kept() {
    let mut backend = Backend::start(vec![(
        vec![vec![
            b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":",
            b"1}",
        ]],
        true,
    )])
    .await;
    let pool = Arc::new(UpstreamPool::default());
    let mut upstream = ask(&pool, &backend).await;
    assert_eq!(upstream.response.status(), StatusCode::OK);
    assert_eq!(upstream.response.version(), Version::HTTP_10);
    let body: Vec<u8> = frames(&mut upstream).await.unwrap().concat();
    assert_eq!(body, b"{\"a\":1}");
    assert_eq!(pool.idle(), 0);
    let request = String::from_utf8(backend.connection().await).unwrap();
    assert!(
        request.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains("content-length: 13\r\n"), "{request}");
    assert!(request.ends_with("\r\n\r\n{\"model\":\"m\"}"), "{request}");
}

#[tokio::test]
async fn chunks_that_arrive_together_are_handed_over_as_one_piece() {
    let whole: &'static [u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
        5;ext=1\r\ndata:\r\n6\r\n one\n\n\r\n6\r\ndata: \r\n5\r\ntwo\n\n\r\n0\r\nX-Trailer: t\r\n\r\n";
    let mut backend = Backend::start(vec![(vec![vec![whole]], true)]).await;
    let pool = Arc::new(UpstreamPool::default());
    let mut upstream = ask(&pool, &backend).await;
    let pieces = frames(&mut upstream).await.unwrap();
    assert_eq!(pieces.concat(), b"data: one\n\ndata: two\n\n");
    assert_eq!(pieces.len(), 1, "{pieces:?}");
    backend.connection().await;
}

#[tokio::test]
async fn a_chunked_body_split_anywhere_decodes_the_same() {
    let bytes: &'static [u8] =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
        a\r\n0123456789\r\n3\r\nabc\r\n0\r\n\r\n";
    let writes: Vec<&'static [u8]> = bytes.chunks(1).collect();
    let mut backend = Backend::start(vec![(vec![writes], true)]).await;
    let pool = Arc::new(UpstreamPool::default());
    let mut upstream = ask(&pool, &backend).await;
    assert_eq!(
        frames(&mut upstream).await.unwrap().concat(),
        b"0123456789abc"
    );
    backend.connection().await;
}

#[tokio::test]
async fn a_kept_connection_serves_the_next_request_of_the_same_instance() {
    let answer: &'static [u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let mut backend = Backend::start(vec![(vec![vec![answer], vec![answer]], false)]).await;
    let pool = Arc::new(UpstreamPool::default());
    for _ in 0..2 {
        let mut upstream = ask(&pool, &backend).await;
        assert_eq!(frames(&mut upstream).await.unwrap().concat(), b"ok");
        assert_eq!(pool.idle(), 1, "a clean end keeps the connection");
    }
    // Another instance never uses it: the kept one is closed and a new one made.
    assert!(
        pool.check_out(PoolKey {
            backend: backend.addr,
            instance: BackendInstance { epoch: 2, pid: 43 }
        })
        .is_none()
    );
    assert_eq!(pool.idle(), 0);
    let seen = String::from_utf8(backend.connection().await).unwrap();
    assert_eq!(
        seen.matches("POST ").count(),
        2,
        "both requests on one connection"
    );
}

#[tokio::test]
async fn a_kept_connection_the_backend_closed_is_replaced_transparently() {
    let answer: &'static [u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    // The first connection answers once and then closes; the second serves the retry.
    let mut backend =
        Backend::start(vec![(vec![vec![answer]], true), (vec![vec![answer]], true)]).await;
    let pool = Arc::new(UpstreamPool::default());
    let mut upstream = ask(&pool, &backend).await;
    assert_eq!(frames(&mut upstream).await.unwrap().concat(), b"ok");
    backend.connection().await;
    let mut upstream = ask(&pool, &backend).await;
    assert_eq!(frames(&mut upstream).await.unwrap().concat(), b"ok");
    assert!(!backend.connection().await.is_empty());
}

#[tokio::test]
async fn an_interim_answer_is_skipped_and_a_cut_body_is_an_error() {
    let mut backend = Backend::start(vec![(
        vec![vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345",
        ]],
        true,
    )])
    .await;
    let pool = Arc::new(UpstreamPool::default());
    let mut upstream = ask(&pool, &backend).await;
    assert_eq!(upstream.response.status(), StatusCode::OK);
    let err = frames(&mut upstream).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(pool.idle(), 0);
    backend.connection().await;
}

#[tokio::test]
async fn what_is_not_http_is_a_protocol_error() {
    let backend = Backend::start(vec![(vec![vec![b"SSH-2.0-OpenSSH\r\n\r\n"]], true)]).await;
    let pool = Arc::new(UpstreamPool::default());
    let sent = send(
        &pool,
        backend.addr,
        INSTANCE,
        Bytes::from_static(b"{}"),
        None,
    )
    .await;
    assert!(matches!(sent, Err(UpstreamError::Protocol(_))));
}

#[tokio::test]
async fn dropping_the_body_mid_stream_closes_the_connection() {
    let mut backend = Backend::start(vec![(
        vec![vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
        ]],
        false,
    )])
    .await;
    let pool = Arc::new(UpstreamPool::default());
    let mut upstream = ask(&pool, &backend).await;
    let first = upstream.response.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), Bytes::from_static(b"abc"));
    drop(upstream);
    // The backend's read_to_end returns: the proxy closed the connection.
    backend.connection().await;
    assert_eq!(pool.idle(), 0);
}
