//! A blocking SP endpoint on a real UDP socket: the driver of [`Endpoint`] for programs that
//! just want `connect / accept / send_message / recv_message / set_reliability / stats`.
//!
//! This module is the only place in the crate that reads the clock (DESIGN.md §6.1: drivers
//! own time); the protocol underneath sees it only as [`Instant`] arguments. One thread owns a
//! [`SpSocket`]; every blocking call drives all of its connections (sends, receives, timers)
//! until its own condition holds or its timeout passes.
//!
//! **Copies.** A block leaves with its header from a small buffer and the block from where it
//! lies in the message (two iovecs). The first packet of a flush leaves at once with `sendmsg`,
//! so the receiver starts waking up (15–20 µs on a VM) while the next ones are checksummed;
//! those that follow — the rest of a multi-block message — are gathered and leave in one
//! `sendmmsg`. (Sending the whole message in one `sendmmsg` measured 0.05–0.1 worse against
//! UDP at 128–256 KiB: the receiver got its first block only when the batch was done.) A block arrives with one `recvmsg` whose iovecs are a
//! 20-byte header buffer, the region of the message buffer where the endpoint expects the next
//! block ([`Endpoint::recv_slot`]) and an overflow buffer: when the header confirms the
//! guess — the usual case, blocks arriving in order — the kernel's copy is the only one, and
//! the checksum is computed over the block where it lies. Any other datagram (control
//! packets, a block out of order) is copied out whole and handled as before.
//!
//! **ECN.** With [`Config::ecn`] (the default) the socket marks its datagrams ECT(0) in the IP
//! header. Whatever it sends, it asks for the TOS byte of each datagram it receives: one the
//! path marked CE ("congestion experienced", RFC 3168 §5) is handed to the endpoint as such,
//! which echoes it to the sender (CB = 3) and so halves the sender's congestion window. ECN is
//! not negotiated (the wire format has no field for it): a peer that does not echo hides the
//! marks its path makes.

#![allow(clippy::disallowed_methods)] // the driver reads the real clock

use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{
    recvmsg, sendmmsg, ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
};
use std::time::{Duration as StdDuration, Instant as Monotonic};

use thiserror::Error;
use viastack_kernel::{time::duration_nanos, Instant};

use crate::connection::{
    CloseReason, Config, Event, FailReason, Payload, Reliability, SendError, Stats,
};
use crate::endpoint::{self, ConnectionHandle, Endpoint, EndpointStats, TransmitRef};
use crate::wire::HEADER_LEN;

/// What a blocking call can fail with.
#[derive(Debug, Error)]
pub enum SpError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    /// The call's timeout passed.
    #[error("timed out")]
    Timeout,
    /// The peer refused the connection.
    #[error("connection refused by the peer (REJ)")]
    Rejected,
    /// The connection failed.
    #[error("connection failed: {0:?}")]
    Failed(FailReason),
    /// The connection is closed (or unknown).
    #[error("connection closed")]
    Closed,
    /// The message was refused.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The socket is dedicated to another peer (see [`SpSocket::dedicate`]).
    #[error("socket dedicated to {0}")]
    Dedicated(SocketAddr),
}

/// A message received on one of the socket's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The connection.
    pub handle: ConnectionHandle,
    /// Its peer.
    pub peer: SocketAddr,
    /// Message number.
    pub seq: u64,
    /// PRI it was sent with.
    pub priority: u8,
    /// The bytes.
    pub data: Vec<u8>,
}

/// A blocking SP endpoint bound to one UDP socket.
pub struct SpSocket {
    socket: UdpSocket,
    endpoint: Endpoint<SocketAddr>,
    epoch: Monotonic,
    /// The clock's last reading ([`SpSocket::now`]): a round reads it once after its
    /// receive and uses it for the datagram, the timers and the answers.
    last: Monotonic,
    /// A round returned early to hand over a message, before sending its answers (ACK): the
    /// next round sends them first.
    answers_due: bool,
    out: Vec<u8>,
    /// A whole datagram when no block is expected; the overflow beyond the lent region
    /// otherwise.
    inbuf: Vec<u8>,
    /// Packets gathered for one send: destination, header bytes in `out`, data block.
    batch: Vec<(SocketAddr, std::ops::Range<usize>, TransmitRef)>,
    /// The header of a datagram received in place.
    head: [u8; HEADER_LEN],
    /// A datagram received in place that was not the expected block, laid end to end.
    scratch: Vec<u8>,
    messages: VecDeque<Received>,
    notices: VecDeque<(ConnectionHandle, Event)>,
    read_timeout: Option<StdDuration>,
    busy_poll: StdDuration,
    /// The peer the OS socket is connected to ([`SpSocket::dedicate`]).
    dedicated: Option<SocketAddr>,
    /// Room for the TOS / traffic class control message of a received datagram (ECN).
    cmsg: Option<Vec<u8>>,
}

