//! Overlay wire formats, version 1 (seed 000 §3.1.1.4, Figure 3.2: "a header and a sequence of
//! extensions … linked by the extension field … terminated with 0x00"; the FSM, here
//! MessageStore, extension carries ServiceID, MessageID and MessageType). Documented byte by
//! byte in `docs/WIRE.md` ("Overlay"); hex vectors in `testdata/vectors/overlay/`; one fuzz target
//! per decoder under `fuzz/`.
//!
//! Every overlay datagram starts with one byte: the version (high nibble, 1) and the kind (low
//! nibble): [`Kind::Application`] ([`app`]: overlay header + extension chain),
//! [`Kind::DtControl`] ([`dt`]), [`Kind::HcControl`] ([`hc`]) and [`Kind::Rendezvous`]
//! ([`rdv`]). All integers are big-endian.
//!
//! As in smoltcp, each format is a checked *view* (`Packet::new_checked` validates the whole
//! datagram once, after which no accessor can panic) plus a parsed *repr* with `parse`, `emit`
//! and `buffer_len`. Unknown delivery modes, extension types, control types and substrate
//! kinds are kept as `Unknown(n)`; only what makes the rest unreadable (a bad version, an
//! unknown address type, a length past the end) is an error.

pub mod app;
pub mod dt;
pub mod hc;
pub mod rdv;
mod substrate;

use thiserror::Error;

pub use substrate::{SubstrateKind, SubstrateRepr, WireSubstrate, MAX_SUBSTRATE};

use crate::addr::{AddrError, DtAddr};

/// The version this crate speaks.
pub const VERSION: u8 = 1;

/// Why bytes are not an overlay message. Each variant names what is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// The datagram ends before `need` bytes.
    #[error("truncated: {len} bytes, need {need}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed to go on.
        need: usize,
    },
    /// A version other than [`VERSION`].
    #[error("invalid version: {0}, this implementation speaks {VERSION}")]
    Version(u8),
    /// The kind nibble is not the one this decoder reads.
    #[error("invalid kind: {0}")]
    Kind(u8),
    /// An address type other than DT (1) or hypercube (2): the addresses' length is unknown.
    #[error("invalid address type: {0}")]
    AddressType(u8),
    /// A DT coordinate out of range.
    #[error("invalid address: {0}")]
    Address(AddrError),
    /// A reserved field is not zero.
    #[error("invalid reserved field: {0:#04x}")]
    Reserved(u8),
    /// Bytes after the end of the message.
    #[error("invalid length: {0} bytes after the end of the message")]
    Trailing(usize),
    /// An extension too long for its 16-bit length field (emit only).
    #[error("invalid extension length: {0} bytes")]
    ExtensionTooLong(usize),
    /// A known extension whose length is wrong for its type.
    #[error("invalid extension: type {kind} with {len} bytes")]
    ExtensionLength {
        /// The extension type.
        kind: u8,
        /// Its body length.
        len: usize,
    },
    /// A substrate address too long for its 8-bit length (emit only) or of the wrong length
    /// for its kind.
    #[error("invalid substrate address: kind {kind} with {len} bytes")]
    Substrate {
        /// The substrate kind.
        kind: u8,
        /// Its length.
        len: usize,
    },
    /// The output buffer is too small (emit only).
    #[error("buffer too small: {have} bytes, need {need}")]
    Buffer {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
}

/// The kind nibble of the first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An application message: overlay header and extensions.
    Application,
    /// A DT protocol message.
    DtControl,
    /// A hypercube protocol message.
    HcControl,
    /// A rendezvous message ([`rdv`]).
    Rendezvous,
    /// Any other kind.
    Unknown(u8),
}

impl Kind {
    /// From the nibble.
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => Kind::Application,
            1 => Kind::DtControl,
            2 => Kind::HcControl,
            3 => Kind::Rendezvous,
            n => Kind::Unknown(n),
        }
    }
    /// The nibble.
    pub fn to_u8(self) -> u8 {
        match self {
            Kind::Application => 0,
            Kind::DtControl => 1,
            Kind::HcControl => 2,
            Kind::Rendezvous => 3,
            Kind::Unknown(n) => n & 0x0f,
        }
    }
}

/// Reads the first byte: the version and the kind of a datagram.
///
/// # Errors
/// [`WireError::Truncated`] for an empty datagram, [`WireError::Version`] for another version.
pub fn classify(bytes: &[u8]) -> Result<Kind, WireError> {
    let b = *bytes
        .first()
        .ok_or(WireError::Truncated { len: 0, need: 1 })?;
    if b >> 4 != VERSION {
        return Err(WireError::Version(b >> 4));
    }
    Ok(Kind::from_u8(b & 0x0f))
}

/// A bounds-checked reader over a datagram.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(WireError::Truncated {
            len: self.buf.len(),
            need: self.pos.saturating_add(n),
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    pub(crate) fn dt_addr(&mut self) -> Result<DtAddr, WireError> {
        let x = self.u32()? as i32;
        let y = self.u32()? as i32;
        DtAddr::new(x, y).map_err(WireError::Address)
    }
    pub(crate) fn rest(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub(crate) fn finish(&self) -> Result<(), WireError> {
        match self.rest() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// Writes into a buffer of the exact length (`buffer_len`), checked.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8], need: usize) -> Result<Self, WireError> {
        if buf.len() < need {
            return Err(WireError::Buffer {
                have: buf.len(),
                need,
            });
        }
        Ok(Writer { buf, pos: 0 })
    }
    pub(crate) fn put(&mut self, b: &[u8]) {
        // `new` checked the whole length; `buffer_len` and `emit` agree by construction and by
        // test, so this never runs short.
        if let Some(dst) = self.buf.get_mut(self.pos..self.pos + b.len()) {
            dst.copy_from_slice(b);
        }
        self.pos += b.len();
    }
    pub(crate) fn dt_addr(&mut self, a: DtAddr) {
        self.put(&a.x().to_be_bytes());
        self.put(&a.y().to_be_bytes());
    }
}
