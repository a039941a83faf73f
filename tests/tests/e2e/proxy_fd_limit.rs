//! `strata-proxy` out of file descriptors. Started with its open-file limit at 64, soft and hard
//! (so it cannot raise it), it reports the limit at start; idle client connections then use up
//! its descriptors. Every accept fails while the rest wait in the listen backlog: the proxy
//! backs off and warns a bounded number of times (it used to warn 20 times a second), stays
//! up, serves again as soon as the connections close, and still stops cleanly on SIGTERM
//! while out of descriptors.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use strata_e2e::stack::Stack;
use strata_e2e::{
    ConfigBuilder, DEADLINE, ModelSpec, POLL_INTERVAL, http, poll_for, poll_until, procs,
    with_ulimit,
};

const A: &str = "flash-a";

/// The proxy's open-file limit, soft and hard.
const FD_LIMIT: u32 = 64;

/// More connections than the proxy has descriptors for, so some always wait in the backlog
/// (far below its length) and every accept fails until some close.
const IDLE_CONNECTIONS: usize = 80;

/// How long the test watches the proxy fail accepts. The old loop warned about 40 times in
/// this long; the backoff warns once, then once per 10 s.
const WINDOW: Duration = Duration::from_secs(2);

/// Connections that send nothing: each one the proxy accepts holds a descriptor until the
/// header read timeout (60 s, far beyond this test).
fn open_idle(addr: std::net::SocketAddr) -> Vec<TcpStream> {
    (0..IDLE_CONNECTIONS)
        .map(|i| {
            TcpStream::connect_timeout(&addr, DEADLINE)
                .unwrap_or_else(|err| panic!("idle connection {i}: {err}"))
        })
        .collect()
}

/// Whether every descriptor number below the limit is in use in `pid`. (It may also hold some
/// above it, inherited from before the limit was set, such as cargo's jobserver pipe.)
fn out_of_descriptors(pid: u32) -> bool {
    procs::open_fds(pid)
        .is_some_and(|fds| fds.iter().filter(|&&fd| fd < FD_LIMIT).count() == FD_LIMIT as usize)
}

fn accept_warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| line.contains("accept failed"))
        .collect()
}

/// The lines that report accept failures or their end.
fn accept_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| line.contains("accept failed") || line.contains("accepting connections"))
        .collect()
}

/// The `failures=N` field of a log line.
fn failures_field(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("failures="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no failures=N in {line:?}"))
}

#[test]
fn out_of_descriptors_the_proxy_backs_off_warns_rarely_and_recovers() {
    let config = ConfigBuilder::new("fdlimit")
        .model(ModelSpec::new(A))
        .build();
    let mut stack = Stack::supervisor_only(config);
    stack.start_proxy_with(|command| with_ulimit(&format!("-n {FD_LIMIT}"), &command));
    let pid = stack.proxy_pid();
    let addr = stack.addr();
    let limit = u64::from(FD_LIMIT);
    assert_eq!(procs::open_file_limits(pid), Some((limit, limit)));
    let stderr = stack.proxy().stderr();
    assert!(
        stderr
            .lines()
            .any(|line| line.ends_with(&format!("open file limit: {FD_LIMIT}"))),
        "{stderr}"
    );

    let idle = open_idle(addr);
    poll_until(DEADLINE, "the proxy to run out of descriptors", || {
        out_of_descriptors(pid)
    });
    poll_until(DEADLINE, "a warning about a failed accept", || {
        !accept_warnings(&stack.proxy().stderr()).is_empty()
    });
    // Not a synchronisation: the test watches a fixed stretch of failing accepts, checking
    // that the proxy stays up, then counts the warnings it logged meanwhile.
    let window_end = Instant::now() + WINDOW;
    while Instant::now() < window_end {
        let proxy = stack.proxy();
        assert!(proxy.is_running(), "{}", proxy.stderr_report());
        std::thread::sleep(POLL_INTERVAL);
    }
    assert!(out_of_descriptors(pid), "no longer out of descriptors");
    let stderr = stack.proxy().stderr();
    let warnings = accept_warnings(&stderr);
    assert!(
        warnings.len() < 5,
        "{} accept warnings:\n{stderr}",
        warnings.len()
    );
    assert_eq!(failures_field(warnings[0]), 1, "{stderr}");

    drop(idle);
    poll_until(DEADLINE, "GET /health to answer 200 again", || {
        http::try_request(addr, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 200)
    });
    // Every failure is counted in exactly one line, and the last line says accepts work again.
    // It comes at once, or, if an accept succeeded in between (say as the harness's last
    // /health connection closed) and took that line early, with the report 10 s after the
    // warning.
    let (failures, stderr) = poll_for(DEADLINE, "a line counting the failures since", || {
        let stderr = stack.proxy().stderr();
        let lines = accept_lines(&stderr);
        let failures: u64 = lines.iter().copied().map(failures_field).sum();
        let recovered = lines
            .last()
            .is_some_and(|line| line.contains("accepting connections again"));
        (recovered && failures > 1).then_some((failures, stderr))
    });
    // The proxy kept trying through the window, every 500 ms at most: a loop without backoff
    // would have counted thousands.
    assert!(failures < 100, "{failures} failures:\n{stderr}");

    // Out of descriptors again: SIGTERM still stops it cleanly (`stop` asserts exit 0).
    let idle = open_idle(addr);
    poll_until(
        DEADLINE,
        "the proxy to run out of descriptors again",
        || out_of_descriptors(pid),
    );
    stack.stop();
    drop(idle);
}
