//! Wire formats of the group layers (seed 001 §2.1's virtual-synchrony group; docs/WIRE.md
//! "Group communication"): a parsed representation ([`Pdu`], [`TotalPdu`]) with `parse` over a
//! byte slice and `emit` into bytes, in the smoltcp style of DESIGN.md §6.
//!
//! Every `vsync` packet starts with a version byte (1) and a kind byte; all integers are
//! network byte order. Lists carry a `u16` count and are refused above [`MAX_MEMBERS`]
//! entries, so no input can make a decoder allocate without bound. Unknown kinds and versions
//! are typed errors ([`WireError`]), counted by the session, never panics.

use std::fmt;

use viastack_kernel::NodeId;

/// Version byte of every group packet.
pub const VERSION: u8 = 1;
/// Most members a view, a digest or a cut may list (bounds decoding).
pub const MAX_MEMBERS: usize = 1024;
/// Most old views a `NewView` may carry cuts for.
pub const MAX_CUTS: usize = 64;

/// Bytes of a [`Member`] on the wire.
pub const MEMBER_LEN: usize = 8;
/// Bytes of a [`ViewId`] on the wire.
pub const VIEW_ID_LEN: usize = 16;
/// Bytes of a data header (version, kind, view id, origin, sequence number).
pub const DATA_HEADER_LEN: usize = 2 + VIEW_ID_LEN + MEMBER_LEN + 8;

/// One incarnation of a node: a node that restarts is a new member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// The node.
    pub node: NodeId,
    /// Its incarnation: random, non-zero, drawn when its session starts.
    pub epoch: u32,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{:08x}", self.node, self.epoch)
    }
}

/// A view's identifier: a counter that grows at every view change, and the member that
/// installed it (its coordinator). Ordered by counter first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewId {
    /// Grows at every view change a member goes through.
    pub counter: u64,
    /// The coordinator that proposed the view.
    pub coord: Member,
}

impl fmt::Display for ViewId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.counter, self.coord)
    }
}

/// The per-old-view part of a `NewView`: how far each sender of the old view must be
/// delivered by the members that come from it, and who holds those messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The old view.
    pub old: ViewId,
    /// Per sender of the old view (in its member order), the last sequence number to deliver.
    pub upto: Vec<u64>,
    /// Per sender, a member that reported holding every message up to `upto`.
    pub holders: Vec<NodeId>,
}

/// A `vsync` packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pdu {
    /// kind 1: an application message of `origin`, number `seq` (from 1) in view `view`; the
    /// payload follows the header. Retransmissions (by the origin or any holder) are identical.
    Data {
        /// The view it was sent in.
        view: ViewId,
        /// Its sender.
        origin: Member,
        /// Its number among `origin`'s messages in `view`.
        seq: u64,
    },
    /// kind 2: gossip of what `from` has received in `view`: per member (view order), the
    /// highest sequence number received without a gap. Drives NAKs and stability.
    Status {
        /// The view.
        view: ViewId,
        /// The reporting member.
        from: Member,
        /// Per sender, contiguous messages received.
        digest: Vec<u64>,
    },
    /// kind 3: please retransmit `origin`'s messages `first..=last` of `view`.
    Nak {
        /// The view.
        view: ViewId,
        /// Whose messages.
        origin: NodeId,
        /// First missing.
        first: u64,
        /// Last missing.
        last: u64,
    },
    /// kind 4: the coordinator proposes view `proposal` with `members`: stop sending, report.
    Flush {
        /// The proposed view's id.
        proposal: ViewId,
        /// Its members, ascending.
        members: Vec<Member>,
    },
    /// kind 5: `from` accepts `proposal`; in its current view `old` it has received `digest`.
    FlushOk {
        /// The proposal answered.
        proposal: ViewId,
        /// The answering member.
        from: Member,
        /// Its current view.
        old: ViewId,
        /// Per sender of `old`, contiguous messages received.
        digest: Vec<u64>,
    },
    /// kind 6: `from` refuses `proposal`: it already accepted (or is in) a view with counter
    /// `accepted`; a new proposal must go above it.
    FlushNo {
        /// The proposal refused.
        proposal: ViewId,
        /// The refusing member.
        from: Member,
        /// The counter to exceed.
        accepted: u64,
    },
    /// kind 7: install `view` with `members`, after delivering each old view up to its cut.
    NewView {
        /// The new view (the proposal's id).
        view: ViewId,
        /// Its members, ascending.
        members: Vec<Member>,
        /// One cut per old view its members come from.
        cuts: Vec<Cut>,
    },
    /// kind 8: a coordinator announces its view to nodes outside it (merge discovery).
    Beacon {
        /// The view.
        view: ViewId,
        /// Its members.
        members: Vec<Member>,
    },
    /// kind 9: `from` leaves `view`.
    Leave {
        /// The view.
        view: ViewId,
        /// The leaving member.
        from: Member,
    },
}

