//! The binary term format: streamable and sharing-preserving, in the spirit of the ATerm SAF
//! format (seed 003 appendix B: a flag per term says whether a term or a "pointer" to an earlier
//! shared term follows). Defined byte by byte in `docs/WIRE.md` ("Bus terms").
//!
//! ```text
//! term-stream = "V" "B" 0x01 node
//! node = 0x01 zigzag-varint                       integer
//!      | 0x02 f64 (8 bytes, big endian)           real
//!      | 0x03 varint-len utf8                     string
//!      | 0x04 varint-len utf8 varint-arity node*  application
//!      | 0x05 varint-n node*                      list
//!      | 0x06 node                                placeholder <node>
//!      | 0x07 varint-len bytes                    blob
//!      | 0x08 varint-n node node*n                annotated term (n >= 1 annotations)
//!      | 0x09 varint-len utf8 u8(result)          variable
//!      | 0x0a varint-index                        back reference to an earlier node
//!      | 0x0b varint owner varint var varint size varint-len utf8 node   reference
//! ```
//!
//! Nodes are numbered from 0 in the order their tag appears (pre-order; back references are not
//! numbered); a node met again is written as a back reference to its number, so the stream is as
//! large as the term's DAG. The writer never looks back and the reader never needs the total
//! length: a stream can be produced and consumed in one pass, chunk by chunk. Varints are LEB128
//! (7 bits per byte, least significant group first, at most 10 bytes).
//!
//! The decoder never panics and never recurses: lengths and counts are checked against the
//! bytes that remain, nesting is bounded by [`crate::term::MAX_DEPTH`], and a back reference
//! must name a node already complete.

use std::collections::HashMap;

use thiserror::Error;

use crate::term::{Arena, Bytes, Kind, Node, RefInfo, Term, MAX_DEPTH};

/// The stream's first three bytes: "VB" and the format version.
pub const MAGIC: [u8; 3] = [0x56, 0x42, 0x01];

/// Why bytes are not a term stream; `at` is the byte offset of the problem.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SafError {
    /// Missing or wrong magic/version.
    #[error("not a term stream (magic VB, version 1 expected)")]
    Magic,
    /// The bytes end inside a node.
    #[error("truncated at byte {at}")]
    Truncated {
        /// Offset.
        at: usize,
    },
    /// A tag that is not one of the node kinds.
    #[error("unknown tag {tag:#04x} at byte {at}")]
    Tag {
        /// The tag.
        tag: u8,
        /// Offset.
        at: usize,
    },
    /// A varint longer than 10 bytes or above 2^64.
    #[error("invalid varint at byte {at}")]
    Varint {
        /// Offset.
        at: usize,
    },
    /// A length or count larger than the bytes left.
    #[error("length {len} at byte {at} exceeds the stream")]
    Length {
        /// The length.
        len: u64,
        /// Offset.
        at: usize,
    },
    /// A string that is not UTF-8.
    #[error("invalid UTF-8 at byte {at}")]
    Utf8 {
        /// Offset.
        at: usize,
    },
    /// A back reference to a node not (yet) complete.
    #[error("back reference to node {index} at byte {at}, not an earlier complete node")]
    BackRef {
        /// The index.
        index: u64,
        /// Offset.
        at: usize,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} at byte {at}")]
    Depth {
        /// Offset.
        at: usize,
    },
    /// An annotation node with no annotations, or a result flag that is not 0 or 1.
    #[error("invalid field at byte {at}")]
    Field {
        /// Offset.
        at: usize,
    },
    /// Bytes after the term.
    #[error("{extra} bytes after the term")]
    Trailing {
        /// How many.
        extra: usize,
    },
}

/// Appends `v` as a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Encodes `t` as a term stream.
pub fn encode(t: &Term) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    encode_into(t, &mut out);
    out
}

/// A piece of a term stream: bytes of its own, or a large blob's bytes as they are.
pub enum Segment {
    /// Encoded bytes.
    Own(Vec<u8>),
    /// A blob's content (at least [`SHARE_MIN`] bytes), not copied.
    Blob(Bytes),
}

