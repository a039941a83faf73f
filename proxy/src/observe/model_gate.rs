//! The last line of defence against an answer from the wrong model.
//!
//! The lease names the backend instance a request may be sent to, and the
//! supervisor never replaces a backend while a lease on it exists; that is
//! what keeps a request on its model. This gate checks the outcome anyway:
//! before the first byte of a response reaches the client, it reads the
//! `model` of the first SSE `data:` payload (or of a non-stream JSON body)
//! and compares it with the names the leased model answers with. A
//! mismatch stops the response before anything of it is forwarded.
//!
//! Bytes are held only until the decision: SSE comments and blank lines
//! before the first frame pass at once; the first frame, or the start of a
//! JSON body, waits until its `model` member is complete. A payload without
//! a `model` (an error object, a `[DONE]`) cannot be checked and passes, and
//! so does anything still undecided after [`MAX_INSPECT_BYTES`]. The gate is
//! pure: no I/O, no clock, no logging.

use bytes::{Bytes, BytesMut};

use super::{BodyKind, MAX_INSPECT_BYTES};

/// The backend answered as a model other than the leased one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMismatch;

/// Holds back the start of a response until its `model` is known.
#[derive(Debug)]
pub struct ModelGate {
    kind: BodyKind,
    /// The leased model's `upstream_model`.
    upstream: String,
    /// The request's own `model`, when the profile lists it among Strata's
    /// aliases (Strata then answers with that name instead).
    alias: Option<String>,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Nothing decided yet; `held` is everything received so far.
    Deciding { held: BytesMut },
    /// Checked (or uncheckable): everything passes.
    Open,
}

/// What one look at the held bytes found.
#[derive(Debug, PartialEq)]
enum Decision {
    /// More bytes are needed; the first `releasable` bytes may go already.
    Wait { releasable: usize },
    /// The response's model, decoded.
    Model(String),
    /// No model to check.
    Unchecked,
}

impl ModelGate {
    /// A gate for a response of `kind` to a request for the model whose
    /// backend reports `upstream`. `alias` is the request's `model` if the
    /// profile names it among its aliases.
    pub fn new(kind: BodyKind, upstream: &str, alias: Option<&str>) -> ModelGate {
        let state = match kind {
            BodyKind::Sse | BodyKind::Json => State::Deciding {
                held: BytesMut::new(),
            },
            BodyKind::Other => State::Open,
        };
        ModelGate {
            kind,
            upstream: upstream.to_owned(),
            alias: alias.map(str::to_owned),
            state,
        }
    }

    /// A gate that lets everything through (nothing to compare with).
    pub fn open() -> ModelGate {
        ModelGate::new(BodyKind::Other, "", None)
    }

    /// Takes the next chunk of the response; returns what may be forwarded
    /// now (possibly nothing yet), or the mismatch.
    pub fn push(&mut self, chunk: Bytes) -> Result<Option<Bytes>, ModelMismatch> {
        let State::Deciding { held } = &mut self.state else {
            return Ok(Some(chunk));
        };
        if held.is_empty() {
            // The usual case: the chunk decides on its own, no copy needed.
            match decide(self.kind, &chunk, false) {
                Decision::Wait { .. } => {}
                Decision::Model(model) => {
                    self.check(&model)?;
                    self.state = State::Open;
                    return Ok(Some(chunk));
                }
                Decision::Unchecked => {
                    self.state = State::Open;
                    return Ok(Some(chunk));
                }
            }
        }
        held.extend_from_slice(&chunk);
        self.step(false)
    }

    /// The response ended: decides on whatever is held and returns it.
    pub fn finish(&mut self) -> Result<Option<Bytes>, ModelMismatch> {
        self.step(true)
    }

