//! Test configs for the end-to-end tests: strata-test-support's config builder (see
//! [`strata_test_support::config`] for the layout and defaults), producing this crate's
//! [`TestConfig`], which adds what needs the product's types or this crate's clients: the
//! loaded [`Config`], its fingerprint, the fake log reader and the control client.

use std::ops::{Deref, DerefMut};

use strata_protocol::config::{Config, Family};

use crate::control::ControlClient;
use crate::fake_log::FakeLog;

pub use strata_test_support::ModelSpec;

/// The `qwen3.8-flash-next` family.
pub const FLASH: Family = Family::Qwen38FlashNext;
/// The `qwen3.6-35b-a3b` family.
pub const A3B: Family = Family::Qwen3635bA3b;

/// Builds a [`TestConfig`].
pub type ConfigBuilder = strata_test_support::ConfigBuilder<TestConfig>;

/// A written test config and where everything is: the fields of
/// [`strata_test_support::TestConfig`] (through `Deref`), and the methods below.
#[derive(Debug)]
pub struct TestConfig {
    files: strata_test_support::TestConfig,
}

impl From<strata_test_support::TestConfig> for TestConfig {
    fn from(files: strata_test_support::TestConfig) -> TestConfig {
        TestConfig { files }
    }
}

impl Deref for TestConfig {
    type Target = strata_test_support::TestConfig;

    fn deref(&self) -> &Self::Target {
        &self.files
    }
}

impl DerefMut for TestConfig {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.files
    }
}

impl TestConfig {
    /// The config as the daemons load it.
    pub fn load(&self) -> Config {
        Config::load(&self.path)
            .unwrap_or_else(|err| panic!("test config {} is invalid: {err}", self.path.display()))
    }

    /// The config fingerprint a proxy sends in its hello.
    pub fn fingerprint(&self) -> u64 {
        self.load().fingerprint()
    }

    /// A reader of the fake backend's log (it keeps the test directory alive).
    pub fn fake_log(&self) -> FakeLog {
        FakeLog::in_dir(&self.files.fake_log, &self.dir)
    }

    /// A client of the control socket.
    pub fn control(&self) -> ControlClient {
        ControlClient::new(&self.control_socket)
    }
}
