//! The bus wire: length-prefixed frames between a tool and the bus, and between two tools
//! moving a value by reference (seed 003 "The protocol": REG, PUT, GET, ACK, FIN, END, plus the
//! ToolBus message kinds). Documented byte by byte in `docs/WIRE.md` ("Bus frames") and pinned
//! by the hex vectors of `testdata/vectors/bus/`.
//!
//! ```text
//!  0               4       5
//! +---------------+-------+---------------------------+
//! |  LEN (u32 BE) | KIND  |  body (LEN - 1 bytes)     |
//! +---------------+-------+---------------------------+
//! ```
//!
//! Integers are big endian; `str` is a u16 length then UTF-8; `term` is a u32 length then a
//! term stream of [`crate::saf`] (magic included); `bytes` runs to the end of the frame.
//!
//! | kind | name | direction | body |
//! | --- | --- | --- | --- |
//! | 0x01 | HELLO | tool → bus | u16 version, str name, str location ("" = passive), str token |
//! | 0x02 | REG | bus → tool | u16 version, u64 tool id, u32 lease ms, u32 inline threshold |
//! | 0x10 | EVAL | bus → tool | u64 request, u64 delivery, term |
//! | 0x11 | VALUE | tool → bus | u64 request, term |
//! | 0x12 | DO | bus → tool | u64 delivery, term |
//! | 0x13 | EVENT | tool → bus | u64 event, term |
//! | 0x14 | ACK_EVENT | bus → tool | u64 event, u64 delivery, term |
//! | 0x15 | TERMINATE | bus → tool | term |
//! | 0x16 | NOTE | tool → bus | term |
//! | 0x20 | GET | consumer → owner | u64 delivery, u64 var, u64 offset, u32 window |
//! | 0x21 | PUT | owner → consumer | u64 var, u64 offset, u64 total, bytes |
//! | 0x22 | CREDIT | consumer → owner | u64 var, u32 bytes |
//! | 0x23 | ACK | tool → bus | u64 delivery |
//! | 0x24 | FIN | bus → owner | u64 var |
//! | 0x25 | END | either | str reason |
//! | 0x26 | FAIL | bus/owner → consumer | u64 delivery, u8 code, str detail |
//! | 0x27 | PING | either | u64 nonce |
//!
//! A delivery number (non-zero) marks a frame whose term holds references: the bus keeps each
//! reference counted until the receiver ACKs that delivery (seed 003: +1 per transfer in flight
//! until its acknowledgement). A consumer fetches a reference's value from its owner with GET,
//! and the owner streams it in PUT chunks, never more than the window the consumer granted
//! (GET's window, then CREDIT frames): flow control that does not depend on the transport.
//!
//! Unknown kinds decode as [`Frame::Unknown`] (counted and ignored by the bus), never an error.

use std::fmt;

use serde_json::{json, Value};
use thiserror::Error;

use crate::saf;
use crate::term::{Arena, Term};

/// The kind byte of a PUT frame (readers that take a chunk's bytes straight off the socket).
pub const KIND_PUT: u8 = 0x21;

/// The wire version this module speaks (HELLO and REG carry it).
pub const VERSION: u16 = 1;
/// Bytes before a frame's kind: the length field.
pub const LEN_FIELD: usize = 4;
/// Default largest frame (LEN) a peer accepts: 16 MiB; larger values go by reference.
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

/// Why bytes are not a frame. Each variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// LEN is zero (no kind byte).
    #[error("empty frame (LEN 0)")]
    Empty,
    /// LEN exceeds the configured limit.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// LEN as read.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The body ends before a field.
    #[error("{kind}: truncated body, {field} missing")]
    Truncated {
        /// Frame kind name.
        kind: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// Bytes left after the last field.
    #[error("{kind}: {extra} bytes after the last field")]
    Trailing {
        /// Frame kind name.
        kind: &'static str,
        /// How many.
        extra: usize,
    },
    /// A string field that is not UTF-8.
    #[error("{kind}: field {field} is not UTF-8")]
    Utf8 {
        /// Frame kind name.
        kind: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A term field that is not a term stream.
    #[error("{kind}: invalid term: {err}")]
    Term {
        /// Frame kind name.
        kind: &'static str,
        /// The term decoder's error.
        err: saf::SafError,
    },
}

/// Why a FAIL was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailCode {
    /// The owner stopped answering and lost its references (lease expired) or left.
    OwnerLost,
    /// The request was refused (not granted, over a limit).
    Refused,
    /// The owner does not hold that variable (any more).
    UnknownVar,
    /// A code this version does not know.
    Unknown(u8),
}

