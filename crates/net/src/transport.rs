//! What the network driver needs from a transport: send a datagram to a node, wait for
//! datagrams from nodes. UDP ([`crate::udp`]) and TCP ([`crate::tcp`]) implement it; the
//! device layer above does not know which one carries its bytes.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use viastack_kernel::NodeId;

/// Wakes a transport blocked in [`Transport::recv`] from another thread (an application
/// handing the node a message). Cheap to call; a wake-up with nobody waiting makes the next
/// `recv` return at once, which is harmless.
pub type Waker = Box<dyn Fn() + Send + Sync>;

/// Counters of a transport.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransportStats {
    /// Datagrams handed to the operating system.
    pub sent: u64,
    /// Datagrams dropped on the way out (socket buffer full, peer unreachable).
    pub send_failed: u64,
    /// Datagrams received from known nodes.
    pub received: u64,
    /// Datagrams from addresses that are not a node of the run, or malformed frames.
    pub bad_frames: u64,
    /// Connections opened (TCP).
    pub connections: u64,
}

/// A node's transport.
pub trait Transport: Send {
    /// The address other nodes reach this one at.
    ///
    /// # Errors
    /// Socket errors.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Every node's address, in node order (known once every node has bound).
    fn set_peers(&mut self, peers: Vec<SocketAddr>);

    /// Sends one datagram to `dest`; failures are counted, not returned (a network drops).
    fn send(&mut self, dest: NodeId, bytes: &[u8]);

    /// Sends datagrams in order, as few system calls as the transport can (UDP: `sendmmsg`).
    fn send_batch(&mut self, batch: &[(NodeId, &[u8])]) {
        for (dest, bytes) in batch {
            self.send(*dest, bytes);
        }
    }

    /// Waits up to `timeout` and passes every datagram received to `sink`; returns how many.
    /// A zero `timeout` never blocks: it takes what is already there.
    ///
    /// # Errors
    /// Socket errors that are not transient.
    fn recv(&mut self, timeout: Duration, sink: &mut dyn FnMut(NodeId, &[u8]))
        -> io::Result<usize>;

    /// Counters so far.
    fn stats(&self) -> TransportStats;

    /// A descriptor (a duplicate, owned by the caller) that becomes readable when
    /// [`Transport::recv`] has something to take, for a driver that waits in an event loop of
    /// its own (tokio's `AsyncFd`) and then calls `recv` with a zero timeout until it
    /// returns 0.
    ///
    /// # Errors
    /// The descriptor could not be duplicated.
    fn readiness_fd(&self) -> io::Result<std::os::fd::OwnedFd>;

    /// A [`Waker`] that makes a `recv` in progress (or the next one) return early.
    ///
    /// # Errors
    /// Socket errors while setting it up.
    fn waker(&mut self) -> io::Result<Waker>;
}