/// Why a packet could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its fields.
    #[error("truncated")]
    Truncated,
    /// A version other than [`VERSION`].
    #[error("unknown version {0}")]
    Version(u8),
    /// An unknown kind byte.
    #[error("unknown kind {0}")]
    Kind(u8),
    /// A list longer than [`MAX_MEMBERS`] (or cuts above [`MAX_CUTS`]).
    #[error("list of {0} entries is too long")]
    TooLong(usize),
    /// A field whose value is impossible (a zero epoch, `first > last`, lists of unequal
    /// length, members not ascending).
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// A cursor over bytes being parsed.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let end = self.pos.checked_add(N).ok_or(WireError::Truncated)?;
        let s = self.bytes.get(self.pos..end).ok_or(WireError::Truncated)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        self.pos = end;
        Ok(out)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.take()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.take()?))
    }
    fn count(&mut self, max: usize) -> Result<usize, WireError> {
        let n = usize::from(self.u16()?);
        if n > max {
            return Err(WireError::TooLong(n));
        }
        Ok(n)
    }
    fn member(&mut self) -> Result<Member, WireError> {
        let node = NodeId(self.u32()?);
        let epoch = self.u32()?;
        if epoch == 0 {
            return Err(WireError::Malformed("member epoch 0"));
        }
        Ok(Member { node, epoch })
    }
    fn view(&mut self) -> Result<ViewId, WireError> {
        let counter = self.u64()?;
        let coord = self.member()?;
        Ok(ViewId { counter, coord })
    }
    fn members(&mut self) -> Result<Vec<Member>, WireError> {
        let n = self.count(MAX_MEMBERS)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let m = self.member()?;
            if v.last().is_some_and(|l: &Member| l.node >= m.node) {
                return Err(WireError::Malformed("members not ascending by node"));
            }
            v.push(m);
        }
        Ok(v)
    }
    fn digest(&mut self) -> Result<Vec<u64>, WireError> {
        let n = self.count(MAX_MEMBERS)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.u64()?);
        }
        Ok(v)
    }
}

/// Bytes being written.
#[derive(Default)]
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn count(&mut self, n: usize) {
        // Callers never build lists above MAX_MEMBERS (views are bounded by the scenario).
        self.u16(u16::try_from(n).unwrap_or(u16::MAX));
    }
    fn member(&mut self, m: Member) {
        self.u32(m.node.0);
        self.u32(m.epoch);
    }
    fn view(&mut self, v: ViewId) {
        self.u64(v.counter);
        self.member(v.coord);
    }
    fn members(&mut self, ms: &[Member]) {
        self.count(ms.len());
        for &m in ms {
            self.member(m);
        }
    }
    fn digest(&mut self, d: &[u64]) {
        self.count(d.len());
        for &x in d {
            self.u64(x);
        }
    }
}

