//! A minimal in-memory [`Config`] for the daemons' unit tests.
//!
//! Compiled only for protocol's own tests and with the `testing` feature,
//! which the supervisor and the proxy enable in their dev-dependencies
//! alone, so no product build contains it. It lives here because a test
//! that wants a `Config` without writing a file needs this crate:
//! `strata-test-support` depends on no workspace crate (protocol's own
//! tests use it) and can only write config files.

use std::path::Path;

use super::Config;

/// A config with one model, `m` (`qwen3.8-flash-next`, `q4`, upstream `m`),
/// that nothing can launch: its interpreter and `strata_dir` do not exist.
/// The control socket is `control_socket`, the supervisor socket beside it.
pub fn one_model_config(control_socket: &Path) -> Config {
    let text = serde_json::json!({
        "python": "/nonexistent/python3",
        "strata_dir": "/nonexistent",
        "backend_port": 1,
        "control_socket": control_socket,
        "models": {"m": {"family": "qwen3.8-flash-next", "quantization": "q4", "upstream_model": "m"}},
    })
    .to_string();
    Config::from_json_str(&text).expect("the test config is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_config_has_one_model_and_the_given_sockets() {
        let config = one_model_config(Path::new("/nonexistent/control.sock"));
        let ids: Vec<&str> = config
            .registry
            .models()
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["m"]);
        assert_eq!(
            config.control_socket,
            Path::new("/nonexistent/control.sock")
        );
        assert_eq!(
            config.supervisor_socket.parent(),
            Some(Path::new("/nonexistent"))
        );
    }
}
