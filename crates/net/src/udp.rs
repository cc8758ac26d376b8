//! A UDP endpoint with batched IO: `recvmmsg`/`sendmmsg`-style batches and GRO through
//! `quinn-udp`, readiness and timeouts through `mio` (issue 3 §1 "UDP device").
//!
//! One endpoint per device port of a node. Received batches are split into datagrams (a GRO
//! buffer holds several of `stride` bytes each) and handed out with their source address.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use quinn_udp::{RecvMeta, Transmit, UdpSocketState, BATCH_SIZE};
use viastack_kernel::NodeId;

use crate::transport::{Transport, TransportStats};

/// Socket buffer size asked for, each way.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Largest datagram accepted (the UDP payload limit over IPv4).
pub const MAX_DATAGRAM: usize = 65_535;

/// Counters of one endpoint.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams handed to the kernel's socket.
    pub sent: u64,
    /// Datagrams the socket refused (buffer full) or failed to send.
    pub send_failed: u64,
    /// Datagrams received.
    pub received: u64,
}

/// A bound UDP socket with batched receive.
pub struct UdpEndpoint {
    socket: UdpSocket,
    state: UdpSocketState,
    poll: Poll,
    events: Events,
    bufs: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
    pub(crate) stats: UdpStats,
}

impl UdpEndpoint {
    /// Binds `addr` (port 0 for any).
    ///
    /// # Errors
    /// Socket errors from the operating system.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let std_socket = std::net::UdpSocket::bind(addr)?;
        // Room for bursts: a reliable window of large datagrams overruns the default ~200 KiB
        // and every overrun costs a retransmission. The kernel caps it at net.core.*mem_max.
        let sock = socket2::SockRef::from(&std_socket);
        let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
        let state = UdpSocketState::new((&std_socket).into())?;
        let mut socket = UdpSocket::from_std(std_socket);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut socket, Token(0), Interest::READABLE)?;
        Ok(UdpEndpoint {
            socket,
            state,
            poll,
            events: Events::with_capacity(4),
            // A GRO buffer coalesces segments up to the 64 KiB a UDP datagram may carry, so one
            // datagram's worth per buffer holds a whole coalesced batch too.
            bufs: (0..BATCH_SIZE).map(|_| vec![0u8; MAX_DATAGRAM]).collect(),
            meta: vec![RecvMeta::default(); BATCH_SIZE],
            stats: UdpStats::default(),
        })
    }

    /// The bound address.
    ///
    /// # Errors
    /// Socket errors from the operating system.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Counters so far.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// Sends one datagram; a full socket buffer drops it (counted), as a network would.
    pub fn send(&mut self, dest: SocketAddr, bytes: &[u8]) {
        let t = Transmit {
            destination: dest,
            ecn: None,
            contents: bytes,
            segment_size: None,
            src_ip: None,
        };
        match self.state.try_send((&self.socket).into(), &t) {
            Ok(()) => self.stats.sent += 1,
            Err(e) => {
                self.stats.send_failed += 1;
                tracing::debug!(%dest, error = %e, "datagram not sent");
            }
        }
    }

    /// Waits up to `timeout` for datagrams and passes each to `sink` (source, bytes).
    /// Returns how many were received.
    ///
    /// # Errors
    /// Socket errors other than "would block" and interruptions.
    pub fn recv(
        &mut self,
        timeout: Duration,
        mut sink: impl FnMut(SocketAddr, &[u8]),
    ) -> io::Result<usize> {
        let mut total = 0;
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) => return Err(e),
        }
        // Drain everything readable (the registration is edge-triggered).
        loop {
            let mut slices: Vec<IoSliceMut<'_>> =
                self.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let n = match self
                .state
                .recv((&self.socket).into(), &mut slices, &mut self.meta)
            {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            for (meta, buf) in self.meta.iter().zip(&self.bufs).take(n) {
                let len = meta.len.min(buf.len());
                let stride = if meta.stride == 0 { len } else { meta.stride };
                for datagram in buf[..len].chunks(stride.max(1)) {
                    total += 1;
                    sink(meta.addr, datagram);
                }
            }
        }
        self.stats.received += total as u64;
        Ok(total)
    }
}

/// The UDP transport of one node: an endpoint plus the peer table.
pub struct UdpTransport {
    endpoint: UdpEndpoint,
    peers: Vec<SocketAddr>,
    by_addr: HashMap<SocketAddr, NodeId>,
    unknown_source: u64,
}

impl UdpTransport {
    /// Binds `addr`.
    ///
    /// # Errors
    /// Socket errors.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Ok(UdpTransport {
            endpoint: UdpEndpoint::bind(addr)?,
            peers: Vec::new(),
            by_addr: HashMap::new(),
            unknown_source: 0,
        })
    }
}

impl Transport for UdpTransport {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    fn set_peers(&mut self, peers: Vec<SocketAddr>) {
        self.by_addr = peers
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, NodeId(i as u32)))
            .collect();
        self.peers = peers;
    }

    fn send(&mut self, dest: NodeId, bytes: &[u8]) {
        match self.peers.get(dest.0 as usize) {
            Some(addr) => self.endpoint.send(*addr, bytes),
            None => self.endpoint.stats.send_failed += 1,
        }
    }

    fn recv(
        &mut self,
        timeout: Duration,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> io::Result<usize> {
        let by_addr = &self.by_addr;
        let unknown = &mut self.unknown_source;
        self.endpoint
            .recv(timeout, |src, bytes| match by_addr.get(&src) {
                Some(node) => sink(*node, bytes),
                None => *unknown += 1,
            })
    }

    fn stats(&self) -> TransportStats {
        let s = self.endpoint.stats();
        TransportStats {
            sent: s.sent,
            send_failed: s.send_failed,
            received: s.received - self.unknown_source,
            bad_frames: self.unknown_source,
            connections: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_roundtrip_in_batches() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut a = UdpEndpoint::bind(any).unwrap();
        let mut b = UdpEndpoint::bind(any).unwrap();
        let b_addr = b.local_addr().unwrap();
        for i in 0..100u8 {
            a.send(b_addr, &[i; 32]);
        }
        let mut got = Vec::new();
        let from = a.local_addr().unwrap();
        while got.len() < 100 {
            let n = b
                .recv(Duration::from_secs(5), |src, bytes| {
                    assert_eq!(src, from);
                    got.push(bytes[0]);
                })
                .unwrap();
            assert!(n > 0, "timed out with {} of 100 datagrams", got.len());
        }
        assert_eq!(got, (0..100).collect::<Vec<u8>>(), "loopback keeps order");
        assert_eq!(a.stats().sent, 100);
        assert_eq!(b.stats().received, 100);
    }
}