impl Pdu {
    /// The kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            Pdu::Data { .. } => 1,
            Pdu::Status { .. } => 2,
            Pdu::Nak { .. } => 3,
            Pdu::Flush { .. } => 4,
            Pdu::FlushOk { .. } => 5,
            Pdu::FlushNo { .. } => 6,
            Pdu::NewView { .. } => 7,
            Pdu::Beacon { .. } => 8,
            Pdu::Leave { .. } => 9,
        }
    }

    /// Reads a packet from the front of `bytes`; returns it and the bytes its header took
    /// (for `Data`, the payload is `bytes[len..]`; other kinds ignore trailing bytes).
    ///
    /// # Errors
    /// [`WireError`] for a short, unknown or malformed packet.
    pub fn parse(bytes: &[u8]) -> Result<(Pdu, usize), WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let kind = r.u8()?;
        let pdu = match kind {
            1 => {
                let view = r.view()?;
                let origin = r.member()?;
                let seq = r.u64()?;
                if seq == 0 {
                    return Err(WireError::Malformed("data seq 0"));
                }
                Pdu::Data { view, origin, seq }
            }
            2 => Pdu::Status {
                view: r.view()?,
                from: r.member()?,
                digest: r.digest()?,
            },
            3 => {
                let view = r.view()?;
                let origin = NodeId(r.u32()?);
                let (first, last) = (r.u64()?, r.u64()?);
                if first == 0 || first > last {
                    return Err(WireError::Malformed("nak range"));
                }
                Pdu::Nak {
                    view,
                    origin,
                    first,
                    last,
                }
            }
            4 => Pdu::Flush {
                proposal: r.view()?,
                members: r.members()?,
            },
            5 => Pdu::FlushOk {
                proposal: r.view()?,
                from: r.member()?,
                old: r.view()?,
                digest: r.digest()?,
            },
            6 => Pdu::FlushNo {
                proposal: r.view()?,
                from: r.member()?,
                accepted: r.u64()?,
            },
            7 => {
                let view = r.view()?;
                let members = r.members()?;
                let n = r.count(MAX_CUTS)?;
                let mut cuts = Vec::with_capacity(n);
                for _ in 0..n {
                    let old = r.view()?;
                    let upto = r.digest()?;
                    let k = r.count(MAX_MEMBERS)?;
                    if k != upto.len() {
                        return Err(WireError::Malformed("cut holders and digest differ"));
                    }
                    let mut holders = Vec::with_capacity(k);
                    for _ in 0..k {
                        holders.push(NodeId(r.u32()?));
                    }
                    cuts.push(Cut { old, upto, holders });
                }
                Pdu::NewView {
                    view,
                    members,
                    cuts,
                }
            }
            8 => Pdu::Beacon {
                view: r.view()?,
                members: r.members()?,
            },
            9 => Pdu::Leave {
                view: r.view()?,
                from: r.member()?,
            },
            k => return Err(WireError::Kind(k)),
        };
        Ok((pdu, r.pos()))
    }

    /// The packet's bytes (for `Data`, the header only: the payload follows it).
    pub fn emit(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(VERSION);
        w.u8(self.kind());
        match self {
            Pdu::Data { view, origin, seq } => {
                w.view(*view);
                w.member(*origin);
                w.u64(*seq);
            }
            Pdu::Status { view, from, digest } => {
                w.view(*view);
                w.member(*from);
                w.digest(digest);
            }
            Pdu::Nak {
                view,
                origin,
                first,
                last,
            } => {
                w.view(*view);
                w.u32(origin.0);
                w.u64(*first);
                w.u64(*last);
            }
            Pdu::Flush { proposal, members } => {
                w.view(*proposal);
                w.members(members);
            }
            Pdu::FlushOk {
                proposal,
                from,
                old,
                digest,
            } => {
                w.view(*proposal);
                w.member(*from);
                w.view(*old);
                w.digest(digest);
            }
            Pdu::FlushNo {
                proposal,
                from,
                accepted,
            } => {
                w.view(*proposal);
                w.member(*from);
                w.u64(*accepted);
            }
            Pdu::NewView {
                view,
                members,
                cuts,
            } => {
                w.view(*view);
                w.members(members);
                w.count(cuts.len());
                for c in cuts {
                    w.view(c.old);
                    w.digest(&c.upto);
                    w.count(c.holders.len());
                    for h in &c.holders {
                        w.u32(h.0);
                    }
                }
            }
            Pdu::Beacon { view, members } => {
                w.view(*view);
                w.members(members);
            }
            Pdu::Leave { view, from } => {
                w.view(*view);
                w.member(*from);
            }
        }
        w.0
    }
}

/// A `total` packet (the sequencer layer's header, inside `vsync` data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TotalPdu {
    /// kind 1: an application message, number `local` of its sender's incarnation; the payload
    /// follows.
    Data {
        /// The sender's own count of its messages.
        local: u64,
    },
    /// kind 2: the sequencer of view `view` fixes the order of these messages, after every
    /// earlier `Order` of that view: each (sender node, its `local` number).
    Order {
        /// The view whose sequencer sent it.
        view: ViewId,
        /// The messages, in delivery order.
        entries: Vec<(NodeId, u64)>,
    },
}

