//! The end-to-end tests, one module per scenario family, in one test binary.
//!
//! Each file of this folder was a test binary of its own; as modules of one binary the crate
//! links once instead of once per file, which is most of what building these tests cost. A
//! file's tests keep their names under the file's name as module:
//!
//!     cargo test -p strata-e2e --test e2e                        # all of them
//!     cargo test -p strata-e2e --test e2e supervisor_leases::    # one file's tests
//!     cargo test -p strata-e2e --test e2e supervisor_leases::off # those of its named so
//!
//! (A filter matches anywhere in a name: `waiting::` also runs `proxy_waiting::`.)
//!
//! Tests of different files now run in parallel with each other (as many at once as the test
//! harness has threads, the number of cores unless `RUST_TEST_THREADS` says otherwise), as the
//! tests of one file always did: each test starts its own daemons, on its own free ports and
//! in its own temp directory (`strata_e2e::stack`, `strata_test_support`). A file whose tests
//! must not share the process or the machine with others stays a binary of its own next to this
//! folder, and its module doc says why: `prefetch.rs` (its idle-class reads are starved by
//! any other test's disk reads), `prefetch_warnings.rs` (its file reads would starve
//! `prefetch.rs`'s idle-class prefetch), `real_strata.rs` (run by hand with
//! `--test real_strata`), `sim_fidelity.rs` (real waits against simulated ones within 500 ms),
//! `soak.rs` (loads the machine on purpose) and `systemd_restart.rs` (a private systemd at a
//! time, with strict checks).

mod accounting_concurrency;
mod accounting_cursor;
mod accounting_endpoints;
mod accounting_file;
mod accounting_proxy_crash;
mod accounting_reasons;
mod accounting_restart;
mod accounting_schema;
mod architecture_doc;
mod backend_probes;
mod backend_stop;
mod bench_upstream;
mod client_sdks;
mod cliproxyapi;
mod config_change;
mod contrib_ops;
mod cooldown_growth;
mod ctl_top;
mod docs_links;
mod fake_backend;
mod in_process;
mod keepalive_gap;
mod learned_load_time;
mod lease_safety;
mod prometheus_server;
mod proxy_activation;
mod proxy_aliases;
mod proxy_disconnects;
mod proxy_fd_limit;
mod proxy_limits_and_errors;
mod proxy_metrics;
mod proxy_passthrough;
mod proxy_restarts;
mod proxy_smoke;
mod proxy_supervisor_link;
mod proxy_waiting;
mod proxy_without_supervisor;
mod restart;
mod scheduling_fixes;
mod sighup;
mod stock_strata;
mod stream_idle;
mod supervisor_control;
mod supervisor_drain;
mod supervisor_leases;
mod supervisor_process;
mod supervisor_protocol;
mod supervisor_start_failures;
mod waiting;

/// A file of this folder that is not declared above is never compiled nor run, and nothing
/// else would say so: every `NAME.rs` here must have its `mod NAME;`.
#[test]
fn every_file_of_this_folder_is_a_module_of_the_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e");
    let undeclared = strata_test_support::test_binary::undeclared_modules(&dir);
    assert!(
        undeclared.is_empty(),
        "tests/tests/e2e/main.rs does not declare {undeclared:?}: add `mod NAME;` for each"
    );
}

/// The test files beside this folder: each a binary of its own, for the reason its module doc
/// gives. A new test file belongs in this folder as a module; one that must run alone is named
/// here too, with its reason in its module doc.
const OWN_BINARIES: [&str; 6] = [
    "prefetch.rs",
    "prefetch_warnings.rs",
    "real_strata.rs",
    "sim_fidelity.rs",
    "soak.rs",
    "systemd_restart.rs",
];

/// A test file added beside this folder would be one more binary to link, quietly: only the
/// files that must run alone may be there.
#[test]
fn only_the_files_that_must_run_alone_are_binaries_of_their_own() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut beside: Vec<String> = std::fs::read_dir(&dir)
        .expect("read tests/tests")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs"))
        .collect();
    beside.sort();
    assert_eq!(
        beside, OWN_BINARIES,
        "tests/tests/*.rs: move a new file into tests/tests/e2e/ as a module (`mod NAME;` in \
         main.rs), or name it in OWN_BINARIES with the reason in its module doc"
    );
}