impl FailCode {
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            FailCode::OwnerLost => 1,
            FailCode::Refused => 2,
            FailCode::UnknownVar => 3,
            FailCode::Unknown(n) => n,
        }
    }
    /// From the wire value.
    pub fn from_u8(n: u8) -> FailCode {
        match n {
            1 => FailCode::OwnerLost,
            2 => FailCode::Refused,
            3 => FailCode::UnknownVar,
            n => FailCode::Unknown(n),
        }
    }
}

/// A parsed frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// The tool's handshake.
    Hello {
        /// Wire version the tool speaks.
        version: u16,
        /// The tool's name (its type in the script).
        name: String,
        /// Where other tools fetch its values ("" when it cannot accept connections).
        location: String,
        /// Its credential ("" when none).
        token: String,
    },
    /// The bus's answer: the tool's identity (seed 003 REG).
    Reg {
        /// Wire version the bus speaks.
        version: u16,
        /// The tool's id.
        tool: u64,
        /// The lease: silent longer than this, the tool loses its references.
        lease_ms: u32,
        /// Values whose encoding exceeds this go by reference.
        threshold: u32,
    },
    /// Evaluate a term and answer with VALUE.
    Eval {
        /// Request number, echoed by VALUE.
        request: u64,
        /// Delivery to ACK once its references are fetched (0: none).
        delivery: u64,
        /// The term.
        term: Term,
    },
    /// The answer to EVAL.
    Value {
        /// The EVAL's request number.
        request: u64,
        /// The value.
        term: Term,
    },
    /// Do something (no answer).
    Do {
        /// Delivery to ACK (0: none).
        delivery: u64,
        /// The term.
        term: Term,
    },
    /// An event from the tool; the script answers with ACK_EVENT.
    Event {
        /// Event number, echoed by ACK_EVENT.
        event: u64,
        /// The event.
        term: Term,
    },
    /// The script's acknowledgement of an event.
    AckEvent {
        /// The event's number.
        event: u64,
        /// Delivery to ACK (0: none).
        delivery: u64,
        /// The acknowledgement's term.
        term: Term,
    },
    /// The script ends the tool.
    Terminate {
        /// Why.
        term: Term,
    },
    /// A note the tool publishes to the script's subscribers.
    Note {
        /// The note.
        term: Term,
    },
    /// Ask an owner for a value (seed 003 GET).
    Get {
        /// The delivery that granted the reference.
        delivery: u64,
        /// The owner's variable id.
        var: u64,
        /// First byte wanted.
        offset: u64,
        /// Bytes the consumer can take before it sends CREDIT.
        window: u32,
    },
    /// A chunk of a value's term stream (seed 003 PUT).
    Put {
        /// The owner's variable id.
        var: u64,
        /// Offset of this chunk in the stream.
        offset: u64,
        /// Length of the whole stream.
        total: u64,
        /// The chunk.
        data: Vec<u8>,
    },
    /// More window for a value being fetched.
    Credit {
        /// The variable.
        var: u64,
        /// Additional bytes.
        bytes: u32,
    },
    /// The receiver has every reference of a delivery (seed 003 ACK).
    Ack {
        /// The delivery.
        delivery: u64,
    },
    /// The owner may free a value: no reference to it remains (seed 003 FIN).
    Fin {
        /// The variable.
        var: u64,
    },
    /// Close the connection (seed 003 END).
    End {
        /// Why.
        reason: String,
    },
    /// A transfer failed.
    Fail {
        /// The delivery concerned (or the variable, from an owner).
        delivery: u64,
        /// Why.
        code: FailCode,
        /// Details for a human.
        detail: String,
    },
    /// Keeps a lease alive.
    Ping {
        /// Any number.
        nonce: u64,
    },
    /// A kind this version does not know.
    Unknown {
        /// The kind byte.
        kind: u8,
        /// The body.
        body: Vec<u8>,
    },
}

