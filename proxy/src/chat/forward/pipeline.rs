//! What becomes of each backend chunk before it may reach the client, as a
//! pure step: the [`ModelGate`] holds the start of the response until its
//! `model` is known, then, in a stream whose headers the router sent, the
//! [`ErrorFrameCut`] ends it at the backend's own error frame. No I/O, no
//! clock, no logging: the forwarding loop offers what is released and ends
//! the response when told to.

use bytes::Bytes;

use crate::chat::error::ChatError;
use crate::observe::ModelGate;

use super::inband::{Cut, ErrorFrameCut};

/// Why the response must end once what was released has been handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The answer names another model than the leased one (nothing of it
    /// was released).
    WrongModel,
    /// The backend's own error frame started here (router-committed
    /// streams only): it and everything after it are dropped.
    ErrorFrame,
}

impl Stop {
    pub fn error(self) -> ChatError {
        match self {
            Stop::WrongModel => ChatError::WrongModel,
            Stop::ErrorFrame => ChatError::BackendErrorFrame,
        }
    }
}

/// What one step released.
#[derive(Debug, PartialEq, Eq)]
pub struct Released {
    /// Bytes for the client now (never empty).
    pub data: Option<Bytes>,
    pub stop: Option<Stop>,
}

/// The gate and, for a router-committed stream, the error-frame cut.
pub struct Pipeline<'a> {
    gate: &'a mut ModelGate,
    cut: Option<ErrorFrameCut>,
}

impl<'a> Pipeline<'a> {
    /// `in_band`: the router sent the stream's headers, so the backend's
    /// own error frame becomes the router's `event: error`.
    pub fn new(gate: &'a mut ModelGate, in_band: bool) -> Pipeline<'a> {
        Pipeline {
            gate,
            cut: in_band.then(ErrorFrameCut::default),
        }
    }

    /// Takes the backend's next (non-empty) chunk.
    pub fn push(&mut self, chunk: Bytes) -> Released {
        let gated = self.gate.push(chunk);
        self.release(gated, false)
    }

    /// The backend's body ended cleanly: whatever is still held is decided
    /// and released.
    pub fn finish(&mut self) -> Released {
        let gated = self.gate.finish();
        self.release(gated, true)
    }

    fn release<E>(&mut self, gated: Result<Option<Bytes>, E>, end: bool) -> Released {
        let Ok(gated) = gated else {
            return Released {
                data: None,
                stop: Some(Stop::WrongModel),
            };
        };
        let Some(cut) = self.cut.as_mut() else {
            return Released {
                data: gated,
                stop: None,
            };
        };
        let (mut data, stop) = match cut.push(gated.unwrap_or_default()) {
            Cut::Pass(data) => (data, None),
            Cut::ErrorFrame { before } => (before, Some(Stop::ErrorFrame)),
        };
        if end && stop.is_none() {
            let held = cut.finish();
            if !held.is_empty() {
                data = [data, held].concat().into();
            }
        }
        Released {
            data: (!data.is_empty()).then_some(data),
            stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::observe::BodyKind;

    use super::*;

    const FIRST: &str = "data: {\"model\":\"up-m\",\"choices\":[]}\n\n";
    const OTHER: &str = "data: {\"model\":\"other\",\"choices\":[]}\n\n";
    const ERROR: &str = "data: {\"error\":{\"type\":\"server_error\"}}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    /// What the client would get from one step, and whether it stops.
    type Out = (Option<&'static str>, Option<Stop>);

    /// One case: the gate's model (`None`: an open gate), in-band or not,
    /// the chunks, and the outcome of each push and then of `finish`.
    struct Case {
        name: &'static str,
        model: Option<&'static str>,
        in_band: bool,
        chunks: &'static [&'static str],
        pushed: &'static [Out],
        finished: Out,
    }

    fn run(case: &Case) {
        let mut gate = match case.model {
            Some(model) => ModelGate::new(BodyKind::Sse, model, None),
            None => ModelGate::open(),
        };
        let mut pipeline = Pipeline::new(&mut gate, case.in_band);
        let text = |released: Released| {
            let data = released
                .data
                .map(|data| String::from_utf8(data.to_vec()).unwrap());
            (data, released.stop)
        };
        for (chunk, expected) in case.chunks.iter().zip(case.pushed) {
            let got = text(pipeline.push(Bytes::from_static(chunk.as_bytes())));
            let expected = (expected.0.map(String::from), expected.1);
            assert_eq!(got, expected, "{}: push {chunk:?}", case.name);
        }
        let expected = (case.finished.0.map(String::from), case.finished.1);
        assert_eq!(text(pipeline.finish()), expected, "{}: finish", case.name);
    }

    #[test]
    fn each_chunk_is_gated_then_cut() {
        let cases = [
            Case {
                name: "a passed-through body passes unchanged",
                model: None,
                in_band: false,
                chunks: &["abc", "def"],
                pushed: &[(Some("abc"), None), (Some("def"), None)],
                finished: (None, None),
            },
            Case {
                name: "the first frame waits for its model, then passes",
                model: Some("up-m"),
                in_band: true,
                chunks: &["data: {\"mo", "del\":\"up-m\",\"choices\":[]}\n\n", DONE],
                pushed: &[(None, None), (Some(FIRST), None), (Some(DONE), None)],
                finished: (None, None),
            },
            Case {
                name: "another model stops the response before any byte",
                model: Some("up-m"),
                in_band: true,
                chunks: &[OTHER],
                pushed: &[(None, Some(Stop::WrongModel))],
                finished: (None, None),
            },
            Case {
                name: "another model in a last line without its newline still stops it",
                model: Some("up-m"),
                in_band: false,
                chunks: &["data: {\"model\":\"other\"}"],
                pushed: &[(None, None)],
                finished: (None, Some(Stop::WrongModel)),
            },
            Case {
                name: "the backend's error frame is cut in a committed stream",
                model: None,
                in_band: true,
                chunks: &[FIRST, "data: x\n\ndata: {\"error\":{}}\n\n"],
                pushed: &[
                    (Some(FIRST), None),
                    (Some("data: x\n\n"), Some(Stop::ErrorFrame)),
                ],
                finished: (None, None),
            },
            Case {
                name: "an error frame that is a whole chunk releases nothing",
                model: None,
                in_band: true,
                chunks: &[ERROR],
                pushed: &[(None, Some(Stop::ErrorFrame))],
                finished: (None, None),
            },
            Case {
                name: "with the backend's headers its error frame passes",
                model: None,
                in_band: false,
                chunks: &[ERROR, DONE],
                pushed: &[(Some(ERROR), None), (Some(DONE), None)],
                finished: (None, None),
            },
            Case {
                name: "an undecided line start is held, then released at the end",
                model: None,
                in_band: true,
                chunks: &["data: x\n\ndata: {", "\"id\":1}\n\n", "data: {"],
                pushed: &[
                    (Some("data: x\n\n"), None),
                    (Some("data: {\"id\":1}\n\n"), None),
                    (None, None),
                ],
                finished: (Some("data: {"), None),
            },
        ];
        for case in &cases {
            run(case);
        }
    }
}
