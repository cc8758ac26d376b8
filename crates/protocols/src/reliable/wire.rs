//! The `reliable-fifo` wire format: a typed view of DATA, ACK and NACK segments (see the
//! module documentation of [`crate::reliable`] for the byte layout).
//!
//! [`Packet::parse`] pops a whole header from a [`Message`] and validates it; after it returns
//! `Ok`, every field is consistent (no range overflows, ranges ascending and disjoint), so the
//! layer's logic cannot be driven into arithmetic overflow by a hostile packet.

use viastack_kernel::Message;

/// Version of this format (the high nibble of the first byte). Version 2 added the receiver's
/// incarnation to every segment (version 1 could not tell a restarted receiver from the one
/// that had already delivered what it had not yet acknowledged).
pub const VERSION: u8 = 2;
/// First byte of a DATA segment.
pub const TYPE_DATA: u8 = VERSION << 4 | 1;
/// First byte of an ACK.
pub const TYPE_ACK: u8 = VERSION << 4 | 2;
/// First byte of a NACK.
pub const TYPE_NACK: u8 = VERSION << 4 | 3;
/// First byte of an ACK bundled in front of a DATA segment (a piggybacked ACK).
pub const TYPE_ACK_DATA: u8 = VERSION << 4 | 4;
/// Bytes of a DATA header.
pub const DATA_LEN: usize = 25;
/// Bytes of an ACK/NACK without ranges.
pub const ACK_LEN: usize = 22;
/// Most ranges one ACK or NACK carries (a decoder refuses more).
pub const MAX_RANGES: usize = 8;

/// The header of a DATA segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Data {
    /// The sender's stream incarnation for this (channel, destination); never 0.
    pub epoch: u32,
    /// The receiver incarnation the sender addresses (learnt from its ACKs); 0 while it knows
    /// none. A receiver delivers only segments addressed to itself.
    pub to: u32,
    /// Sequence number.
    pub seq: u64,
    /// The sender's oldest unacknowledged sequence number when it sent this (≤ `seq`).
    pub first: u64,
}

/// A range of sequence numbers `start..end` (end exclusive, `start < end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Range {
    /// First sequence number.
    pub start: u64,
    /// One past the last.
    pub end: u64,
}

/// An ACK (ranges received above `cum`: SACK blocks) or a NACK (ranges missing from `cum` on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// A NACK: the ranges are missing segments, to retransmit now.
    pub nack: bool,
    /// The epoch of the data stream acknowledged (echoed from its DATA segments).
    pub epoch: u32,
    /// The acknowledging receiver's incarnation: drawn when it creates its receiving state
    /// for the stream's (channel, sender), never 0.
    pub incarnation: u32,
    /// Every sequence number below this was received.
    pub cum: u64,
    /// Segments from `cum` on the receiver accepts (flow control).
    pub window: u32,
    n: u8,
    ranges: [Range; MAX_RANGES],
}

impl Ack {
    /// An ACK or NACK with no ranges.
    pub fn new(nack: bool, epoch: u32, incarnation: u32, cum: u64, window: u32) -> Self {
        Ack {
            nack,
            epoch,
            incarnation,
            cum,
            window,
            n: 0,
            ranges: [Range::default(); MAX_RANGES],
        }
    }

    /// Adds a range; returns false (and adds nothing) when full. The caller keeps ranges
    /// ascending, disjoint and at or above `cum` (above it for an ACK).
    pub fn push_range(&mut self, r: Range) -> bool {
        let Some(slot) = self.ranges.get_mut(usize::from(self.n)) else {
            return false;
        };
        *slot = r;
        self.n += 1;
        true
    }

    /// The ranges.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges[..usize::from(self.n)]
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        ACK_LEN + 8 * usize::from(self.n)
    }

    /// Whether it carries no ranges.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    /// DATA; the payload stays in the message.
    Data(Data),
    /// ACK or NACK.
    Ack(Ack),
    /// An ACK for the reverse stream piggybacked on a DATA segment; the payload stays in the
    /// message.
    AckData(Ack, Data),
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Shorter than its header.
    #[error("truncated")]
    Truncated,
    /// A first byte of another version or an unknown type.
    #[error("unknown type byte {0:#04x}")]
    UnknownType(u8),
    /// Fields that contradict each other.
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

