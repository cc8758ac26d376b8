//! The Hop-to-Hop Acknowledgement service written by hand in Rust: the benchmark's reference
//! for the compiled `specs/h2hack.scxml` (seed 000 §3.1.2.1, Tables 3.1, 3.2, Figure 3.6; the
//! seed's "Java-based implementation" of §6).
//!
//! It behaves exactly like the compiled specification — same states, same actions with the same
//! message fields, in the same order — so a test can feed both the same random traces and
//! compare the action streams, and `viastack bench spec` can compare their speed and memory
//! fairly. One instance per MessageID, created on the first message of a new id, freed on
//! reaching "deleted"; timers for unknown instances are ignored (seed §5.1.4.2).

use foldhash::HashMap as FastMap;

use viastack_kernel::time::{Duration, Instant};

use super::action::{Network, Primitive};
use super::message::{Addr, InstanceKey, Message, NodeInfo, PAYLOAD_TYPE};
use super::Runner;

/// Timer identifiers (the seed's listing, §5.1.2.2; maxNACK is 8).
pub mod timer {
    /// Auto-delete of an instance that never got its payload.
    pub const FINAL_DELETE: u32 = 1;
    /// Timeout_NACK.
    pub const NACK: u32 = 2;
    /// Timeout_ACK.
    pub const ACK: u32 = 3;
    /// Timeout_maxACK.
    pub const MAX_ACK: u32 = 4;
    /// Timeout_Msg.
    pub const MSG: u32 = 5;
    /// Timeout_RST.
    pub const RESET: u32 = 6;
    /// Timeout_maxRST.
    pub const MAX_RESET: u32 = 7;
    /// Timeout_maxNACK.
    pub const MAX_NACK: u32 = 8;
}

/// Message types (Table 3.1, seed §5.1.2.2).
pub mod kind {
    /// NACK.
    pub const NACK: u8 = 1;
    /// H2H ACK.
    pub const ACK: u8 = 2;
    /// ACK Request.
    pub const ACK_REQ: u8 = 3;
    /// Reset.
    pub const RESET: u8 = 4;
    /// Payload.
    pub const PAYLOAD: u8 = super::PAYLOAD_TYPE;
}

const MS_FINAL_DELETE: u64 = 30_000;
const MS_NACK: u64 = 1_000;
const MS_MAX_NACK: u64 = 5_000;
/// Seed §6.2.2: Timeout_ACK = 1 s.
const MS_ACK: u64 = 1_000;
const MS_MAX_ACK: u64 = 5_000;
/// Seed §6.2.2: Timeout_Delete = 10 s.
const MS_MSG: u64 = 10_000;
const MS_RESET: u64 = 1_000;
const MS_MAX_RESET: u64 = 5_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Init,
    WaitAck,
    NoPayload,
    Done,
    Reset,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Init => "init",
            State::WaitAck => "waitack",
            State::NoPayload => "nopayload",
            State::Done => "done",
            State::Reset => "reset",
        }
    }
}

#[derive(Clone, Debug)]
struct Inst {
    state: State,
    payload: Option<Message>,
    ackreq: Option<Message>,
    nack: Option<Message>,
    /// Sources of the ACKs received.
    acked: Vec<Addr>,
}

/// The hand-written h2hack service for one node.
#[derive(Debug, Default)]
pub struct H2hack {
    service_id: u32,
    node: NodeInfo,
    instances: FastMap<u64, Inst>,
}

/// What one step did to the instance.
enum Next {
    Stay,
    Delete,
}

impl H2hack {
    /// A service with ServiceID `service_id` (1 in `specs/h2hack.scxml`).
    pub fn new(service_id: u32) -> H2hack {
        H2hack {
            service_id,
            node: NodeInfo::default(),
            instances: FastMap::default(),
        }
    }

    fn key(&self, id: u64) -> InstanceKey {
        InstanceKey {
            service: self.service_id,
            message: id,
        }
    }
}

struct Out<'a, N: Network> {
    now: Instant,
    key: InstanceKey,
    local: Addr,
    net: &'a mut N,
}

