//! Finding the backend's own error frame in a stream whose headers the router sent.
//!
//! Strata reports a failure mid-stream as `data: {"error":{...}}` and then `data: [DONE]`
//! (RESEARCH.md). Forwarded as is inside a router-committed stream, that reads as a success to
//! clients that look for the spec's `event: error` frame and `error.status` (CLIProxyAPI maps it
//! to 502, the SDKs see no status). [`ErrorFrameCut`] passes the stream through unchanged up to
//! the first line that starts an error frame: a `data:` field whose JSON object's first key is
//! `"error"`, as Strata writes it. Everything from that line on is dropped; the caller ends the
//! stream with its own error frame instead.
//!
//! It looks only at the start of each line, so a frame costs a few byte comparisons. A line
//! start that could still become an error frame but is cut off at the end of a chunk (rare: the
//! backend writes whole frames) is held back until the next chunk decides it, at most
//! [`MAX_HELD`] bytes; nothing else is ever held.

use bytes::{Bytes, BytesMut};

/// The longest undecided line start kept: `data:` plus generous whitespace and `{"error":`.
const MAX_HELD: usize = 64;

/// What to do with a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut {
    /// Forward these bytes (possibly empty: all of it is held for now).
    Pass(Bytes),
    /// An error frame starts after these bytes: forward them, then end the stream.
    ErrorFrame { before: Bytes },
}

/// The scanner's state between chunks.
#[derive(Debug)]
pub struct ErrorFrameCut {
    /// The next byte starts a line.
    at_line_start: bool,
    /// An undecided line start held back from the last chunk.
    held: BytesMut,
}

impl Default for ErrorFrameCut {
    fn default() -> Self {
        ErrorFrameCut {
            at_line_start: true,
            held: BytesMut::new(),
        }
    }
}

/// Whether a line starting with `line` is an error frame's data line.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Yes,
    No,
    /// The bytes end before it is decided.
    NeedMore,
}

fn classify(line: &[u8]) -> Verdict {
    let mut rest = line;
    // Each step: the text that must follow (after optional whitespace where JSON allows it).
    for (token, whitespace_before) in [
        (&b"data:"[..], false),
        (&b"{"[..], true),
        (&b"\"error\""[..], true),
        (&b":"[..], true),
    ] {
        if whitespace_before {
            let skipped = rest
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
            rest = &rest[skipped..];
        }
        let n = token.len().min(rest.len());
        if rest[..n] != token[..n] {
            return Verdict::No;
        }
        if n < token.len() {
            return Verdict::NeedMore;
        }
        rest = &rest[n..];
    }
    Verdict::Yes
}

impl ErrorFrameCut {
    pub fn push(&mut self, data: Bytes) -> Cut {
        let mut input = if self.held.is_empty() {
            data
        } else {
            let mut joined = std::mem::take(&mut self.held);
            joined.extend_from_slice(&data);
            joined.freeze()
        };
        let mut start = if self.at_line_start { Some(0) } else { None };
        let mut pos = 0;
        loop {
            if let Some(line_start) = start.take() {
                match classify(&input[line_start..]) {
                    Verdict::Yes => {
                        return Cut::ErrorFrame {
                            before: input.split_to(line_start),
                        };
                    }
                    Verdict::NeedMore if input.len() - line_start <= MAX_HELD => {
                        self.held.extend_from_slice(&input[line_start..]);
                        self.at_line_start = true;
                        input.truncate(line_start);
                        return Cut::Pass(input);
                    }
                    Verdict::NeedMore | Verdict::No => {}
                }
            }
            match input[pos..].iter().position(|&b| b == b'\n') {
                Some(newline) => {
                    pos += newline + 1;
                    start = Some(pos);
                }
                None => break,
            }
        }
        self.at_line_start = input.last() == Some(&b'\n');
        Cut::Pass(input)
    }

    /// The backend's body ended: whatever was held goes out (it was no error frame).
    pub fn finish(&mut self) -> Bytes {
        std::mem::take(&mut self.held).freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTENT: &[u8] =
        b"data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    const ERROR: &[u8] =
        b"data: {\"error\":{\"type\":\"server_error\",\"message\":\"engine died\"}}\n\n";
    const DONE: &[u8] = b"data: [DONE]\n\n";

    fn stream() -> Vec<u8> {
        [CONTENT, CONTENT, ERROR, DONE].concat()
    }

    /// Feeds `chunks` and returns what passed and whether an error frame was found.
    fn run(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut cut = ErrorFrameCut::default();
        let mut passed = Vec::new();
        for chunk in chunks {
            match cut.push(Bytes::copy_from_slice(chunk)) {
                Cut::Pass(bytes) => passed.extend_from_slice(&bytes),
                Cut::ErrorFrame { before } => {
                    passed.extend_from_slice(&before);
                    return (passed, true);
                }
            }
        }
        passed.extend_from_slice(&cut.finish());
        (passed, false)
    }

    #[test]
    fn the_error_frame_and_everything_after_it_are_cut_at_every_split() {
        let whole = stream();
        let expected = [CONTENT, CONTENT].concat();
        assert_eq!(run(&[&whole]), (expected.clone(), true));
        for split in 0..=whole.len() {
            let (a, b) = whole.split_at(split);
            assert_eq!(run(&[a, b]), (expected.clone(), true), "split at {split}");
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(run(&bytes), (expected, true));
    }

    #[test]
    fn a_stream_without_an_error_frame_passes_unchanged_at_every_split() {
        let whole = [CONTENT, b": keep-alive\n\n", CONTENT, DONE].concat();
        for split in 0..=whole.len() {
            let (a, b) = whole.split_at(split);
            assert_eq!(run(&[a, b]), (whole.clone(), false), "split at {split}");
        }
    }

    #[test]
    fn the_word_error_elsewhere_is_no_error_frame() {
        let frames = [
            &b"data: {\"id\":\"c\",\"error\":null}\n\n"[..],
            b"data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"error\\\":1}\"}}]}\n\n",
            b"event: message\ndata: {\"id\":\"x\"}\n\n",
        ];
        for frame in frames {
            assert_eq!(run(&[frame]), (frame.to_vec(), false));
        }
    }

    #[test]
    fn spacing_variants_of_an_error_frame_are_found() {
        for frame in [
            &b"data:{\"error\":{}}\n\n"[..],
            b"data:  { \"error\" : {}}\n\n",
            b"data: {\"error\":\"x\"}\r\n\r\n",
        ] {
            let whole = [CONTENT, frame, DONE].concat();
            assert_eq!(run(&[&whole]), (CONTENT.to_vec(), true), "{frame:?}");
        }
    }

    #[test]
    fn held_bytes_are_bounded_and_released_at_the_end() {
        // An undecided line start at the very end is released by finish.
        let (passed, found) = run(&[CONTENT, b"data: {"]);
        assert!(!found);
        assert_eq!(passed, [CONTENT, b"data: {"].concat());
        // A long run of spaces after `data:` is not held forever.
        let mut long = b"data:".to_vec();
        long.extend(std::iter::repeat_n(b' ', 200));
        let mut cut = ErrorFrameCut::default();
        assert_eq!(
            cut.push(Bytes::from(long.clone())),
            Cut::Pass(Bytes::from(long))
        );
    }
}