impl Error {
    /// The counter a drop for this reason is counted under.
    pub fn counter(&self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::UnknownType(_) => "unknown_type",
            Error::Malformed(_) => "malformed",
        }
    }
}

impl From<viastack_kernel::Truncated> for Error {
    fn from(_: viastack_kernel::Truncated) -> Self {
        Error::Truncated
    }
}

impl Data {
    /// Pushes the header in front of `m`.
    pub fn emit(&self, m: &mut Message) {
        m.push_u64(self.first);
        m.push_u64(self.seq);
        m.push_u32(self.to);
        m.push_u32(self.epoch);
        m.push_u8(TYPE_DATA);
    }
}

impl Ack {
    /// The ACK alone, as a message with headroom for the lower layers.
    pub fn to_message(&self) -> Message {
        let mut m = Message::new();
        self.emit(&mut m, false);
        m
    }

    /// Pushes the ACK in front of `m`: alone (`bundled` false: `m` is empty) or bundled in
    /// front of a DATA segment already in `m` (type [`TYPE_ACK_DATA`]; never a NACK).
    pub fn emit(&self, m: &mut Message, bundled: bool) {
        for r in self.ranges().iter().rev() {
            // Offsets fit: the builder only makes ranges within a u32 window of `cum`.
            m.push_u32(u32::try_from(r.end - r.start).unwrap_or(u32::MAX));
            m.push_u32(u32::try_from(r.start - self.cum).unwrap_or(u32::MAX));
        }
        m.push_u8(self.n);
        m.push_u32(self.window);
        m.push_u64(self.cum);
        m.push_u32(self.incarnation);
        m.push_u32(self.epoch);
        m.push_u8(match (bundled, self.nack) {
            (true, _) => TYPE_ACK_DATA,
            (false, true) => TYPE_NACK,
            (false, false) => TYPE_ACK,
        });
    }
}

fn parse_data(m: &mut Message) -> Result<Data, Error> {
    m.peek(DATA_LEN - 1)?;
    let epoch = m.pop_u32()?;
    let to = m.pop_u32()?;
    let seq = m.pop_u64()?;
    let first = m.pop_u64()?;
    if epoch == 0 {
        return Err(Error::Malformed("epoch 0"));
    }
    if first > seq {
        return Err(Error::Malformed("first above seq"));
    }
    Ok(Data {
        epoch,
        to,
        seq,
        first,
    })
}

/// The fields of an ACK/NACK after its type byte; `alone`: nothing may follow its ranges.
fn parse_ack(m: &mut Message, nack: bool, alone: bool) -> Result<Ack, Error> {
    m.peek(ACK_LEN - 1)?;
    let epoch = m.pop_u32()?;
    let incarnation = m.pop_u32()?;
    let cum = m.pop_u64()?;
    let window = m.pop_u32()?;
    let n = m.pop_u8()?;
    if incarnation == 0 {
        return Err(Error::Malformed("incarnation 0"));
    }
    if usize::from(n) > MAX_RANGES {
        return Err(Error::Malformed("too many ranges"));
    }
    if m.len() < 8 * usize::from(n) {
        return Err(Error::Truncated);
    }
    if alone && m.len() != 8 * usize::from(n) {
        return Err(Error::Malformed("trailing bytes"));
    }
    let mut ack = Ack::new(nack, epoch, incarnation, cum, window);
    // An ACK's blocks start above `cum` (cum itself is missing); a NACK's first hole may
    // start at `cum`.
    let mut floor = if nack { cum } else { cum.saturating_add(1) };
    for _ in 0..n {
        let offset = m.pop_u32()?;
        let len = m.pop_u32()?;
        let start = cum
            .checked_add(u64::from(offset))
            .ok_or(Error::Malformed("range overflows"))?;
        let end = start
            .checked_add(u64::from(len))
            .ok_or(Error::Malformed("range overflows"))?;
        if len == 0 {
            return Err(Error::Malformed("empty range"));
        }
        if start < floor {
            return Err(Error::Malformed("ranges not ascending and disjoint"));
        }
        floor = end.saturating_add(1);
        ack.push_range(Range { start, end });
    }
    Ok(ack)
}

