//! The non-stream side: an `application/json` chat completion.
//!
//! serde_json cannot resume a parse across chunks, and a non-stream body is
//! sent in one piece after generation anyway, so the body is copied into a
//! buffer (at most [`MAX_INSPECT_BYTES`]) and read once at EOF. Token arrival
//! is not observable here, so first/last token times stay `None`.

use super::MAX_INSPECT_BYTES;
use super::frame;
use super::summary::Observed;

#[derive(Default)]
pub(super) struct JsonBody {
    body: Vec<u8>,
    /// The body outgrew the limit; nothing more is kept.
    oversized: bool,
}

impl JsonBody {
    pub(super) fn observe(&mut self, chunk: &[u8]) {
        if self.oversized {
            return;
        }
        if self.body.len() + chunk.len() > MAX_INSPECT_BYTES {
            self.oversized = true;
            // Release the memory now rather than when the response ends.
            self.body = Vec::new();
        } else {
            self.body.extend_from_slice(chunk);
        }
    }

    /// Bytes held of the body.
    #[cfg(test)]
    pub(super) fn buffered(&self) -> usize {
        self.body.len()
    }

    pub(super) fn finish(&mut self) -> Observed {
        let mut out = Observed::default();
        if self.oversized {
            out.accounting_unavailable = true;
            return out;
        }
        let body = std::mem::take(&mut self.body);
        if body.trim_ascii().is_empty() {
            return out;
        }
        match frame::parse(&body) {
            Ok(frame) => {
                out.inband_error = frame.error;
                out.finish_reason = frame.first_finish;
                out.absorb_accounting(&frame.usage, &frame.timings);
            }
            // A 2xx "JSON" body that is not JSON (or was cut short) did not
            // give the client a completion.
            Err(_) => out.inband_error = true,
        }
        out
    }
}