/// [`encode`] as a list of segments whose concatenation is the stream, without copying the
/// large blobs (a same-host owner writes them once, straight into its memfd,
/// [`crate::memfd::sealed_segments`]).
pub fn encode_segments(t: &Term) -> Vec<Segment> {
    let mut segs = Vec::new();
    let mut out = MAGIC.to_vec();
    encode_with(t, &mut out, &mut |out, b| {
        if b.len() >= SHARE_MIN {
            segs.push(Segment::Own(std::mem::take(out)));
            segs.push(Segment::Blob(b.clone()));
        } else {
            out.extend_from_slice(b);
        }
    });
    segs.push(Segment::Own(out));
    segs
}

/// Appends the node encoding of `t` (no magic) to `out`.
pub fn encode_into(t: &Term, out: &mut Vec<u8>) {
    encode_with(t, out, &mut |out, b| out.extend_from_slice(b));
}

/// The encoder; `blob` appends a blob's content (after its tag and length).
fn encode_with(t: &Term, out: &mut Vec<u8>, blob: &mut dyn FnMut(&mut Vec<u8>, &Bytes)) {
    let mut index: HashMap<*const Node, u64> = HashMap::new();
    let mut stack: Vec<&Term> = vec![t];
    while let Some(t) = stack.pop() {
        let key = node_ptr(t);
        if let Some(&i) = index.get(&key) {
            out.push(0x0a);
            put_varint(out, i);
            continue;
        }
        let next = index.len() as u64;
        index.insert(key, next);
        match t.kind() {
            Kind::Int(i) => {
                out.push(0x01);
                put_varint(out, ((i << 1) ^ (i >> 63)) as u64);
            }
            Kind::Real(r) => {
                out.push(0x02);
                out.extend_from_slice(&r.to_be_bytes());
            }
            Kind::Str(s) => {
                out.push(0x03);
                put_str(out, s);
            }
            Kind::Appl { fun, args } => {
                out.push(0x04);
                put_str(out, fun);
                put_varint(out, args.len() as u64);
            }
            Kind::List(xs) => {
                out.push(0x05);
                put_varint(out, xs.len() as u64);
            }
            Kind::Placeholder(_) => out.push(0x06),
            Kind::Blob(b) => {
                out.push(0x07);
                put_varint(out, b.len() as u64);
                blob(out, b);
            }
            Kind::Annot { annos, .. } => {
                out.push(0x08);
                put_varint(out, annos.len() as u64);
            }
            Kind::Var { name, result } => {
                out.push(0x09);
                put_str(out, name);
                out.push(u8::from(*result));
            }
            Kind::Ref(r) => {
                out.push(0x0b);
                put_varint(out, r.owner);
                put_varint(out, r.var);
                put_varint(out, r.size);
                put_str(out, &r.location);
            }
        }
        stack.extend(t.children().into_iter().rev());
    }
}

fn node_ptr(t: &Term) -> *const Node {
    t.node_ptr()
}

/// A node whose children are being read.
enum Pending {
    Appl(std::sync::Arc<str>),
    List,
    Placeholder,
    Annot,
    Ref(u64, u64, u64, std::sync::Arc<str>),
}

struct Frame {
    what: Pending,
    index: usize,
    want: usize,
    have: Vec<Term>,
}