/// ECT(0) in the IP header's ECN field (RFC 3168 §5).
const ECT0: i32 = 0b10;
/// CE: the path experienced congestion.
const CE: u8 = 0b11;

/// Marks the socket's datagrams ECT(0) (IPv4 TOS or IPv6 traffic class).
fn mark_ect0(socket: &UdpSocket) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = match socket.local_addr() {
        Ok(SocketAddr::V4(_)) => setsockopt(socket, sockopt::Ipv4Tos, &ECT0),
        Ok(SocketAddr::V6(_)) => setsockopt(socket, sockopt::Ipv6TClass, &ECT0),
        Err(_) => Ok(()),
    };
}

/// Asks for each received datagram's TOS byte (traffic class for IPv6), so that CE marks
/// are seen and echoed whatever this side sends. False if the system refused.
fn read_tos(socket: &UdpSocket) -> bool {
    use nix::sys::socket::{setsockopt, sockopt};
    match socket.local_addr() {
        Ok(SocketAddr::V4(_)) => setsockopt(socket, sockopt::IpRecvTos, &true).is_ok(),
        Ok(SocketAddr::V6(_)) => setsockopt(socket, sockopt::Ipv6RecvTClass, &true).is_ok(),
        Err(_) => false,
    }
}

/// Socket buffer size asked for (4 MiB).
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Most packets per `sendmmsg`.
const SEND_BATCH: usize = 32;

/// Longest a blocking receive waits before timers are looked at again.
const POLL_QUANTUM: StdDuration = StdDuration::from_millis(5);