/// The length of the first frame in `buf`: `Ok(None)` when fewer than [`LEN_FIELD`] bytes are
/// there, else the whole frame's size (length field included), checked against `max`.
///
/// # Errors
/// [`WireError::Empty`] or [`WireError::TooLarge`].
pub fn frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, WireError> {
    let Some(head) = buf.get(..LEN_FIELD) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 {
        return Err(WireError::Empty);
    }
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    Ok(Some(LEN_FIELD + len))
}

struct Body<'a> {
    kind: &'static str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(WireError::Truncated {
                kind: self.kind,
                field,
            });
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        let b = self.take(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn str(&mut self, field: &'static str) -> Result<String, WireError> {
        let n = self.u16(field)? as usize;
        let b = self.take(n, field)?;
        String::from_utf8(b.to_vec()).map_err(|_| WireError::Utf8 {
            kind: self.kind,
            field,
        })
    }
    fn term(&mut self, arena: &mut Arena) -> Result<Term, WireError> {
        let n = self.u32("term")? as usize;
        let b = self.take(n, "term")?;
        saf::decode(arena, b).map_err(|err| WireError::Term {
            kind: self.kind,
            err,
        })
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
    fn end(self) -> Result<(), WireError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(WireError::Trailing {
                kind: self.kind,
                extra: self.buf.len() - self.pos,
            })
        }
    }
}

fn kind_name(kind: u8) -> &'static str {
    match kind {
        0x01 => "HELLO",
        0x02 => "REG",
        0x10 => "EVAL",
        0x11 => "VALUE",
        0x12 => "DO",
        0x13 => "EVENT",
        0x14 => "ACK_EVENT",
        0x15 => "TERMINATE",
        0x16 => "NOTE",
        0x20 => "GET",
        0x21 => "PUT",
        0x22 => "CREDIT",
        0x23 => "ACK",
        0x24 => "FIN",
        0x25 => "END",
        0x26 => "FAIL",
        0x27 => "PING",
        _ => "UNKNOWN",
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Strings are bounded by u16; a longer one is cut at a char boundary (names, tokens,
    // reasons are short by construction).
    let mut n = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&(n as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..n]);
}

fn put_term(out: &mut Vec<u8>, t: &Term) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&saf::MAGIC);
    saf::encode_into(t, out);
    let n = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