/// Cursor over the stream.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, SafError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(SafError::Truncated { at: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, SafError> {
        let at = self.pos;
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Err(SafError::Varint { at });
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(SafError::Varint { at })
    }

    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// A count of items, each at least one byte.
    fn count(&mut self) -> Result<usize, SafError> {
        let at = self.pos;
        let n = self.varint()?;
        if n > self.left() as u64 {
            return Err(SafError::Length { len: n, at });
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&[u8], SafError> {
        let n = self.count()?;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn str(&mut self) -> Result<std::sync::Arc<str>, SafError> {
        let at = self.pos;
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(Into::into)
            .map_err(|_| SafError::Utf8 { at })
    }
}

/// Decodes a whole term stream (magic included) into `arena`.
///
/// # Errors
/// [`SafError`] naming the first offending byte.
pub fn decode(arena: &mut Arena, bytes: &[u8]) -> Result<Term, SafError> {
    decode_in(arena, bytes, None)
}

/// Blobs at least this long are sliced out of a shared stream by [`decode_shared`] rather
/// than copied (smaller ones are copied: they should not keep a large buffer alive).
pub const SHARE_MIN: usize = 64 * 1024;

/// [`decode`] of a stream held in shared bytes (a mapped memfd, [`crate::memfd`]): its large
/// blobs ([`SHARE_MIN`] bytes or more) are slices of `bytes`, not copies — the value a
/// same-host owner handed over is read where it lies.
///
/// # Errors
/// [`SafError`] naming the first offending byte.
pub fn decode_shared(arena: &mut Arena, bytes: &Bytes) -> Result<Term, SafError> {
    decode_in(arena, bytes, Some(bytes))
}

fn decode_in(arena: &mut Arena, bytes: &[u8], shared: Option<&Bytes>) -> Result<Term, SafError> {
    if bytes.get(..3) != Some(&MAGIC[..]) {
        return Err(SafError::Magic);
    }
    let (t, used) = decode_node_in(arena, &bytes[3..], shared.map(|b| (b, 3)))?;
    if used + 3 != bytes.len() {
        return Err(SafError::Trailing {
            extra: bytes.len() - used - 3,
        });
    }
    Ok(t)
}

/// Decodes one node encoding (no magic) from the start of `bytes`; returns the term and the
/// bytes it took. Offsets in errors are relative to `bytes`.
///
/// # Errors
/// [`SafError`] naming the first offending byte.
pub fn decode_node(arena: &mut Arena, bytes: &[u8]) -> Result<(Term, usize), SafError> {
    decode_node_in(arena, bytes, None)
}

/// `shared`: the buffer `bytes` lies in and at which offset, to slice large blobs from.
fn decode_node_in(
    arena: &mut Arena,
    bytes: &[u8],
    shared: Option<(&Bytes, usize)>,
) -> Result<(Term, usize), SafError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let mut table: Vec<Option<Term>> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        let at = r.pos;
        let tag = r.u8()?;
        let mut done: Option<Term> = None;
        let index = table.len();
        match tag {
            0x0a => {
                let i = r.varint()?;
                let t = usize::try_from(i)
                    .ok()
                    .and_then(|i| table.get(i))
                    .and_then(Clone::clone)
                    .ok_or(SafError::BackRef { index: i, at })?;
                done = Some(t);
            }
            0x01 => {
                let z = r.varint()?;
                done = Some(arena.int(((z >> 1) as i64) ^ -((z & 1) as i64)));
            }
            0x02 => {
                let mut b = [0u8; 8];
                for x in &mut b {
                    *x = r.u8()?;
                }
                done = Some(arena.real(f64::from_be_bytes(b)));
            }
            0x03 => {
                let s = r.str()?;
                done = Some(arena.make(Kind::Str(s)));
            }
            0x07 => {
                let n = r.bytes()?.len();
                let end = r.pos;
                let start = end - n;
                let b = &bytes[start..end];
                let sliced = match shared {
                    Some((whole, base)) if b.len() >= SHARE_MIN => {
                        whole.slice(base + start..base + end)
                    }
                    _ => None,
                };
                done = Some(match sliced {
                    Some(s) => arena.blob(s),
                    None => arena.blob(b),
                });
            }
            0x09 => {
                let name = r.str()?;
                let flag_at = r.pos;
                let result = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(SafError::Field { at: flag_at }),
                };
                done = Some(arena.make(Kind::Var { name, result }));
            }
            0x04 | 0x05 | 0x06 | 0x08 | 0x0b => {
                if stack.len() >= MAX_DEPTH {
                    return Err(SafError::Depth { at });
                }
                let (what, want) = match tag {
                    0x04 => {
                        let fun = r.str()?;
                        (Pending::Appl(fun), r.count()?)
                    }
                    0x05 => (Pending::List, r.count()?),
                    0x06 => (Pending::Placeholder, 1),
                    0x08 => {
                        let n = r.count()?;
                        if n == 0 {
                            return Err(SafError::Field { at });
                        }
                        (Pending::Annot, n + 1)
                    }
                    _ => {
                        let owner = r.varint()?;
                        let var = r.varint()?;
                        let size = r.varint()?;
                        let loc = r.str()?;
                        (Pending::Ref(owner, var, size, loc), 1)
                    }
                };
                table.push(None);
                stack.push(Frame {
                    what,
                    index,
                    want,
                    have: Vec::with_capacity(want.min(1024)),
                });
            }
            tag => return Err(SafError::Tag { tag, at }),
        }
        if let Some(t) = &done {
            if tag != 0x0a {
                table.push(Some(t.clone()));
            }
        }
        // Complete every frame whose children are all read.
        loop {
            let top_full = stack.last().is_some_and(|f| f.have.len() == f.want);
            if let Some(t) = done.take() {
                match stack.last_mut() {
                    None => return Ok((t, r.pos)),
                    Some(f) => f.have.push(t),
                }
                continue;
            }
            if !top_full {
                break;
            }
            let Some(f) = stack.pop() else { break };
            let t = build(arena, f.what, f.have);
            if let Some(slot) = table.get_mut(f.index) {
                *slot = Some(t.clone());
            }
            done = Some(t);
        }
    }
}

