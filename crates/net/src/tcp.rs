//! A TCP transport for the device layer (issue 3 §1 "TCP device"): length-prefixed frames over
//! one outgoing connection per peer, reconnecting when a connection fails.
//!
//! Each node listens on one address. To send to a peer it connects (non-blocking) to the
//! peer's listening address, introduces itself with a hello frame, then writes data frames;
//! it receives on the connections peers opened to it. So each direction of a pair has its own
//! connection, and no connection needs to be matched with another.
//!
//! Frames (network byte order): `length: u32` then `length` bytes. The first frame on a
//! connection is the hello: the 4 bytes `VSTK` and the sender's node id (u32). A frame longer
//! than [`MAX_FRAME`], or a first frame that is not a hello, closes the connection (counted).
//!
//! A datagram to a peer that cannot be reached, or whose send buffer already holds
//! [`MAX_BUFFERED`] bytes, is dropped and counted, as a network would drop it: reliability is
//! the stack's job. A failed connection is retried on the next send, at most every
//! [`RECONNECT_BACKOFF`].

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use viastack_kernel::NodeId;

use crate::transport::{Transport, TransportStats, Waker};

/// Largest frame accepted.
pub const MAX_FRAME: usize = 16 << 20;
/// Bytes that may wait in one connection's send buffer.
pub const MAX_BUFFERED: usize = 64 << 20;
/// Shortest time between two connection attempts to one peer.
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

const HELLO_MAGIC: &[u8; 4] = b"VSTK";
const LISTENER: Token = Token(0);
/// The token of the [`mio::Waker`] handed out by [`Transport::waker`].
const WAKE: Token = Token(usize::MAX);

struct Conn {
    stream: TcpStream,
    /// Outgoing: the peer we connected to. Incoming: the peer, once its hello arrived.
    peer: Option<NodeId>,
    outgoing: bool,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    written: usize,
}

impl Conn {
    /// Writes as much of the send buffer as the socket takes.
    fn flush(&mut self) -> io::Result<()> {
        while self.written < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.written == self.wbuf.len() {
            self.wbuf.clear();
            self.written = 0;
        } else if self.written > (1 << 20) {
            self.wbuf.drain(..self.written);
            self.written = 0;
        }
        Ok(())
    }

    fn queue_frame(&mut self, bytes: &[u8]) {
        self.wbuf
            .extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        self.wbuf.extend_from_slice(bytes);
    }

    fn buffered(&self) -> usize {
        self.wbuf.len() - self.written
    }
}

/// The TCP transport of one node.
pub struct TcpTransport {
    me: NodeId,
    listener: TcpListener,
    poll: Poll,
    events: Events,
    conns: HashMap<Token, Conn>,
    outgoing: HashMap<NodeId, Token>,
    last_attempt: HashMap<NodeId, std::time::Instant>,
    peers: Vec<SocketAddr>,
    next_token: usize,
    stats: TransportStats,
    waker: Option<std::sync::Arc<mio::Waker>>,
}

impl TcpTransport {
    /// Listens on `addr` as node `me`.
    ///
    /// # Errors
    /// Socket errors.
    pub fn bind(me: NodeId, addr: SocketAddr) -> io::Result<Self> {
        let mut listener = TcpListener::bind(addr)?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(TcpTransport {
            me,
            listener,
            poll,
            events: Events::with_capacity(64),
            conns: HashMap::new(),
            outgoing: HashMap::new(),
            last_attempt: HashMap::new(),
            peers: Vec::new(),
            next_token: 1,
            stats: TransportStats::default(),
            waker: None,
        })
    }

