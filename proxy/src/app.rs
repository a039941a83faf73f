//! State shared by every request handler.
//!
//! Queue and in-flight counts are not kept here: the supervisor's engine is
//! the one scheduler and counts every proxy's requests. What is left is
//! this proxy's own: the config, the link, a fallback request numbering for
//! when the supervisor is away, and the last streamed request's figures
//! (behind a std `Mutex` that is only held to copy two numbers, never
//! across an `.await`).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use strata_protocol::config::Config;

use crate::link::SupervisorLink;
use crate::tasks::Tasks;
use crate::upstream::UpstreamPool;

/// Figures of the most recent streamed request that produced tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LastStream {
    pub ttft_ms: Option<u64>,
    /// Completion tokens per second of observed generation; `None` when the
    /// stream carried no completion token usage.
    pub decode_tokens_per_second: Option<f64>,
}

pub struct App {
    pub config: Arc<Config>,
    pub link: SupervisorLink,
    /// This proxy's own instance identifier, `proxy-PID-STARTMS` (its PID and
    /// start time, as a supervisor's, marked as a proxy's): the request IDs
    /// it assigns while no supervisor numbers its requests are
    /// `proxy-PID-STARTMS-N`, unique across its restarts and PID reuse.
    pub proxy_instance: String,
    /// Local fallback numbering when the supervisor cannot allocate one.
    pub unlinked_requests: AtomicU64,
    /// Forwarding tasks and body drains, for the drain to wait for.
    pub tasks: Tasks,
    /// Idle keep-alive connections to the backend (empty with Strata).
    pub upstream_pool: Arc<UpstreamPool>,
    last_stream: Mutex<LastStream>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

impl App {
    pub fn new(config: Arc<Config>, link: SupervisorLink) -> Arc<App> {
        Arc::new(App {
            config,
            link,
            proxy_instance: strata_protocol::ids::proxy_instance_id(
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_millis()),
            ),
            unlinked_requests: AtomicU64::new(0),
            tasks: Tasks::default(),
            upstream_pool: Arc::default(),
            last_stream: Mutex::new(LastStream::default()),
        })
    }

    pub fn last_stream(&self) -> LastStream {
        *self
            .last_stream
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    pub fn set_last_stream(&self, figures: LastStream) {
        *self
            .last_stream
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = figures;
    }
}

#[cfg(test)]
impl App {
    /// Tests: an `App` around `link`, with a config that matches nothing in
    /// particular (one model, `m`; the default timers and scheduling).
    pub fn for_tests(link: SupervisorLink) -> Arc<App> {
        let config = strata_protocol::config::testing::one_model_config(std::path::Path::new(
            "/nonexistent/control.sock",
        ));
        App::new(Arc::new(config), link)
    }
}
