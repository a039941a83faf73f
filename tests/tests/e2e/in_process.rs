//! Both daemons' library `run` driven in-process, as the binaries drive them: the supervisor's
//! `run(config, signals)` on a current-thread runtime of its own thread (the backend's
//! parent-death signal is tied to that thread), the proxy's `run(config, listener, signals)` on
//! a listener the test bound. A chat request goes through both to the fake backend, then one
//! signal each drains and ends them with `Ok`, leaving no backend.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use strata_e2e::http::{self, chat_body};
use strata_e2e::{ConfigBuilder, DEADLINE, FakeLog, ModelSpec, poll_until};
use strata_protocol::config::Config;
use tokio::sync::watch;

const A: &str = "flash-a";

/// Runs `daemon` on a current-thread runtime in a new thread; the thread's result is `run`'s.
fn spawn_daemon<F, E>(
    name: &str,
    daemon: impl FnOnce(watch::Receiver<u32>) -> F + Send + 'static,
) -> (watch::Sender<u32>, thread::JoinHandle<Result<(), String>>)
where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let (signals_tx, signals_rx) = watch::channel(0u32);
    let handle = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime
                .block_on(daemon(signals_rx))
                .map_err(|err| err.to_string())
        })
        .expect("spawn a daemon thread");
    (signals_tx, handle)
}

fn join_within(handle: thread::JoinHandle<Result<(), String>>, what: &str) {
    poll_until(DEADLINE, format!("{what}'s run to return"), || {
        handle.is_finished()
    });
    match handle.join() {
        Ok(Ok(())) => {}
        Ok(Err(err)) => panic!("{what}'s run failed: {err}"),
        Err(_) => panic!("{what}'s run panicked"),
    }
}

#[test]
fn both_daemons_run_in_process_serve_a_request_and_stop_on_a_signal() {
    let test = ConfigBuilder::new("in-process")
        .model(ModelSpec::new(A))
        .build();
    let config = Arc::new(Config::load(&test.path).expect("the test config is valid"));
    let fake_log = FakeLog::new(&test.fake_log);

    let supervisor_config = config.clone();
    let (stop_supervisor, supervisor) = spawn_daemon("supervisor", move |signals| {
        strata_supervisor::run(supervisor_config, signals)
    });
    poll_until(DEADLINE, "the supervisor socket", || {
        test.supervisor_socket.exists()
    });

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    let addr = listener.local_addr().expect("local address");
    let proxy_config = config.clone();
    let (stop_proxy, proxy) = spawn_daemon("proxy", move |signals| {
        strata_proxy::run(proxy_config, listener, signals)
    });

    let response = http::post_json(addr, "/v1/chat/completions", &chat_body(A, false));
    response.expect_status(200);
    assert_eq!(response.header("x-strata-concrete-model"), Some(A));
    assert_eq!(fake_log.start_count(&format!("up-{A}")), 1);

    stop_proxy.send_modify(|count| *count += 1);
    join_within(proxy, "the proxy");
    stop_supervisor.send_modify(|count| *count += 1);
    join_within(supervisor, "the supervisor");
    fake_log.wait_no_backends_left(Duration::from_secs(10));
    assert!(
        !test.supervisor_socket.exists() && !test.control_socket.exists(),
        "the supervisor removes its sockets when run returns"
    );
}