impl Frame {
    /// The frame's kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            Frame::Hello { .. } => 0x01,
            Frame::Reg { .. } => 0x02,
            Frame::Eval { .. } => 0x10,
            Frame::Value { .. } => 0x11,
            Frame::Do { .. } => 0x12,
            Frame::Event { .. } => 0x13,
            Frame::AckEvent { .. } => 0x14,
            Frame::Terminate { .. } => 0x15,
            Frame::Note { .. } => 0x16,
            Frame::Get { .. } => 0x20,
            Frame::Put { .. } => 0x21,
            Frame::Credit { .. } => 0x22,
            Frame::Ack { .. } => 0x23,
            Frame::Fin { .. } => 0x24,
            Frame::End { .. } => 0x25,
            Frame::Fail { .. } => 0x26,
            Frame::Ping { .. } => 0x27,
            Frame::Unknown { kind, .. } => *kind,
        }
    }

    /// The kind's name ("EVAL", …).
    pub fn name(&self) -> &'static str {
        kind_name(self.kind())
    }

    /// Parses one whole frame (`buf` is exactly the frame, length field included).
    ///
    /// # Errors
    /// [`WireError`] naming the field that is wrong.
    pub fn parse(arena: &mut Arena, buf: &[u8], max: usize) -> Result<Frame, WireError> {
        let Some(total) = frame_len(buf, max)? else {
            return Err(WireError::Truncated {
                kind: "frame",
                field: "LEN",
            });
        };
        if total != buf.len() {
            return if total > buf.len() {
                Err(WireError::Truncated {
                    kind: "frame",
                    field: "body",
                })
            } else {
                Err(WireError::Trailing {
                    kind: "frame",
                    extra: buf.len() - total,
                })
            };
        }
        let kind = buf[LEN_FIELD];
        let mut b = Body {
            kind: kind_name(kind),
            buf: &buf[LEN_FIELD + 1..],
            pos: 0,
        };
        let f = match kind {
            0x01 => Frame::Hello {
                version: b.u16("version")?,
                name: b.str("name")?,
                location: b.str("location")?,
                token: b.str("token")?,
            },
            0x02 => Frame::Reg {
                version: b.u16("version")?,
                tool: b.u64("tool")?,
                lease_ms: b.u32("lease_ms")?,
                threshold: b.u32("threshold")?,
            },
            0x10 => Frame::Eval {
                request: b.u64("request")?,
                delivery: b.u64("delivery")?,
                term: b.term(arena)?,
            },
            0x11 => Frame::Value {
                request: b.u64("request")?,
                term: b.term(arena)?,
            },
            0x12 => Frame::Do {
                delivery: b.u64("delivery")?,
                term: b.term(arena)?,
            },
            0x13 => Frame::Event {
                event: b.u64("event")?,
                term: b.term(arena)?,
            },
            0x14 => Frame::AckEvent {
                event: b.u64("event")?,
                delivery: b.u64("delivery")?,
                term: b.term(arena)?,
            },
            0x15 => Frame::Terminate {
                term: b.term(arena)?,
            },
            0x16 => Frame::Note {
                term: b.term(arena)?,
            },
            0x20 => Frame::Get {
                delivery: b.u64("delivery")?,
                var: b.u64("var")?,
                offset: b.u64("offset")?,
                window: b.u32("window")?,
            },
            0x21 => Frame::Put {
                var: b.u64("var")?,
                offset: b.u64("offset")?,
                total: b.u64("total")?,
                data: b.rest().to_vec(),
            },
            0x22 => Frame::Credit {
                var: b.u64("var")?,
                bytes: b.u32("bytes")?,
            },
            0x23 => Frame::Ack {
                delivery: b.u64("delivery")?,
            },
            0x24 => Frame::Fin { var: b.u64("var")? },
            0x25 => Frame::End {
                reason: b.str("reason")?,
            },
            0x26 => Frame::Fail {
                delivery: b.u64("delivery")?,
                code: FailCode::from_u8(b.u8("code")?),
                detail: b.str("detail")?,
            },
            0x27 => Frame::Ping {
                nonce: b.u64("nonce")?,
            },
            kind => Frame::Unknown {
                kind,
                body: b.rest().to_vec(),
            },
        };
        b.end()?;
        Ok(f)
    }

    /// Appends the frame's bytes to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        out.push(self.kind());
        match self {
            Frame::Hello {
                version,
                name,
                location,
                token,
            } => {
                out.extend_from_slice(&version.to_be_bytes());
                put_str(out, name);
                put_str(out, location);
                put_str(out, token);
            }
            Frame::Reg {
                version,
                tool,
                lease_ms,
                threshold,
            } => {
                out.extend_from_slice(&version.to_be_bytes());
                out.extend_from_slice(&tool.to_be_bytes());
                out.extend_from_slice(&lease_ms.to_be_bytes());
                out.extend_from_slice(&threshold.to_be_bytes());
            }
            Frame::Eval {
                request,
                delivery,
                term,
            } => {
                out.extend_from_slice(&request.to_be_bytes());
                out.extend_from_slice(&delivery.to_be_bytes());
                put_term(out, term);
            }
            Frame::Value { request, term } => {
                out.extend_from_slice(&request.to_be_bytes());
                put_term(out, term);
            }
            Frame::Do { delivery, term } => {
                out.extend_from_slice(&delivery.to_be_bytes());
                put_term(out, term);
            }
            Frame::Event { event, term } => {
                out.extend_from_slice(&event.to_be_bytes());
                put_term(out, term);
            }
            Frame::AckEvent {
                event,
                delivery,
                term,
            } => {
                out.extend_from_slice(&event.to_be_bytes());
                out.extend_from_slice(&delivery.to_be_bytes());
                put_term(out, term);
            }
            Frame::Terminate { term } | Frame::Note { term } => put_term(out, term),
            Frame::Get {
                delivery,
                var,
                offset,
                window,
            } => {
                out.extend_from_slice(&delivery.to_be_bytes());
                out.extend_from_slice(&var.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&window.to_be_bytes());
            }
            Frame::Put {
                var,
                offset,
                total,
                data,
            } => {
                out.extend_from_slice(&var.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&total.to_be_bytes());
                out.extend_from_slice(data);
            }
            Frame::Credit { var, bytes } => {
                out.extend_from_slice(&var.to_be_bytes());
                out.extend_from_slice(&bytes.to_be_bytes());
            }
            Frame::Ack { delivery } => out.extend_from_slice(&delivery.to_be_bytes()),
            Frame::Fin { var } => out.extend_from_slice(&var.to_be_bytes()),
            Frame::End { reason } => put_str(out, reason),
            Frame::Fail {
                delivery,
                code,
                detail,
            } => {
                out.extend_from_slice(&delivery.to_be_bytes());
                out.push(code.to_u8());
                put_str(out, detail);
            }
            Frame::Ping { nonce } => out.extend_from_slice(&nonce.to_be_bytes()),
            Frame::Unknown { body, .. } => out.extend_from_slice(body),
        }
        let len = (out.len() - start - LEN_FIELD) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.emit(&mut v);
        v
    }

    /// The frame's fields as JSON (terms as text), the form of the shared vectors.
    pub fn fields(&self) -> Value {
        let mut v = match self {
            Frame::Hello {
                version,
                name,
                location,
                token,
            } => json!({"version": version, "name": name, "location": location, "token": token}),
            Frame::Reg {
                version,
                tool,
                lease_ms,
                threshold,
            } => {
                json!({"version": version, "tool": tool, "lease_ms": lease_ms, "threshold": threshold})
            }
            Frame::Eval {
                request,
                delivery,
                term,
            } => json!({"request": request, "delivery": delivery, "term": term.to_string()}),
            Frame::Value { request, term } => {
                json!({"request": request, "term": term.to_string()})
            }
            Frame::Do { delivery, term } => {
                json!({"delivery": delivery, "term": term.to_string()})
            }
            Frame::Event { event, term } => json!({"event": event, "term": term.to_string()}),
            Frame::AckEvent {
                event,
                delivery,
                term,
            } => json!({"event": event, "delivery": delivery, "term": term.to_string()}),
            Frame::Terminate { term } | Frame::Note { term } => {
                json!({"term": term.to_string()})
            }
            Frame::Get {
                delivery,
                var,
                offset,
                window,
            } => json!({"delivery": delivery, "var": var, "offset": offset, "window": window}),
            Frame::Put {
                var,
                offset,
                total,
                data,
            } => json!({"var": var, "offset": offset, "total": total, "data_hex": hex(data)}),
            Frame::Credit { var, bytes } => json!({"var": var, "bytes": bytes}),
            Frame::Ack { delivery } => json!({"delivery": delivery}),
            Frame::Fin { var } => json!({"var": var}),
            Frame::End { reason } => json!({"reason": reason}),
            Frame::Fail {
                delivery,
                code,
                detail,
            } => json!({"delivery": delivery, "code": code.to_u8(), "detail": detail}),
            Frame::Ping { nonce } => json!({"nonce": nonce}),
            Frame::Unknown { kind, body } => json!({"kind_byte": kind, "body_hex": hex(body)}),
        };
        if let Some(o) = v.as_object_mut() {
            o.insert("kind".into(), json!(self.name()));
        }
        v
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fields())
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let mut a = Arena::new();
        let t = a.parse(r#"f(1,"x",[2])"#).unwrap();
        let frames = vec![
            Frame::Hello {
                version: VERSION,
                name: "t".into(),
                location: "127.0.0.1:9".into(),
                token: String::new(),
            },
            Frame::Eval {
                request: 1,
                delivery: 2,
                term: t.clone(),
            },
            Frame::Put {
                var: 1,
                offset: 0,
                total: 3,
                data: vec![1, 2, 3],
            },
            Frame::Fail {
                delivery: 4,
                code: FailCode::OwnerLost,
                detail: "lease".into(),
            },
            Frame::Unknown {
                kind: 0x7f,
                body: vec![9],
            },
        ];
        for f in frames {
            let bytes = f.to_bytes();
            assert_eq!(Frame::parse(&mut a, &bytes, DEFAULT_MAX_FRAME).unwrap(), f);
        }
    }

    #[test]
    fn limits_and_truncation_are_typed() {
        let mut a = Arena::new();
        assert_eq!(frame_len(&[0, 0, 0], 10), Ok(None));
        assert_eq!(frame_len(&[0, 0, 0, 0], 10), Err(WireError::Empty));
        assert_eq!(
            frame_len(&[0, 0, 1, 0], 10),
            Err(WireError::TooLarge { len: 256, max: 10 })
        );
        let short = [0, 0, 0, 3, 0x23, 0, 0];
        assert!(matches!(
            Frame::parse(&mut a, &short, 100),
            Err(WireError::Truncated { kind: "ACK", .. })
        ));
    }
}