    fn token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        t
    }

    #[allow(clippy::disallowed_methods)] // the driver reads the clock for reconnect back-off
    fn connect(&mut self, peer: NodeId) -> Option<Token> {
        let addr = *self.peers.get(peer.0 as usize)?;
        let now = std::time::Instant::now();
        if let Some(last) = self.last_attempt.get(&peer) {
            if now.duration_since(*last) < RECONNECT_BACKOFF {
                return None;
            }
        }
        self.last_attempt.insert(peer, now);
        let mut stream = match TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "connect failed");
                return None;
            }
        };
        let _ = stream.set_nodelay(true);
        let token = self.token();
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut stream, token, interest)
            .is_err()
        {
            return None;
        }
        let mut conn = Conn {
            stream,
            peer: Some(peer),
            outgoing: true,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            written: 0,
        };
        let mut hello = HELLO_MAGIC.to_vec();
        hello.extend_from_slice(&self.me.0.to_be_bytes());
        conn.queue_frame(&hello);
        self.conns.insert(token, conn);
        self.outgoing.insert(peer, token);
        self.stats.connections += 1;
        Some(token)
    }

    fn close(&mut self, token: Token, why: &str) {
        if let Some(mut c) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if c.outgoing {
                if let Some(p) = c.peer {
                    self.outgoing.remove(&p);
                }
            }
            tracing::debug!(peer = ?c.peer, why, "connection closed");
        }
    }

    /// Reads what the connection has; passes complete data frames to `sink`. Returns false
    /// when the connection must be closed.
    fn read(&mut self, token: Token, sink: &mut dyn FnMut(NodeId, &[u8])) -> bool {
        let Some(c) = self.conns.get_mut(&token) else {
            return true;
        };
        let mut buf = [0u8; 64 * 1024];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => c.rbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let mut at = 0;
        let mut ok = true;
        while let Some(len_bytes) = c.rbuf.get(at..at + 4) {
            let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]])
                as usize;
            if len > MAX_FRAME {
                self.stats.bad_frames += 1;
                ok = false;
                break;
            }
            let Some(frame) = c.rbuf.get(at + 4..at + 4 + len) else {
                break;
            };
            at += 4 + len;
            match c.peer {
                Some(peer) if !c.outgoing => {
                    self.stats.received += 1;
                    sink(peer, frame);
                }
                Some(_) => self.stats.bad_frames += 1, // peers do not write back on our connection
                None => match frame {
                    [m0, m1, m2, m3, a, b, cc, d] if [*m0, *m1, *m2, *m3] == *HELLO_MAGIC => {
                        c.peer = Some(NodeId(u32::from_be_bytes([*a, *b, *cc, *d])));
                    }
                    _ => {
                        self.stats.bad_frames += 1;
                        ok = false;
                        break;
                    }
                },
            }
        }
        c.rbuf.drain(..at.min(c.rbuf.len()));
        ok
    }
}

impl Transport for TcpTransport {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    fn set_peers(&mut self, peers: Vec<SocketAddr>) {
        self.peers = peers;
    }

    fn send(&mut self, dest: NodeId, bytes: &[u8]) {
        if bytes.len() > MAX_FRAME {
            self.stats.send_failed += 1;
            return;
        }
        let token = match self.outgoing.get(&dest) {
            Some(t) => *t,
            None => match self.connect(dest) {
                Some(t) => t,
                None => {
                    self.stats.send_failed += 1;
                    return;
                }
            },
        };
        let Some(c) = self.conns.get_mut(&token) else {
            self.stats.send_failed += 1;
            return;
        };
        if c.buffered() + bytes.len() > MAX_BUFFERED {
            self.stats.send_failed += 1;
            return;
        }
        c.queue_frame(bytes);
        self.stats.sent += 1;
        if c.flush().is_err() {
            self.close(token, "write failed");
        }
    }

    fn waker(&mut self) -> io::Result<Waker> {
        // mio allows one waker per poll: every handle shares it.
        let waker = match &self.waker {
            Some(w) => std::sync::Arc::clone(w),
            None => {
                let w = std::sync::Arc::new(mio::Waker::new(self.poll.registry(), WAKE)?);
                self.waker = Some(std::sync::Arc::clone(&w));
                w
            }
        };
        Ok(Box::new(move || {
            if let Err(e) = waker.wake() {
                tracing::debug!(error = %e, "tcp transport wake-up");
            }
        }))
    }