impl Packet {
    /// Pops and validates a header. An ACK/NACK must fill the message exactly; a DATA segment's
    /// payload stays in `m`, also behind a bundled ACK.
    ///
    /// # Errors
    /// [`Error`] when the bytes are not a valid header; `m` is then in an unspecified state and
    /// must be dropped.
    pub fn parse(m: &mut Message) -> Result<Packet, Error> {
        match m.pop_u8()? {
            TYPE_DATA => parse_data(m).map(Packet::Data),
            ty @ (TYPE_ACK | TYPE_NACK) => parse_ack(m, ty == TYPE_NACK, true).map(Packet::Ack),
            TYPE_ACK_DATA => {
                let ack = parse_ack(m, false, false)?;
                match m.pop_u8()? {
                    TYPE_DATA => Ok(Packet::AckData(ack, parse_data(m)?)),
                    _ => Err(Error::Malformed("a bundled ACK not followed by DATA")),
                }
            }
            other => Err(Error::UnknownType(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_roundtrip() {
        let d = Data {
            epoch: 0xabcd,
            to: 0x1234,
            seq: 7,
            first: 5,
        };
        let mut m = Message::from_payload(b"p");
        d.emit(&mut m);
        assert_eq!(m.len(), DATA_LEN + 1);
        assert_eq!(Packet::parse(&mut m), Ok(Packet::Data(d)));
        assert_eq!(m.as_slice(), b"p");
    }

    #[test]
    fn ack_roundtrip_with_ranges() {
        let mut a = Ack::new(false, 9, 3, 100, 64);
        assert!(a.push_range(Range {
            start: 102,
            end: 104
        }));
        assert!(a.push_range(Range {
            start: 110,
            end: 111
        }));
        let mut m = a.to_message();
        assert_eq!(m.len(), a.len());
        assert_eq!(Packet::parse(&mut m), Ok(Packet::Ack(a)));
        let mut n = Ack::new(true, 9, 3, 100, 64);
        n.push_range(Range {
            start: 100,
            end: 102,
        });
        let mut m = n.to_message();
        assert_eq!(Packet::parse(&mut m), Ok(Packet::Ack(n)));
    }

    #[test]
    fn contradictions_are_refused() {
        let parse = |bytes: &[u8]| Packet::parse(&mut Message::from_wire(bytes.to_vec()));
        assert_eq!(parse(&[]), Err(Error::Truncated));
        // Version 1's DATA type byte is another version's now.
        assert_eq!(parse(&[0x11]), Err(Error::UnknownType(0x11)));
        assert_eq!(parse(&[TYPE_DATA, 0, 0]), Err(Error::Truncated));
        let mut d = vec![TYPE_DATA, 0, 0, 0, 0];
        d.extend_from_slice(&[0; 20]);
        assert!(matches!(parse(&d), Err(Error::Malformed(_))), "epoch 0");
        // An ACK range starting at cum (offset 0) is refused; a NACK's is fine.
        let mut a = vec![TYPE_ACK, 0, 0, 0, 1, 0, 0, 0, 2];
        a.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 8, 1]);
        a.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
        assert!(matches!(parse(&a), Err(Error::Malformed(_))));
        a[0] = TYPE_NACK;
        assert!(parse(&a).is_ok());
        // An ACK from incarnation 0 (none is ever drawn).
        let mut z = a.clone();
        z[8] = 0;
        assert!(matches!(parse(&z), Err(Error::Malformed(_))));
        // Overflowing range.
        let mut o = vec![TYPE_ACK, 0, 0, 0, 1, 0, 0, 0, 2];
        o.extend_from_slice(&u64::MAX.to_be_bytes());
        o.extend_from_slice(&[0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert!(matches!(parse(&o), Err(Error::Malformed(_))));
    }
}