impl TotalPdu {
    /// Reads a packet; returns it and the bytes its header took.
    ///
    /// # Errors
    /// [`WireError`] for a short, unknown or malformed packet.
    pub fn parse(bytes: &[u8]) -> Result<(TotalPdu, usize), WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let pdu = match r.u8()? {
            1 => TotalPdu::Data { local: r.u64()? },
            2 => {
                let view = r.view()?;
                let n = r.count(MAX_MEMBERS)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push((NodeId(r.u32()?), r.u64()?));
                }
                TotalPdu::Order { view, entries }
            }
            k => return Err(WireError::Kind(k)),
        };
        Ok((pdu, r.pos()))
    }

    /// The packet's bytes (for `Data`, the header only).
    pub fn emit(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(VERSION);
        match self {
            TotalPdu::Data { local } => {
                w.u8(1);
                w.u64(*local);
            }
            TotalPdu::Order { view, entries } => {
                w.u8(2);
                w.view(*view);
                w.count(entries.len());
                for (n, l) in entries {
                    w.u32(n.0);
                    w.u64(*l);
                }
            }
        }
        w.0
    }
}

/// A `causal-order` packet (inside `vsync` data): the view it was sent in, the sender's index
/// in that view, and the vector clock; the application's bytes follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CausalPdu {
    /// The view.
    pub view: ViewId,
    /// The sender's position in the view's member list.
    pub sender: u16,
    /// Per member of the view, messages of it delivered before this one (the sender's entry:
    /// this message's number).
    pub vc: Vec<u64>,
}

impl CausalPdu {
    /// Reads a packet; returns it and the bytes its header took.
    ///
    /// # Errors
    /// [`WireError`] for a short, unknown or malformed packet.
    pub fn parse(bytes: &[u8]) -> Result<(CausalPdu, usize), WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        match r.u8()? {
            1 => {}
            k => return Err(WireError::Kind(k)),
        }
        let view = r.view()?;
        let sender = r.u16()?;
        let vc = r.digest()?;
        if usize::from(sender) >= vc.len() {
            return Err(WireError::Malformed("sender outside the clock"));
        }
        Ok((CausalPdu { view, sender, vc }, r.pos()))
    }

    /// The header's bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(VERSION);
        w.u8(1);
        w.view(self.view);
        w.u16(self.sender);
        w.digest(&self.vc);
        w.0
    }
}

/// A `state-transfer` packet (inside the ordered group's data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatePdu {
    /// kind 1: an application message; its bytes follow.
    Data,
    /// kind 2: the provider's state as view `view` began.
    State {
        /// The view it is for.
        view: ViewId,
        /// The view the provider came from (none for its first).
        from: Option<ViewId>,
        /// Messages the provider had delivered.
        count: u64,
        /// Its hash chain over them.
        hash: u64,
    },
}

impl StatePdu {
    /// Reads a packet; returns it and the bytes its header took.
    ///
    /// # Errors
    /// [`WireError`] for a short, unknown or malformed packet.
    pub fn parse(bytes: &[u8]) -> Result<(StatePdu, usize), WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let pdu = match r.u8()? {
            1 => StatePdu::Data,
            2 => {
                let view = r.view()?;
                let from = match r.u8()? {
                    0 => None,
                    1 => Some(r.view()?),
                    _ => return Err(WireError::Malformed("state origin flag")),
                };
                StatePdu::State {
                    view,
                    from,
                    count: r.u64()?,
                    hash: r.u64()?,
                }
            }
            k => return Err(WireError::Kind(k)),
        };
        Ok((pdu, r.pos()))
    }

    /// The header's bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(VERSION);
        match self {
            StatePdu::Data => w.u8(1),
            StatePdu::State {
                view,
                from,
                count,
                hash,
            } => {
                w.u8(2);
                w.view(*view);
                match from {
                    None => w.u8(0),
                    Some(f) => {
                        w.u8(1);
                        w.view(*f);
                    }
                }
                w.u64(*count);
                w.u64(*hash);
            }
        }
        w.0
    }
}

/// Most light-weight groups one `Joined` may list (bounds decoding).
pub const MAX_LIGHT_GROUPS: usize = 1024;

