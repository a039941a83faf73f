//! One HTTP request to the leased backend.
//!
//! Strata answers with HTTP/1.0 and `Connection: close`, so every request
//! gets its own TCP connection and its body ends at EOF; hyper's client
//! reads such close-delimited bodies. The connection task is aborted when
//! the [`Upstream`] is dropped, which closes the socket: that is how the
//! proxy cancels a generation (Strata notices the closed connection).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Why the backend could not be asked.
#[derive(Debug)]
pub enum UpstreamError {
    Connect(std::io::Error),
    Http(hyper::Error),
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Connect(err) => write!(f, "cannot connect to the backend: {err}"),
            UpstreamError::Http(err) => write!(f, "backend request failed: {err}"),
        }
    }
}

/// The backend's response and the task driving its connection.
pub struct Upstream {
    pub response: Response<Incoming>,
    connection: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Sends the chat request and waits for the response headers.
pub async fn send(
    backend: SocketAddr,
    body: Bytes,
    accept: Option<HeaderValue>,
) -> Result<Upstream, UpstreamError> {
    let stream = TcpStream::connect(backend)
        .await
        .map_err(UpstreamError::Connect)?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(UpstreamError::Http)?;
    let connection = tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(error = %err, "backend connection ended with an error");
        }
    });
    let host =
        HeaderValue::from_str(&backend.to_string()).expect("a socket address is a valid header");
    let mut request = Request::post("/v1/chat/completions")
        .header(HOST, host)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(accept) = accept {
        request = request.header(ACCEPT, accept);
    }
    let request = request
        .body(Full::new(body))
        .expect("static request parts are valid");
    let guard = AbortOnDrop(Some(connection));
    let response = sender
        .send_request(request)
        .await
        .map_err(UpstreamError::Http)?;
    Ok(Upstream {
        response,
        connection: guard.disarm(),
    })
}

/// Aborts the connection task if the request fails before a response.
struct AbortOnDrop(Option<JoinHandle<()>>);

impl AbortOnDrop {
    fn disarm(mut self) -> JoinHandle<()> {
        self.0.take().expect("disarmed once")
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}