    fn step(&mut self, complete: bool) -> Result<Option<Bytes>, ModelMismatch> {
        let State::Deciding { held } = &mut self.state else {
            return Ok(None);
        };
        let decision = if held.len() > MAX_INSPECT_BYTES {
            Decision::Unchecked
        } else {
            decide(self.kind, held, complete)
        };
        let releasable = match decision {
            Decision::Wait { releasable } => releasable,
            Decision::Model(model) => {
                self.check(&model)?;
                usize::MAX
            }
            Decision::Unchecked => usize::MAX,
        };
        let State::Deciding { held } = &mut self.state else {
            unreachable!("still deciding")
        };
        let out = if releasable == usize::MAX {
            let all = std::mem::take(held).freeze();
            self.state = State::Open;
            all
        } else {
            held.split_to(releasable).freeze()
        };
        Ok((!out.is_empty()).then_some(out))
    }

    fn check(&self, model: &str) -> Result<(), ModelMismatch> {
        if model == self.upstream || self.alias.as_deref() == Some(model) {
            Ok(())
        } else {
            Err(ModelMismatch)
        }
    }
}

fn decide(kind: BodyKind, held: &[u8], complete: bool) -> Decision {
    match kind {
        BodyKind::Sse => decide_sse(held, complete),
        BodyKind::Json => match top_level_model(held, complete) {
            Scan::Found(model) => Decision::Model(model),
            Scan::Absent => Decision::Unchecked,
            Scan::NeedMore => Decision::Wait { releasable: 0 },
        },
        BodyKind::Other => Decision::Unchecked,
    }
}

/// Finds the first `data:` line. Comment and blank lines before it (and
/// before any other field line) may pass at once.
fn decide_sse(held: &[u8], complete: bool) -> Decision {
    let mut releasable = 0;
    let mut only_comments = true;
    let mut rest = held;
    let mut offset = 0;
    loop {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => (&rest[..end], Some(end + 1)),
            None if complete && !rest.is_empty() => (rest, None),
            None => return Decision::Wait { releasable },
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(payload) = line.strip_prefix(b"data:") {
            let payload = payload.strip_prefix(b" ").unwrap_or(payload);
            if payload == b"[DONE]" {
                return Decision::Unchecked;
            }
            return match top_level_model(payload, true) {
                Scan::Found(model) => Decision::Model(model),
                Scan::Absent | Scan::NeedMore => Decision::Unchecked,
            };
        }
        let is_comment = line.is_empty() || line.starts_with(b":");
        only_comments &= is_comment;
        let Some(next) = next else {
            return Decision::Unchecked;
        };
        offset += next;
        rest = &rest[next..];
        if only_comments {
            releasable = offset;
        }
    }
}

/// What a scan of a JSON text's top-level members found.
#[derive(Debug, PartialEq)]
enum Scan {
    /// A top-level `model` with a string value.
    Found(String),
    /// None: not an object, no `model`, `model` not a string, or malformed.
    Absent,
    /// The text ends before the answer is known.
    NeedMore,
}

/// The first top-level `model` member of the JSON object that `text`
/// starts with. With `complete`, running out of text means it is absent.
fn top_level_model(text: &[u8], complete: bool) -> Scan {
    let more = if complete {
        Scan::Absent
    } else {
        Scan::NeedMore
    };
    let mut i = skip_ws(text, 0);
    match text.get(i) {
        Some(b'{') => i += 1,
        Some(_) => return Scan::Absent,
        None => return more,
    }
    loop {
        i = skip_ws(text, i);
        match text.get(i) {
            Some(b'"') => {}
            Some(_) => return Scan::Absent,
            None => return more,
        }
        let Some(key_end) = string_end(text, i) else {
            return more;
        };
        let key = &text[i..key_end];
        i = skip_ws(text, key_end);
        match text.get(i) {
            Some(b':') => i = skip_ws(text, i + 1),
            Some(_) => return Scan::Absent,
            None => return more,
        }
        if decode_string(key).as_deref() == Some("model") {
            return match text.get(i) {
                Some(b'"') => match string_end(text, i) {
                    Some(end) => decode_string(&text[i..end]).map_or(Scan::Absent, Scan::Found),
                    None => more,
                },
                Some(_) => Scan::Absent,
                None => more,
            };
        }
        let Some(value_end) = value_end(text, i) else {
            return more;
        };
        i = skip_ws(text, value_end);
        match text.get(i) {
            Some(b',') => i += 1,
            Some(_) => return Scan::Absent,
            None => return more,
        }
    }
}

fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while matches!(text.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The index just past the string token that starts (with `"`) at `start`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The index just past the value that starts at `start`; `None` if the text
/// ends inside it (or a literal could still go on).
fn value_end(text: &[u8], start: usize) -> Option<usize> {
    match text.get(start)? {
        b'"' => string_end(text, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < text.len() {
                match text[i] {
                    b'"' => {
                        i = string_end(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let length = text[start..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))?;
            Some(start + length)
        }
    }
}

/// A JSON string token (quotes included) as text.
fn decode_string(token: &[u8]) -> Option<String> {
    if !token.contains(&b'\\') {
        let inner = token.get(1..token.len().checked_sub(1)?)?;
        return std::str::from_utf8(inner).ok().map(str::to_owned);
    }
    serde_json::from_slice(token).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(kind: BodyKind) -> ModelGate {
        ModelGate::new(kind, "up-m1", Some("family-alias"))
    }

    /// Feeds `text` in pieces of `split` bytes; returns what passed and
    /// whether a mismatch stopped it.
    fn run(kind: BodyKind, text: &[u8], split: usize) -> (Vec<u8>, bool) {
        let mut gate = gate(kind);
        let mut out = Vec::new();
        for piece in text.chunks(split.max(1)) {
            match gate.push(Bytes::copy_from_slice(piece)) {
                Ok(Some(bytes)) => out.extend_from_slice(&bytes),
                Ok(None) => {}
                Err(ModelMismatch) => return (out, true),
            }
        }
        match gate.finish() {
            Ok(Some(bytes)) => out.extend_from_slice(&bytes),
            Ok(None) => {}
            Err(ModelMismatch) => return (out, true),
        }
        (out, false)
    }

    const SSE_OK: &[u8] = b": keep-alive\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"up-m1\",\"choices\":[]}\n\ndata: {\"model\":\"other\"}\n\ndata: [DONE]\n\n";
    const SSE_WRONG: &[u8] = b": keep-alive\n\ndata: {\"id\":\"c\",\"choices\":[{\"delta\":{\"role\":\"assistant\"}}],\"model\":\"up-m2\"}\n\ndata: [DONE]\n\n";

    #[test]
    fn a_stream_from_the_leased_model_passes_whole_at_every_split() {
        for split in 1..SSE_OK.len() {
            let (out, stopped) = run(BodyKind::Sse, SSE_OK, split);
            assert!(!stopped, "split {split}");
            assert_eq!(out, SSE_OK, "split {split}");
        }
    }

    #[test]
    fn a_stream_from_another_model_is_stopped_before_its_first_frame() {
        for split in 1..SSE_WRONG.len() {
            let (out, stopped) = run(BodyKind::Sse, SSE_WRONG, split);
            assert!(stopped, "split {split}");
            // At most the comment before the frame passed (when it came in a chunk of its own).
            assert!(
                out.is_empty() || out == b": keep-alive\n\n",
                "split {split}: {out:?}"
            );
        }
    }

    #[test]
    fn comments_before_the_first_frame_pass_at_once() {
        let mut gate = gate(BodyKind::Sse);
        let first = gate.push(Bytes::from_static(
            b": keep-alive\n\n: keep-alive\n\ndata: {\"mo",
        ));
        assert_eq!(
            first,
            Ok(Some(Bytes::from_static(
                b": keep-alive\n\n: keep-alive\n\n"
            )))
        );
        let rest = gate.push(Bytes::from_static(b"del\":\"up-m1\"}\n\n"));
        assert_eq!(
            rest,
            Ok(Some(Bytes::from_static(b"data: {\"model\":\"up-m1\"}\n\n")))
        );
        // Open from here on: chunks pass as they are.
        let later = Bytes::from_static(b"data: {\"model\":\"anything\"}\n\n");
        assert_eq!(gate.push(later.clone()), Ok(Some(later)));
    }

    #[test]
    fn an_event_line_is_held_with_its_data_line() {
        let mut gate = gate(BodyKind::Sse);
        assert_eq!(gate.push(Bytes::from_static(b"event: error\n")), Ok(None));
        let done = gate.push(Bytes::from_static(
            b"data: {\"error\":{\"message\":\"x\"}}\n\n",
        ));
        assert_eq!(
            done,
            Ok(Some(Bytes::from_static(
                b"event: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n"
            )))
        );
    }

    #[test]
    fn the_alias_strata_echoes_is_accepted() {
        let text = b"data: {\"model\":\"family-alias\"}\n\n";
        assert_eq!(run(BodyKind::Sse, text, 7), (text.to_vec(), false));
        let gate_without_alias = &mut ModelGate::new(BodyKind::Sse, "up-m1", None);
        assert_eq!(
            gate_without_alias.push(Bytes::from_static(text)),
            Err(ModelMismatch)
        );
    }

    #[test]
    fn json_bodies_are_checked_at_every_split() {
        let ok = br#"{"id":"c","object":"chat.completion","created":1,"model":"up-m1","choices":[{"message":{"content":"{\"model\":\"x\"}"}}]}"#;
        let wrong = br#" { "id" : "c", "nested": {"model":"up-m1"}, "list":[1,{"a":"]"}], "n": -1.5e3, "t": true, "model" : "up-m2" }"#;
        for split in 1..wrong.len() {
            assert_eq!(
                run(BodyKind::Json, ok, split),
                (ok.to_vec(), false),
                "{split}"
            );
            let (out, stopped) = run(BodyKind::Json, wrong, split);
            assert!(stopped && out.is_empty(), "split {split}");
        }
    }

    #[test]
    fn bodies_without_a_model_pass_unchecked() {
        let cases: [&[u8]; 6] = [
            br#"{"error":{"type":"server_error","message":"engine died"}}"#,
            br#"{"model":5,"x":1}"#,
            b"[1,2,3]",
            b"not json at all",
            b"",
            br#"{"id":"truncated","mod"#,
        ];
        for text in cases {
            assert_eq!(
                run(BodyKind::Json, text, 3),
                (text.to_vec(), false),
                "{text:?}"
            );
        }
        let sse: [&[u8]; 3] = [
            b"data: [DONE]\n\n",
            b"data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n",
            b"data: not json\n\n",
        ];
        for text in sse {
            assert_eq!(
                run(BodyKind::Sse, text, 4),
                (text.to_vec(), false),
                "{text:?}"
            );
        }
    }

    #[test]
    fn escaped_keys_and_values_are_decoded() {
        let text = br#"{"mod\u0065l":"up-\u006d1"}"#;
        assert_eq!(run(BodyKind::Json, text, 2), (text.to_vec(), false));
        let wrong = br#"{"mod\u0065l":"up-\u006d2"}"#;
        assert!(run(BodyKind::Json, wrong, 2).1);
    }

    #[test]
    fn an_undecided_prefix_is_released_past_the_inspection_limit() {
        let mut text = b"{\"pad\":\"".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_INSPECT_BYTES + 10));
        text.extend_from_slice(b"\",\"model\":\"up-m2\"}");
        let (out, stopped) = run(BodyKind::Json, &text, 64 * 1024);
        assert!(!stopped);
        assert_eq!(out, text);
    }

    #[test]
    fn other_bodies_are_never_held() {
        let mut gate = ModelGate::new(BodyKind::Other, "up-m1", None);
        let chunk = Bytes::from_static(b"{\"model\":\"up-m2\"}");
        assert_eq!(gate.push(chunk.clone()), Ok(Some(chunk)));
        assert_eq!(ModelGate::open().push(Bytes::new()), Ok(Some(Bytes::new())));
    }
}