    fn recv(
        &mut self,
        timeout: Duration,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> io::Result<usize> {
        let before = self.stats.received;
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) => return Err(e),
        }
        let ready: Vec<(Token, bool, bool)> = self
            .events
            .iter()
            .map(|e| {
                (
                    e.token(),
                    e.is_readable() || e.is_read_closed(),
                    e.is_writable(),
                )
            })
            .collect();
        for (token, readable, writable) in ready {
            if token == WAKE {
                continue;
            }
            if token == LISTENER {
                loop {
                    match self.listener.accept() {
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nodelay(true);
                            let t = self.token();
                            if self
                                .poll
                                .registry()
                                .register(&mut stream, t, Interest::READABLE)
                                .is_ok()
                            {
                                self.conns.insert(
                                    t,
                                    Conn {
                                        stream,
                                        peer: None,
                                        outgoing: false,
                                        rbuf: Vec::new(),
                                        wbuf: Vec::new(),
                                        written: 0,
                                    },
                                );
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            if writable {
                let failed = self
                    .conns
                    .get_mut(&token)
                    .is_some_and(|c| c.flush().is_err());
                if failed {
                    self.close(token, "write failed");
                    continue;
                }
            }
            if readable && !self.read(token, sink) {
                self.close(token, "closed by peer or bad frame");
            }
        }
        let _ = self.me;
        Ok((self.stats.received - before) as usize)
    }

    /// The `epoll` descriptor of the transport's `mio::Poll`: readable when any connection,
    /// the listener or the waker has an event.
    #[allow(unsafe_code)]
    fn readiness_fd(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: the descriptor is the `Poll`'s own epoll instance, open for as long as
        // `self` lives, which outlasts this borrow; it is duplicated before being handed out.
        // (mio's `Poll` offers `AsRawFd` only, not `AsFd`.)
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.poll.as_raw_fd()) };
        fd.try_clone_to_owned()
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (TcpTransport, TcpTransport) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut a = TcpTransport::bind(NodeId(0), any).unwrap();
        let mut b = TcpTransport::bind(NodeId(1), any).unwrap();
        let peers = vec![a.local_addr().unwrap(), b.local_addr().unwrap()];
        a.set_peers(peers.clone());
        b.set_peers(peers);
        (a, b)
    }

    /// Polls both ends until `b` has received `want` frames (bounded).
    fn pump(a: &mut TcpTransport, b: &mut TcpTransport, want: usize) -> Vec<(NodeId, Vec<u8>)> {
        let mut got = Vec::new();
        for _ in 0..200 {
            a.recv(Duration::from_millis(1), &mut |_, _| {}).unwrap();
            b.recv(Duration::from_millis(10), &mut |from, bytes| {
                got.push((from, bytes.to_vec()))
            })
            .unwrap();
            if got.len() >= want {
                break;
            }
        }
        got
    }

    #[test]
    fn frames_arrive_whole_in_order_from_the_named_peer() {
        let (mut a, mut b) = pair();
        let sizes = [0usize, 1, 1500, 70_000, 3];
        for (i, n) in sizes.iter().enumerate() {
            a.send(NodeId(1), &vec![i as u8; *n]);
        }
        let got = pump(&mut a, &mut b, sizes.len());
        let lens: Vec<usize> = got.iter().map(|(_, b)| b.len()).collect();
        assert_eq!(lens, sizes);
        assert!(got.iter().all(|(from, _)| *from == NodeId(0)));
        assert!(got[3].1.iter().all(|&x| x == 3));
        assert_eq!(
            a.stats().connections,
            1,
            "one connection carries every frame"
        );
    }

    #[test]
    fn a_connection_without_hello_or_with_a_huge_frame_is_closed() {
        let (_a, mut b) = pair();
        let addr = b.local_addr().unwrap();
        for bad in [
            [0u8, 0, 0, 8, b'N', b'O', b'P', b'E', 0, 0, 0, 1].to_vec(),
            [0xffu8, 0xff, 0xff, 0xff].to_vec(),
        ] {
            let mut raw = std::net::TcpStream::connect(addr).unwrap();
            raw.write_all(&bad).unwrap();
            let before = b.stats().bad_frames;
            for _ in 0..100 {
                b.recv(Duration::from_millis(10), &mut |_, _| {
                    panic!("nothing is delivered")
                })
                .unwrap();
                if b.stats().bad_frames > before {
                    break;
                }
            }
            assert_eq!(b.stats().bad_frames, before + 1);
        }
    }

    #[test]
    fn a_peer_that_comes_back_is_reconnected() {
        let (mut a, b) = pair();
        let addr = b.local_addr().unwrap();
        let mut b = b;
        a.send(NodeId(1), b"one");
        assert_eq!(pump(&mut a, &mut b, 1).len(), 1);
        drop(b); // the peer goes away
        let mut b = TcpTransport::bind(NodeId(1), addr).unwrap();
        b.set_peers(vec![a.local_addr().unwrap(), addr]);
        // Keep sending until a frame makes it through a new connection (the first writes may
        // go into the dead one before the failure is noticed, and reconnects are spaced).
        let mut got = Vec::new();
        for i in 0..400u32 {
            a.send(NodeId(1), &i.to_be_bytes());
            a.recv(Duration::from_millis(1), &mut |_, _| {}).unwrap();
            b.recv(Duration::from_millis(5), &mut |_, bytes| {
                got.push(bytes.to_vec())
            })
            .unwrap();
            if !got.is_empty() {
                break;
            }
        }
        assert!(!got.is_empty(), "never reconnected");
        assert!(a.stats().connections >= 2, "{:?}", a.stats());
    }
}
