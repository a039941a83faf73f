//! Why the supervisor refuses a proxy's hello ([`RefuseReason`]).
//!
//! The supervisor decides the reason as this type; it travels in
//! [`SupervisorMessage::Refused`] as its text, because that frame must read
//! the same in every protocol version (see [`super`]): a proxy of another
//! build can then still log why it was refused, and exit 78. Each text
//! tells the operator what to fix.

use std::fmt;

use super::SupervisorMessage;

/// Why a hello was refused; the supervisor closes the connection after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefuseReason {
    /// The peer is neither the supervisor's user nor root (`SO_PEERCRED`).
    WrongUser,
    /// The proxy speaks another protocol version (another build).
    ProtocolVersion { proxy: u32, supervisor: u32 },
    /// The hello's pid is not the connecting process's, as the kernel
    /// reports it: a peer cannot pass itself off as another process.
    PidMismatch { hello: u32, peer: u32 },
    /// The proxy's config fingerprint differs from the supervisor's.
    Fingerprint,
    /// The first frame was another message.
    NotAHello,
    /// The first frame could not be read: the framing error's text
    /// (an undecodable payload, or a length prefix over the limit).
    BadHello(String),
}

impl fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::WrongUser => f.write_str("permission denied: wrong user"),
            RefuseReason::ProtocolVersion { proxy, supervisor } => write!(
                f,
                "protocol version {proxy} is not supported (supervisor speaks {supervisor}); run matching strata-proxy and strata-supervisor builds"
            ),
            RefuseReason::PidMismatch { hello, peer } => write!(
                f,
                "the hello's pid {hello} is not the connecting process's ({peer})"
            ),
            RefuseReason::Fingerprint => f.write_str(
                "config fingerprint differs: the proxy and the supervisor were started with different configurations (models or settings); restart both with the same config",
            ),
            RefuseReason::NotAHello => f.write_str("expected a hello first"),
            RefuseReason::BadHello(error) => write!(f, "bad hello: {error}"),
        }
    }
}

impl RefuseReason {
    /// A refusal that a supervisor with the proxy's own build and settings
    /// would not give: the proxy waits for one (a config change or an
    /// upgrade half done) instead of exiting.
    pub fn is_mismatch(&self) -> bool {
        matches!(
            self,
            RefuseReason::Fingerprint | RefuseReason::ProtocolVersion { .. }
        )
    }

    /// Reads a refusal's text back into its reason (the inverse of
    /// `Display`): how a proxy tells a mismatch it can wait out from a
    /// refusal for good. `None` for a text this build does not know.
    pub fn parse(text: &str) -> Option<RefuseReason> {
        let fixed = [
            RefuseReason::WrongUser,
            RefuseReason::Fingerprint,
            RefuseReason::NotAHello,
        ];
        if let Some(reason) = fixed.into_iter().find(|r| r.to_string() == text) {
            return Some(reason);
        }
        if let Some(error) = text.strip_prefix("bad hello: ") {
            return Some(RefuseReason::BadHello(error.to_owned()));
        }
        let numbers = |rest: &str, between: &str, end: &str| -> Option<(u32, u32)> {
            let (first, rest) = rest.split_once(between)?;
            let second = rest.strip_suffix(end)?;
            Some((first.parse().ok()?, second.parse().ok()?))
        };
        if let Some(rest) = text.strip_prefix("protocol version ") {
            let (proxy, supervisor) = numbers(
                rest,
                " is not supported (supervisor speaks ",
                "); run matching strata-proxy and strata-supervisor builds",
            )?;
            return Some(RefuseReason::ProtocolVersion { proxy, supervisor });
        }
        if let Some(rest) = text.strip_prefix("the hello's pid ") {
            let (hello, peer) = numbers(rest, " is not the connecting process's (", ")")?;
            return Some(RefuseReason::PidMismatch { hello, peer });
        }
        None
    }
}

impl From<RefuseReason> for SupervisorMessage {
    fn from(reason: RefuseReason) -> SupervisorMessage {
        SupervisorMessage::Refused {
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator-facing texts, one per reason (scripts and the proxy's
    /// log show them as they are).
    #[test]
    fn each_reason_says_what_to_fix() {
        let cases = [
            (RefuseReason::WrongUser, "permission denied: wrong user"),
            (
                RefuseReason::ProtocolVersion {
                    proxy: 9,
                    supervisor: 8,
                },
                "protocol version 9 is not supported (supervisor speaks 8); run matching strata-proxy and strata-supervisor builds",
            ),
            (
                RefuseReason::PidMismatch { hello: 2, peer: 3 },
                "the hello's pid 2 is not the connecting process's (3)",
            ),
            (
                RefuseReason::Fingerprint,
                "config fingerprint differs: the proxy and the supervisor were started with different configurations (models or settings); restart both with the same config",
            ),
            (RefuseReason::NotAHello, "expected a hello first"),
            (
                RefuseReason::BadHello("malformed frame: x".into()),
                "bad hello: malformed frame: x",
            ),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text);
            assert_eq!(RefuseReason::parse(text), Some(reason.clone()), "{text}");
            assert_eq!(
                SupervisorMessage::from(reason),
                SupervisorMessage::Refused {
                    reason: text.into()
                }
            );
        }
    }

    #[test]
    fn only_the_build_and_config_mismatches_can_be_waited_out() {
        assert!(RefuseReason::Fingerprint.is_mismatch());
        let version = RefuseReason::ProtocolVersion {
            proxy: 1,
            supervisor: 2,
        };
        assert!(version.is_mismatch());
        for reason in [
            RefuseReason::WrongUser,
            RefuseReason::PidMismatch { hello: 1, peer: 2 },
            RefuseReason::NotAHello,
            RefuseReason::BadHello("x".into()),
        ] {
            assert!(!reason.is_mismatch(), "{reason:?}");
        }
        assert_eq!(RefuseReason::parse("something else"), None);
        let bad_number = "protocol version x is not supported (supervisor speaks 8); \
                          run matching strata-proxy and strata-supervisor builds";
        assert_eq!(RefuseReason::parse(bad_number), None);
    }
}