/// An `lwg` packet (the light-weight group layer's header, inside the heavy group's data; seed
/// 001 §2.1, Rodrigues et al.): version (1), kind, fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LwgPdu {
    /// kind 1: an application message of light group `group`; the payload follows.
    Data {
        /// The light group's id (FNV-1a 32 of its channel's name).
        group: u32,
    },
    /// kind 2: the light groups the sender is a member of in heavy view `view` (ascending, no
    /// repeats). The first one of each member in a view counts.
    Joined {
        /// The heavy view the announcement is for.
        view: ViewId,
        /// The sender's light groups.
        groups: Vec<u32>,
    },
    /// kind 3: on the old heavy group, light group `group` moves to the heavy group of light
    /// group `to`; `generation` is the group's move count after this move.
    Switch {
        /// The light group that moves.
        group: u32,
        /// A light group on the destination heavy group (its id names that heavy group).
        to: u32,
        /// The moving group's generation once moved.
        generation: u32,
    },
    /// kind 4: on the old heavy group, the sender sends nothing more of `group` there (FIFO:
    /// after its last message of the group).
    Flushed {
        /// The light group that moves.
        group: u32,
    },
    /// kind 5: on the new heavy group in heavy view `view`, the sender's part in the switch
    /// view of `group`: a member of it (`open`) or not; the first one of each member in a view
    /// counts.
    Moved {
        /// The new heavy group's view.
        view: ViewId,
        /// The light group that moved.
        group: u32,
        /// The sender's generation for the group (the switch view takes the largest).
        generation: u32,
        /// The sender has the group open and joins its switch view.
        open: bool,
    },
    /// kind 6: `Joined` with each group's generation (sent instead of `Joined` once a group
    /// moved): the light view takes the largest generation announced for its group.
    JoinedAt {
        /// The heavy view the announcement is for.
        view: ViewId,
        /// The sender's light groups (ascending, no repeats) with their generations.
        groups: Vec<(u32, u32)>,
    },
}