impl<N: Network> Out<'_, N> {
    fn fill(&self, m: &mut Message) {
        m.service_id = self.key.service;
        if m.message_id == 0 {
            m.message_id = self.key.message;
        }
    }
    fn control(&mut self, mut m: Message) {
        self.fill(&mut m);
        m.source = self.local;
        m.previous_hop = self.local;
        m.payload = None;
        self.net
            .perform(self.now, self.key, Primitive::SendControl(&m));
    }
    fn data(&mut self, mut m: Message) {
        self.fill(&mut m);
        m.source = self.local;
        m.previous_hop = self.local;
        m.message_type = PAYLOAD_TYPE;
        self.net
            .perform(self.now, self.key, Primitive::SendData(&m));
    }
    fn app(&mut self, mut m: Message) {
        self.fill(&mut m);
        self.net
            .perform(self.now, self.key, Primitive::ToApplication(&m));
    }
    fn set(&mut self, id: u32, ms: u64) {
        self.net.perform(
            self.now,
            self.key,
            Primitive::SetTimer {
                id,
                after: Duration::from_millis(ms),
            },
        );
    }
    fn cancel(&mut self, id: u32) {
        self.net
            .perform(self.now, self.key, Primitive::CancelTimer { id });
    }
    /// H2H ACK to the payload's previous hop.
    fn ack(&mut self, p: &Message) {
        let mut m = p.clone();
        m.delivery_mode = 3;
        m.destination = p.previous_hop;
        m.message_type = kind::ACK;
        self.control(m);
    }
    /// NACK to the requester.
    fn nack(&mut self, req: &Message) {
        let mut m = req.clone();
        m.message_type = kind::NACK;
        m.delivery_mode = 3;
        m.destination = req.source;
        self.control(m);
    }
    /// Reset to all children.
    fn reset(&mut self) {
        let m = Message {
            hop_limit: 1,
            message_type: kind::RESET,
            delivery_mode: 1,
            ..Message::default()
        };
        self.control(m);
    }
    fn enter_reset(&mut self) {
        self.reset();
        self.set(timer::RESET, MS_RESET);
        self.set(timer::MAX_RESET, MS_MAX_RESET);
    }
}

fn all_acked(node: &NodeInfo, acked: &[Addr]) -> bool {
    node.children.iter().all(|c| acked.contains(c))
}

impl H2hack {
    fn got_payload<N: Network>(node: &NodeInfo, inst: &mut Inst, out: &mut Out<'_, N>) {
        let Some(p) = inst.payload.as_ref() else {
            return;
        };
        if node.children.is_empty() {
            out.set(timer::MSG, MS_MSG);
            inst.state = State::Done;
        } else {
            let mut f = p.clone();
            f.delivery_mode = 1;
            f.hop_limit = 1;
            out.data(f);
            out.set(timer::ACK, MS_ACK);
            out.set(timer::MAX_ACK, MS_MAX_ACK);
            inst.state = State::WaitAck;
        }
    }

    fn on_message<N: Network>(
        node: &NodeInfo,
        inst: &mut Inst,
        m: &Message,
        out: &mut Out<'_, N>,
    ) -> Next {
        // History first (the compiled service records before it steps).
        match m.message_type {
            kind::PAYLOAD => inst.payload = Some(m.clone()),
            kind::ACK_REQ => inst.ackreq = Some(m.clone()),
            kind::NACK => inst.nack = Some(m.clone()),
            kind::ACK if !inst.acked.contains(&m.source) => inst.acked.push(m.source),
            _ => {}
        }
        match (inst.state, m.message_type) {
            (State::Init, kind::PAYLOAD) | (State::NoPayload, kind::PAYLOAD) => {
                if inst.state == State::NoPayload {
                    out.cancel(timer::NACK);
                    out.cancel(timer::MAX_NACK);
                }
                out.ack(m);
                out.app(m.clone());
                Self::got_payload(node, inst, out);
            }
            (State::Init, kind::ACK_REQ) => {
                out.nack(m);
                out.set(timer::NACK, MS_NACK);
                out.set(timer::MAX_NACK, MS_MAX_NACK);
                inst.state = State::NoPayload;
            }
            (State::Init, kind::RESET) => {
                out.enter_reset();
                inst.state = State::Reset;
            }
            (State::WaitAck, kind::ACK) if all_acked(node, &inst.acked) => {
                out.cancel(timer::ACK);
                out.cancel(timer::MAX_ACK);
                out.set(timer::MSG, MS_MSG);
                inst.state = State::Done;
            }
            (State::WaitAck | State::Done, kind::ACK_REQ) => {
                if let Some(p) = inst.payload.as_ref() {
                    out.ack(p);
                }
            }
            (State::WaitAck | State::Done, kind::NACK) => {
                if let Some(p) = inst.payload.as_ref() {
                    let mut r = p.clone();
                    r.delivery_mode = 3;
                    r.destination = m.source;
                    out.data(r);
                }
            }
            (State::WaitAck, kind::RESET) => {
                out.cancel(timer::ACK);
                out.cancel(timer::MAX_ACK);
                out.enter_reset();
                inst.state = State::Reset;
            }
            // Table 3.1: a Reset is passed on to the children in "done" too.
            (State::Done, kind::RESET) => {
                out.cancel(timer::MSG);
                out.enter_reset();
                inst.state = State::Reset;
            }
            (State::NoPayload, kind::ACK_REQ) => out.nack(m),
            (State::NoPayload, kind::RESET) => {
                out.cancel(timer::NACK);
                out.cancel(timer::MAX_NACK);
                out.enter_reset();
                inst.state = State::Reset;
            }
            _ => {}
        }
        Next::Stay
    }