impl SpSocket {
    /// Binds a UDP socket; `accepting` lets peers open connections to it.
    ///
    /// # Errors
    /// The socket's.
    pub fn bind(addr: impl ToSocketAddrs, config: Config, accepting: bool) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        // Room for a burst of large blocks (a 256 KiB message is 8 datagrams of 32 KiB); the
        // kernel caps this at net.core.rmem_max / wmem_max.
        let s2 = socket2::SockRef::from(&socket);
        let _ = s2.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s2.set_send_buffer_size(SOCKET_BUFFER);
        if config.ecn {
            mark_ect0(&socket);
        }
        let cmsg = read_tos(&socket).then(|| nix::cmsg_space!(i32));
        Ok(SpSocket {
            socket,
            endpoint: Endpoint::new(config, accepting),
            epoch: Monotonic::now(),
            last: Monotonic::now(),
            answers_due: false,
            out: Vec::with_capacity(70_000),
            inbuf: vec![0; 65_536],
            head: [0; HEADER_LEN],
            batch: Vec::new(),
            scratch: Vec::new(),
            messages: VecDeque::new(),
            notices: VecDeque::new(),
            read_timeout: None,
            busy_poll: StdDuration::ZERO,
            dedicated: None,
            cmsg,
        })
    }

    /// The bound address.
    ///
    /// # Errors
    /// The socket's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Reads the clock (and remembers the reading in `last`).
    fn now(&mut self) -> Instant {
        self.last = Monotonic::now();
        self.since_epoch(self.last)
    }

    fn since_epoch(&self, t: Monotonic) -> Instant {
        Instant::from_nanos(duration_nanos(t.saturating_duration_since(self.epoch)))
    }

    /// The sans-IO endpoint underneath (for counters).
    pub fn endpoint(&self) -> &Endpoint<SocketAddr> {
        &self.endpoint
    }

    /// Bad datagrams and other endpoint counters.
    pub fn endpoint_stats(&self) -> &EndpointStats {
        self.endpoint.stats()
    }

    /// Counters and RTT of `h`.
    pub fn stats(&self, h: ConnectionHandle) -> Option<Stats> {
        self.endpoint.connection(h).map(|c| c.stats().clone())
    }

    /// Dedicates the socket to one peer, as a connected UDP socket is: the OS socket is
    /// connected to `peer`, so the kernel keeps its route instead of looking it up for every
    /// datagram sent, and drops datagrams from anyone else. Afterwards [`connect`](Self::connect)
    /// accepts no other peer. For a socket that talks to one peer only.
    ///
    /// # Errors
    /// [`SpError::Dedicated`] if it is dedicated to another peer already; the socket's.
    pub fn dedicate(&mut self, peer: SocketAddr) -> Result<(), SpError> {
        match self.dedicated {
            Some(p) if p == peer => return Ok(()),
            Some(p) => return Err(SpError::Dedicated(p)),
            None => {}
        }
        if let Some(h) = self
            .endpoint
            .handles()
            .find(|&h| self.endpoint.peer(h) != Some(&peer))
        {
            let other = self.endpoint.peer(h).copied();
            return Err(SpError::Dedicated(other.unwrap_or(peer)));
        }
        self.socket.connect(peer)?;
        self.dedicated = Some(peer);
        Ok(())
    }

    /// Opens a connection and waits until it is open.
    ///
    /// # Errors
    /// [`SpError::Rejected`], [`SpError::Failed`] (CONN timer), [`SpError::Timeout`],
    /// [`SpError::Dedicated`] for a peer other than the one the socket is dedicated to, IO.
    pub fn connect(
        &mut self,
        peer: SocketAddr,
        timeout: StdDuration,
    ) -> Result<ConnectionHandle, SpError> {
        if let Some(p) = self.dedicated.filter(|p| *p != peer) {
            return Err(SpError::Dedicated(p));
        }
        let now = self.now();
        let h = self.endpoint.connect(now, peer).ok_or(SpError::Closed)?;
        let deadline = Monotonic::now() + timeout;
        loop {
            self.flush_transmits()?;
            while let Some(i) = self.notices.iter().position(|(c, _)| *c == h) {
                match self.notices.remove(i).map(|n| n.1) {
                    Some(Event::Connected) => return Ok(h),
                    Some(Event::Rejected) => return Err(SpError::Rejected),
                    Some(Event::Failed { reason }) => return Err(SpError::Failed(reason)),
                    Some(Event::Closed { .. }) => return Err(SpError::Closed),
                    _ => {}
                }
            }
            self.step(Some(deadline))?;
            if Monotonic::now() >= deadline {
                return Err(SpError::Timeout);
            }
        }
    }

    /// Waits for a peer to open a connection.
    ///
    /// # Errors
    /// [`SpError::Timeout`], IO.
    pub fn accept(&mut self, timeout: Option<StdDuration>) -> Result<ConnectionHandle, SpError> {
        let deadline = timeout.map(|t| Monotonic::now() + t);
        self.flush_transmits()?;
        loop {
            if let Some(h) = self.endpoint.accept() {
                return Ok(h);
            }
            self.step(deadline)?;
            if deadline.is_some_and(|d| Monotonic::now() >= d) {
                return Err(SpError::Timeout);
            }
        }
    }

    /// Queues a message and sends what the window allows; does not wait for acknowledgement
    /// (see [`flush`](Self::flush)).
    ///
    /// # Errors
    /// [`SpError::Send`] if refused, [`SpError::Closed`] for an unknown connection, IO.
    pub fn send_message(
        &mut self,
        h: ConnectionHandle,
        data: impl Into<Payload>,
        priority: u8,
    ) -> Result<(), SpError> {
        self.endpoint
            .connection_mut(h)
            .ok_or(SpError::Closed)?
            .send_message(data, priority)?;
        self.flush_transmits()?;
        Ok(())
    }

    /// Waits until every message of `h` left and (RELIABLE ones) was acknowledged.
    ///
    /// # Errors
    /// [`SpError::Failed`] if the connection failed meanwhile, [`SpError::Timeout`], IO.
    pub fn flush(&mut self, h: ConnectionHandle, timeout: StdDuration) -> Result<(), SpError> {
        let deadline = Monotonic::now() + timeout;
        loop {
            self.flush_transmits()?;
            match self.endpoint.connection(h) {
                None => return Err(SpError::Closed),
                Some(c) if c.is_idle() => return Ok(()),
                Some(c) if c.is_closed() => return Err(self.failure_of(h)),
                Some(_) => {}
            }
            if Monotonic::now() >= deadline {
                return Err(SpError::Timeout);
            }
            self.step(Some(deadline))?;
        }
    }

    fn failure_of(&mut self, h: ConnectionHandle) -> SpError {
        for (c, e) in &self.notices {
            if *c == h {
                if let Event::Failed { reason } = e {
                    return SpError::Failed(*reason);
                }
            }
        }
        SpError::Closed
    }

    /// Waits for the next message on any connection.
    ///
    /// # Errors
    /// [`SpError::Timeout`], IO.
    pub fn recv_message(&mut self, timeout: Option<StdDuration>) -> Result<Received, SpError> {
        self.flush_transmits()?;
        let deadline = timeout.map(|t| Monotonic::now() + t);
        loop {
            if let Some(m) = self.messages.pop_front() {
                return Ok(m);
            }
            self.step(deadline)?;
            if self.messages.is_empty() && deadline.is_some_and(|d| self.last >= d) {
                return Err(SpError::Timeout);
            }
        }
    }

    /// Gives a received message's buffer back for reuse (optional).
    pub fn recycle(&mut self, m: Received) {
        self.endpoint.recycle(m.handle, m.data);
    }

    /// Non-message events (connected, closed, failed, dropped, RTT, …) seen so far.
    pub fn take_notices(&mut self) -> Vec<(ConnectionHandle, Event)> {
        self.notices.drain(..).collect()
    }

    /// Changes the reliability of `h` (CQOS exchange).
    ///
    /// # Errors
    /// [`SpError::Closed`] for an unknown connection, IO.
    pub fn set_reliability(
        &mut self,
        h: ConnectionHandle,
        mode: Reliability,
    ) -> Result<(), SpError> {
        let now = self.now();
        self.endpoint
            .connection_mut(h)
            .ok_or(SpError::Closed)?
            .set_reliability(now, mode);
        self.flush_transmits()?;
        Ok(())
    }

    /// Closes `h` gracefully and waits for the END exchange (or its timeout).
    ///
    /// # Errors
    /// [`SpError::Failed`] (e.g. END timer exhausted: closed anyway), [`SpError::Timeout`], IO.
    pub fn close(
        &mut self,
        h: ConnectionHandle,
        timeout: StdDuration,
    ) -> Result<CloseReason, SpError> {
        let now = self.now();
        self.endpoint
            .connection_mut(h)
            .ok_or(SpError::Closed)?
            .close(now);
        let deadline = Monotonic::now() + timeout;
        loop {
            self.flush_transmits()?;
            while let Some(i) = self.notices.iter().position(|(c, e)| {
                *c == h && matches!(e, Event::Closed { .. } | Event::Failed { .. })
            }) {
                match self.notices.remove(i).map(|n| n.1) {
                    Some(Event::Closed { reason }) => return Ok(reason),
                    Some(Event::Failed { reason }) => return Err(SpError::Failed(reason)),
                    _ => {}
                }
            }
            if Monotonic::now() >= deadline {
                return Err(SpError::Timeout);
            }
            self.step(Some(deadline))?;
        }
    }

    /// Runs the endpoint for `d` (answering peers, running timers).
    ///
    /// # Errors
    /// IO.
    pub fn run_for(&mut self, d: StdDuration) -> Result<(), SpError> {
        let deadline = Monotonic::now() + d;
        self.flush_transmits()?;
        while self.last < deadline {
            self.step(Some(deadline))?;
        }
        Ok(())
    }

    fn flush_transmits(&mut self) -> io::Result<()> {
        let now = self.now();
        self.flush_transmits_at(now)
    }

    /// [`flush_transmits`](Self::flush_transmits) with the clock already read.
    fn flush_transmits_at(&mut self, now: Instant) -> io::Result<()> {
        self.answers_due = false;
        // The first packet alone: the receiver's (slow) wake-up starts while the rest are
        // checksummed and sent, instead of after a whole batch.
        let mut max = 1;
        loop {
            self.out.clear();
            self.batch.clear();
            while self.batch.len() < max {
                let start = self.out.len();
                let Some((to, _, r)) = self.endpoint.poll_transmit_ref(now, &mut self.out) else {
                    break;
                };
                self.batch.push((to, start..self.out.len(), r));
            }
            if self.batch.is_empty() {
                return Ok(());
            }
            self.send_batch()?;
            max = SEND_BATCH;
        }
    }

    /// Sends the gathered packets: one `sendmsg`, or one `sendmmsg` for several (what it
    /// did not take goes one by one).
    fn send_batch(&mut self) -> io::Result<()> {
        let mut sent = 0;
        if self.batch.len() > 1 {
            let iovs: Vec<[io::IoSlice<'_>; 2]> = self
                .batch
                .iter()
                .map(|(_, head, r)| {
                    [
                        io::IoSlice::new(&self.out[head.clone()]),
                        io::IoSlice::new(self.endpoint.payload(r)),
                    ]
                })
                .collect();
            let addrs: Vec<Option<SockaddrStorage>> = self
                .batch
                .iter()
                // A connected socket sends without an address (and so uses its route).
                .map(|(to, ..)| match self.dedicated {
                    Some(p) if p == *to => None,
                    _ => Some(SockaddrStorage::from(*to)),
                })
                .collect();
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(iovs.len(), None);
            let no_cmsgs: [ControlMessage<'_>; 0] = [];
            sent = match sendmmsg(
                self.socket.as_raw_fd(),
                &mut headers,
                &iovs,
                &addrs,
                no_cmsgs,
                MsgFlags::empty(),
            ) {
                Ok(results) => results.count(),
                // Sent one by one below, where each error is judged.
                Err(_) => 0,
            };
        }
        let sock = socket2::SockRef::from(&self.socket);
        for (to, head, r) in &self.batch[sent..] {
            let parts = [
                io::IoSlice::new(&self.out[head.clone()]),
                io::IoSlice::new(self.endpoint.payload(r)),
            ];
            let r = match self.dedicated {
                Some(p) if p == *to => sock.send_vectored(&parts),
                _ => sock.send_to_vectored(&parts, &(*to).into()),
            };
            match r {
                Ok(_) => {}
                // A full buffer or an unreachable peer is a lost datagram: SP recovers.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.endpoint.poll_event() {
            match ev.event {
                Event::Message {
                    seq,
                    priority,
                    data,
                } => self.messages.push_back(Received {
                    handle: ev.handle,
                    peer: ev.peer,
                    seq,
                    priority,
                    data,
                }),
                other => self.notices.push_back((ev.handle, other)),
            }
        }
    }

    /// One round: wait for one datagram (or the next timer, or `deadline`), handle it, run
    /// due timers, and send what all that produced. A caller sends what its own command
    /// produced before its first round ([`flush_transmits`](Self::flush_transmits)); every
    /// round ends by sending — but one that completes a message returns at once, so that the
    /// application gets it before its ACK leaves, and the next round (or the application's
    /// next call) sends that ACK first. The clock is read once
    /// before the wait and once after the receive (the reading the datagram, the timers and
    /// the answers share): a 256 KiB message is five rounds, and each reading costs
    /// 30–60 ns on a VM.
    fn step(&mut self, deadline: Option<Monotonic>) -> io::Result<()> {
        if self.answers_due {
            self.flush_transmits()?;
        }
        let now = self.now();
        let mut wait = POLL_QUANTUM;
        if let Some(t) = self.endpoint.poll_timeout() {
            wait = wait.min(StdDuration::from_nanos(
                t.as_nanos().saturating_sub(now.as_nanos()),
            ));
        }
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(self.last));
        }
        let wait = wait.max(StdDuration::from_micros(50));
        // Rounded down to a few steps, so the socket option is rarely rewritten.
        let wait = viastack_kernel::time::wait_step(wait);
        if self.read_timeout != Some(wait) {
            self.socket.set_read_timeout(Some(wait))?;
            self.read_timeout = Some(wait);
        }
        let now = match self.receive_or_poll() {
            Ok(true) => {
                self.drain_events();
                if !self.messages.is_empty() {
                    // The application gets its message first; the answers (ACK) leave at the
                    // start of its next call, which a receiving loop makes at once.
                    self.answers_due = true;
                    return Ok(());
                }
                // The reading `receive` took for the datagram.
                self.since_epoch(self.last)
            }
            Ok(false) => self.now(),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::ConnectionRefused
                        | io::ErrorKind::Interrupted
                ) =>
            {
                self.now()
            }
            Err(e) => return Err(e),
        };
        if self.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            self.endpoint.handle_timeout(now);
        }
        self.drain_events();
        self.endpoint.reap();
        // Answers (ACKs, NACK repairs) and what the timers produced, before waiting again.
        self.flush_transmits_at(now)
    }

    /// Receives one datagram — waiting up to the socket's read timeout, or not at all with
    /// `MSG_DONTWAIT` — and hands it to the endpoint: in place when the endpoint expects a
    /// block (see the module documentation), else from `inbuf`. False when the datagram had
    /// no usable source.
    fn receive(&mut self, flags: MsgFlags) -> io::Result<bool> {
        let fd = self.socket.as_raw_fd();
        let cmsg = self.cmsg.as_mut();
        let Some((slot, region)) = self.endpoint.recv_slot() else {
            let (len, from, ce) = recv(fd, &mut [IoSliceMut::new(&mut self.inbuf)], cmsg, flags)?;
            let Some(from) = from else {
                return Ok(false);
            };
            let now = self.now();
            let n = len.min(self.inbuf.len());
            self.endpoint
                .handle_datagram_ecn(now, from, &self.inbuf[..n], ce);
            return Ok(true);
        };
        let mut iov = [
            IoSliceMut::new(&mut self.head),
            IoSliceMut::new(region),
            IoSliceMut::new(&mut self.inbuf),
        ];
        let (len, from, ce) = recv(fd, &mut iov, cmsg, flags)?;
        let Some(from) = from else {
            return Ok(false);
        };
        let now = self.now();
        let received = endpoint::Received {
            len,
            head: &self.head,
            slot,
            overflow: &self.inbuf,
            ce,
        };
        self.endpoint
            .handle_received(now, from, received, &mut self.scratch);
        Ok(true)
    }

    /// [`receive`](Self::receive), first polling without sleeping for up to the busy-poll
    /// time while a message is arriving (see [`set_busy_poll`](Self::set_busy_poll)).
    fn receive_or_poll(&mut self) -> io::Result<bool> {
        if !self.busy_poll.is_zero() && self.endpoint.mid_message() {
            let until = Monotonic::now() + self.busy_poll;
            loop {
                match self.receive(MsgFlags::MSG_DONTWAIT) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    other => return other,
                }
                if Monotonic::now() >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        self.receive(MsgFlags::empty())
    }

    /// How long a receive polls without sleeping while the peer is in the middle of a
    /// message, before it sleeps (default zero: never). The next block of a message is
    /// microseconds away, and on a virtual machine a sleeping thread takes 15–20 µs to wake;
    /// between messages the socket always sleeps. Off by default: on the 2-core VM of
    /// `bench sp` 50 µs removed the mid-message sleeps from traces but moved no transfer time
    /// measurably, and polling costs a core.
    pub fn set_busy_poll(&mut self, d: StdDuration) {
        self.busy_poll = d;
    }

    /// Sends what the connections have ready (ACKs, repairs) without waiting for anything.
    ///
    /// # Errors
    /// IO.
    pub fn poll(&mut self) -> Result<(), SpError> {
        self.flush_transmits()?;
        Ok(())
    }
}

fn to_socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

/// One `recvmsg` into `iov`: (bytes, source, whether the IP header was marked CE — read
/// from the control message when `cmsg` gives it room). A timeout or an empty non-blocking
/// socket is [`io::ErrorKind::WouldBlock`].
fn recv(
    fd: std::os::fd::RawFd,
    iov: &mut [IoSliceMut<'_>],
    cmsg: Option<&mut Vec<u8>>,
    flags: MsgFlags,
) -> io::Result<(usize, Option<SocketAddr>, bool)> {
    let cmsg = cmsg.map(|c| c.as_mut_slice());
    let msg = recvmsg::<SockaddrStorage>(fd, iov, cmsg, flags).map_err(|e| match e {
        Errno::EAGAIN => io::Error::from(io::ErrorKind::WouldBlock),
        e => io::Error::from(e),
    })?;
    let mut ce = false;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::Ipv4Tos(tos) => ce |= tos & CE == CE,
                ControlMessageOwned::Ipv6TClass(tc) => ce |= (tc as u8) & CE == CE,
                _ => {}
            }
        }
    }
    Ok((msg.bytes, msg.address.as_ref().and_then(to_socket_addr), ce))
}