impl LwgPdu {
    /// Reads a packet; returns it and the bytes its header took.
    ///
    /// # Errors
    /// [`WireError`] for a short, unknown or malformed packet.
    pub fn parse(bytes: &[u8]) -> Result<(LwgPdu, usize), WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let pdu = match r.u8()? {
            1 => LwgPdu::Data { group: r.u32()? },
            2 => {
                let view = r.view()?;
                let n = r.count(MAX_LIGHT_GROUPS)?;
                let mut groups: Vec<u32> = Vec::with_capacity(n);
                for _ in 0..n {
                    let g = r.u32()?;
                    if groups.last().is_some_and(|&l| l >= g) {
                        return Err(WireError::Malformed("light groups not ascending"));
                    }
                    groups.push(g);
                }
                LwgPdu::Joined { view, groups }
            }
            3 => LwgPdu::Switch {
                group: r.u32()?,
                to: r.u32()?,
                generation: r.u32()?,
            },
            4 => LwgPdu::Flushed { group: r.u32()? },
            5 => LwgPdu::Moved {
                view: r.view()?,
                group: r.u32()?,
                generation: r.u32()?,
                open: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Malformed("moved flag not 0 or 1")),
                },
            },
            6 => {
                let view = r.view()?;
                let n = r.count(MAX_LIGHT_GROUPS)?;
                let mut groups: Vec<(u32, u32)> = Vec::with_capacity(n);
                for _ in 0..n {
                    let g = r.u32()?;
                    let generation = r.u32()?;
                    if groups.last().is_some_and(|&(l, _)| l >= g) {
                        return Err(WireError::Malformed("light groups not ascending"));
                    }
                    groups.push((g, generation));
                }
                LwgPdu::JoinedAt { view, groups }
            }
            k => return Err(WireError::Kind(k)),
        };
        Ok((pdu, r.pos()))
    }

    /// The packet's bytes (for `Data`, the header only).
    pub fn emit(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(VERSION);
        match self {
            LwgPdu::Data { group } => {
                w.u8(1);
                w.u32(*group);
            }
            LwgPdu::Joined { view, groups } => {
                w.u8(2);
                w.view(*view);
                w.count(groups.len());
                for g in groups {
                    w.u32(*g);
                }
            }
            LwgPdu::Switch {
                group,
                to,
                generation,
            } => {
                w.u8(3);
                w.u32(*group);
                w.u32(*to);
                w.u32(*generation);
            }
            LwgPdu::Flushed { group } => {
                w.u8(4);
                w.u32(*group);
            }
            LwgPdu::Moved {
                view,
                group,
                generation,
                open,
            } => {
                w.u8(5);
                w.view(*view);
                w.u32(*group);
                w.u32(*generation);
                w.u8(u8::from(*open));
            }
            LwgPdu::JoinedAt { view, groups } => {
                w.u8(6);
                w.view(*view);
                w.count(groups.len());
                for (g, generation) in groups {
                    w.u32(*g);
                    w.u32(*generation);
                }
            }
        }
        w.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(n: u32, e: u32) -> Member {
        Member {
            node: NodeId(n),
            epoch: e,
        }
    }

    fn samples() -> Vec<Pdu> {
        let v = ViewId {
            counter: 3,
            coord: m(0, 7),
        };
        vec![
            Pdu::Data {
                view: v,
                origin: m(1, 9),
                seq: 4,
            },
            Pdu::Status {
                view: v,
                from: m(1, 9),
                digest: vec![1, 2],
            },
            Pdu::Nak {
                view: v,
                origin: NodeId(2),
                first: 3,
                last: 5,
            },
            Pdu::Flush {
                proposal: v,
                members: vec![m(0, 7), m(1, 9)],
            },
            Pdu::FlushOk {
                proposal: v,
                from: m(1, 9),
                old: v,
                digest: vec![0, 4],
            },
            Pdu::FlushNo {
                proposal: v,
                from: m(1, 9),
                accepted: 8,
            },
            Pdu::NewView {
                view: v,
                members: vec![m(0, 7)],
                cuts: vec![Cut {
                    old: v,
                    upto: vec![2, 3],
                    holders: vec![NodeId(0), NodeId(1)],
                }],
            },
            Pdu::Beacon {
                view: v,
                members: vec![m(0, 7)],
            },
            Pdu::Leave {
                view: v,
                from: m(1, 9),
            },
        ]
    }

    #[test]
    fn every_pdu_round_trips_and_every_prefix_is_refused() {
        for p in samples() {
            let bytes = p.emit();
            assert_eq!(Pdu::parse(&bytes), Ok((p.clone(), bytes.len())));
            for cut in 0..bytes.len() {
                assert!(Pdu::parse(&bytes[..cut]).is_err(), "{p:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn bad_fields_are_typed_errors() {
        assert_eq!(Pdu::parse(&[2, 1]), Err(WireError::Version(2)));
        assert_eq!(Pdu::parse(&[1, 99]), Err(WireError::Kind(99)));
        let mut b = Pdu::Flush {
            proposal: ViewId {
                counter: 1,
                coord: m(0, 1),
            },
            members: vec![m(1, 1), m(2, 1)],
        }
        .emit();
        // Swap the members: not ascending.
        let tail = b.len() - 16;
        b[tail..tail + 4].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(Pdu::parse(&b), Err(WireError::Malformed(_))));
    }

    #[test]
    fn causal_pdus_round_trip() {
        let p = CausalPdu {
            view: ViewId {
                counter: 2,
                coord: m(1, 3),
            },
            sender: 1,
            vc: vec![4, 2, 0],
        };
        let bytes = p.emit();
        assert_eq!(CausalPdu::parse(&bytes), Ok((p, bytes.len())));
        for cut in 0..bytes.len() {
            assert!(CausalPdu::parse(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn state_pdus_round_trip() {
        let v = ViewId {
            counter: 2,
            coord: m(1, 3),
        };
        for p in [
            StatePdu::Data,
            StatePdu::State {
                view: v,
                from: None,
                count: 0,
                hash: 7,
            },
            StatePdu::State {
                view: v,
                from: Some(v),
                count: 9,
                hash: u64::MAX,
            },
        ] {
            let bytes = p.emit();
            assert_eq!(StatePdu::parse(&bytes), Ok((p.clone(), bytes.len())));
            for cut in 0..bytes.len() {
                assert!(StatePdu::parse(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn total_pdus_round_trip() {
        for p in [
            TotalPdu::Data { local: 5 },
            TotalPdu::Order {
                view: ViewId {
                    counter: 2,
                    coord: m(1, 3),
                },
                entries: vec![(NodeId(1), 0), (NodeId(0), 4)],
            },
        ] {
            let bytes = p.emit();
            assert_eq!(TotalPdu::parse(&bytes), Ok((p.clone(), bytes.len())));
            for cut in 0..bytes.len() {
                assert!(TotalPdu::parse(&bytes[..cut]).is_err());
            }
        }
    }
}