fn build(arena: &mut Arena, what: Pending, mut have: Vec<Term>) -> Term {
    match what {
        Pending::Appl(fun) => arena.make(Kind::Appl {
            fun,
            args: have.into(),
        }),
        Pending::List => arena.make(Kind::List(have.into())),
        Pending::Placeholder => match have.pop() {
            Some(t) => arena.make(Kind::Placeholder(t)),
            None => arena.list(Vec::new()),
        },
        Pending::Annot => {
            let annos = have.split_off(1.min(have.len()));
            match have.pop() {
                Some(term) => arena.make(Kind::Annot {
                    term,
                    annos: annos.into(),
                }),
                None => arena.list(Vec::new()),
            }
        }
        Pending::Ref(owner, var, size, location) => match have.pop() {
            Some(sig) => arena.reference(RefInfo {
                owner,
                var,
                size,
                location,
                sig,
            }),
            None => arena.list(Vec::new()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_sharing() {
        let mut a = Arena::new();
        let t = a
            .parse(r#"f(g([1,2,3],"abc"), g([1,2,3],"abc"), h(g([1,2,3],"abc")){x})"#)
            .unwrap();
        let bytes = encode(&t);
        let mut b = Arena::new();
        let u = decode(&mut b, &bytes).unwrap();
        assert_eq!(u.to_string(), t.to_string());
        assert_eq!(u.dag_size(), t.dag_size());
        // g(...) appears three times but is encoded once: the later two are 2-byte back refs.
        let tree = t.to_string().matches("g(").count();
        assert_eq!(tree, 3);
        let (_, args) = u.as_appl().unwrap();
        assert!(args[0].ptr_eq(&args[1]));
    }

    #[test]
    fn rejects_bad_streams() {
        let mut a = Arena::new();
        assert_eq!(decode(&mut a, b"XX"), Err(SafError::Magic));
        assert!(matches!(
            decode(&mut a, &[0x56, 0x42, 1, 0x0a, 0]),
            Err(SafError::BackRef { .. })
        ));
        assert!(matches!(
            decode(&mut a, &[0x56, 0x42, 1, 0x05, 0x7f]),
            Err(SafError::Length { .. })
        ));
        // A list containing a back reference to itself.
        assert!(matches!(
            decode(&mut a, &[0x56, 0x42, 1, 0x05, 1, 0x0a, 0]),
            Err(SafError::BackRef { .. })
        ));
        let deep: Vec<u8> = MAGIC
            .iter()
            .copied()
            .chain(std::iter::repeat_n(0x06, MAX_DEPTH + 2))
            .chain([0x01, 0])
            .collect();
        assert!(matches!(decode(&mut a, &deep), Err(SafError::Depth { .. })));
    }
}