    fn on_timer<N: Network>(
        node: &NodeInfo,
        inst: &mut Inst,
        id: u32,
        out: &mut Out<'_, N>,
    ) -> Next {
        match (inst.state, id) {
            (State::Init, timer::FINAL_DELETE) => return Next::Delete,
            (State::WaitAck, timer::ACK) => {
                // Table 3.2: an ACK Request to each child that has not acknowledged, by unicast.
                if let Some(p) = inst.payload.as_ref() {
                    for c in node.children.iter().filter(|c| !inst.acked.contains(c)) {
                        let mut r = p.clone();
                        r.message_type = kind::ACK_REQ;
                        r.delivery_mode = 3;
                        r.hop_limit = 1;
                        r.destination = *c;
                        out.control(r);
                    }
                }
                out.set(timer::ACK, MS_ACK);
            }
            (State::WaitAck, timer::MAX_ACK) => {
                out.cancel(timer::ACK);
                out.enter_reset();
                inst.state = State::Reset;
            }
            (State::NoPayload, timer::NACK) => {
                if let Some(r) = inst.ackreq.as_ref() {
                    out.nack(r);
                }
                out.set(timer::NACK, MS_NACK);
            }
            (State::NoPayload, timer::MAX_NACK) => {
                out.cancel(timer::NACK);
                out.enter_reset();
                inst.state = State::Reset;
            }
            (State::Done, timer::MSG) | (State::Reset, timer::MAX_RESET) => return Next::Delete,
            (State::Reset, timer::RESET) => {
                out.reset();
                out.set(timer::RESET, MS_RESET);
            }
            _ => {}
        }
        Next::Stay
    }
}

impl Runner for H2hack {
    fn handle_message<N: Network>(
        &mut self,
        now: Instant,
        m: &Message,
        net: &mut N,
    ) -> Result<(), super::RunnerError> {
        if m.service_id != self.service_id {
            return Err(super::RunnerError::UnknownService(m.service_id));
        }
        if !matches!(
            m.message_type,
            kind::NACK | kind::ACK | kind::ACK_REQ | kind::RESET | kind::PAYLOAD
        ) {
            // No basic event matches: no instance (like the compiled store).
            return Ok(());
        }
        let key = self.key(m.message_id);
        let mut out = Out {
            now,
            key,
            local: self.node.address,
            net,
        };
        let inst = match self.instances.entry(m.message_id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                out.set(timer::FINAL_DELETE, MS_FINAL_DELETE);
                v.insert(Inst {
                    state: State::Init,
                    payload: None,
                    ackreq: None,
                    nack: None,
                    acked: Vec::new(),
                })
            }
        };
        if let Next::Delete = Self::on_message(&self.node, inst, m, &mut out) {
            self.instances.remove(&m.message_id);
        }
        Ok(())
    }

    fn handle_timer<N: Network>(
        &mut self,
        now: Instant,
        key: InstanceKey,
        id: u32,
        net: &mut N,
    ) -> Result<(), super::RunnerError> {
        if key.service != self.service_id {
            return Ok(());
        }
        let Some(inst) = self.instances.get_mut(&key.message) else {
            return Ok(());
        };
        let mut out = Out {
            now,
            key,
            local: self.node.address,
            net,
        };
        if let Next::Delete = Self::on_timer(&self.node, inst, id, &mut out) {
            self.instances.remove(&key.message);
        }
        Ok(())
    }

    fn set_node(&mut self, node: NodeInfo) {
        self.node = node;
    }

    fn state(&self, key: InstanceKey) -> Option<&str> {
        if key.service != self.service_id {
            return None;
        }
        self.instances.get(&key.message).map(|i| i.state.name())
    }

    fn live(&self) -> usize {
        self.instances.len()
    }

    fn memory_bytes(&self) -> usize {
        let per = std::mem::size_of::<(u64, Inst)>() + 1;
        self.instances.capacity() * per
            + self
                .instances
                .values()
                .map(|i| {
                    i.acked.capacity() * std::mem::size_of::<Addr>()
                        + [&i.payload, &i.ackreq, &i.nack]
                            .iter()
                            .filter_map(|m| m.as_ref())
                            .map(|m| m.heap_bytes())
                            .sum::<usize>()
                })
                .sum::<usize>()
    }
}
