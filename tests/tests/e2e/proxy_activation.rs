//! Socket activation of the real `strata-proxy` binary with `require_socket_activation: true`,
//! started through `tests/launch_with_fd3.py` (which places a socket at fd 3, sets `LISTEN_*`
//! as asked, and exec()s the proxy in place, so the spawned process *is* the proxy).
//!
//! The accepted case serves HTTP on the launcher's socket. Every malformed case (wrong
//! `LISTEN_PID`, two descriptors, a socket that is not listening, the wrong address, no
//! activation at all) makes the proxy exit non-zero with a message naming the problem, without
//! ever serving, connecting to the supervisor, or binding the configured address itself.

use std::net::{Ipv4Addr, SocketAddr};

use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::{Stack, launch_with_fd3};
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, free_port};
use strata_protocol::api::{Health, LinkStatus};

const A: &str = "flash-a";

fn activated_stack(tag: &str) -> Stack {
    let config = ConfigBuilder::new(tag)
        .model(ModelSpec::new(A))
        .set("require_socket_activation", true)
        .build();
    Stack::supervisor_only(config)
}

#[test]
fn activation_accepted_serves_on_the_launchers_socket() {
    let mut stack = activated_stack("act-ok");
    let listen = stack.addr().to_string();
    stack.start_proxy_with(|proxy| launch_with_fd3(&["--bind", &listen], &proxy));
    let launcher_out = stack.proxy().stdout();
    assert_eq!(
        launcher_out.lines().next(),
        Some(format!("BOUND {listen}").as_str()),
        "the launcher bound the configured address"
    );
    let health: Health = stack.get("/health").expect_status(200).document();
    assert_eq!(health.supervisor, LinkStatus::Connected);
    let response = stack.chat(&chat_body(A, false));
    assert_eq!(response.status, 200, "{response}");
    assert_eq!(stack.status().proxies, 1);
    // The adopted descriptor stays the proxy's listener (fd 3, a socket).
    let fd3 =
        std::fs::read_link(format!("/proc/{}/fd/3", stack.proxy_pid())).expect("fd 3 of the proxy");
    assert!(
        fd3.to_string_lossy().starts_with("socket:"),
        "fd 3 is {fd3:?}"
    );
    stack.stop();
}

/// Spawns the proxy through the launcher with the arguments `args` makes from the configured
/// address; it must exit non-zero, saying `message`, without serving or reaching the
/// supervisor, and the configured address must not be served afterwards (no fallback bind).
fn assert_refused(
    tag: &str,
    args: impl FnOnce(SocketAddr) -> Vec<String>,
    message: impl FnOnce(SocketAddr) -> String,
) {
    let mut stack = activated_stack(tag);
    let listen = stack.addr();
    let args = args(listen);
    let message = message(listen);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.is_empty() {
        // No launcher at all: no activation variables.
        true => stack.spawn_proxy_with(|proxy| proxy),
        false => stack.spawn_proxy_with(|proxy| launch_with_fd3(&args, &proxy)),
    };
    let status = stack.wait_proxy_exit(DEADLINE);
    let stderr = stack.proxy().stderr();
    assert_ne!(
        status.code(),
        Some(98),
        "{tag}: the launcher could not bind its port (a port race; rerun): {stderr}"
    );
    assert!(
        !status.success() && status.code().is_some(),
        "{tag}: strata-proxy must exit with an error status, got {status}\n{stderr}"
    );
    assert!(
        stderr.contains(&message),
        "{tag}: stderr must say {message:?}:\n{stderr}"
    );
    assert!(
        stderr.contains("strata-proxy: ") && !stderr.contains("proxy serving"),
        "{tag}: {stderr}"
    );
    assert_eq!(
        stack.status().proxies,
        0,
        "{tag}: a refused proxy never connects to the supervisor"
    );
    let err = http::try_request(listen, "GET", "/health", &[], b"")
        .expect_err("the configured address must not be served");
    assert_eq!(
        err.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{tag}: {err}"
    );
    assert!(stack.fake_log().starts().is_empty());
    stack.stop();
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[test]
fn activation_refuses_another_processes_listen_pid() {
    // `other` is the launcher's parent (this test): a live, different process.
    assert_refused(
        "act-pid",
        |listen| strings(&["--listen-pid", "other", "--bind", &listen.to_string()]),
        |_| "socket activation is addressed to another process (LISTEN_PID=".to_owned(),
    );
}

#[test]
fn activation_refuses_two_descriptors() {
    assert_refused(
        "act-fds",
        |listen| strings(&["--fds", "2", "--bind", &listen.to_string()]),
        |_| "passed 2 sockets (LISTEN_FDS=2) but exactly one is required".to_owned(),
    );
}

#[test]
fn activation_refuses_a_socket_that_is_not_listening() {
    assert_refused(
        "act-nolisten",
        |listen| strings(&["--no-listen", "--bind", &listen.to_string()]),
        |_| "the passed fd 3 is not a listening TCP socket".to_owned(),
    );
}

#[test]
fn activation_refuses_the_wrong_address() {
    let other = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    assert_refused(
        "act-addr",
        |_| strings(&["--bind", &other.to_string()]),
        |listen| format!("the passed socket is bound to {other} but listen is {listen}"),
    );
}

#[test]
fn activation_required_but_missing_is_refused() {
    assert_refused(
        "act-none",
        |_| Vec::new(),
        |_| "require_socket_activation is set but no socket was passed".to_owned(),
    );
}
