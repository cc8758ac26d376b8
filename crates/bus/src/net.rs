//! The bus on real sockets (the driver of [`crate::interp::Bus`]; seed 003 "The design": one
//! bus, tools connected over TCP or a Unix socket). The only place of the bus that reads the
//! clock or touches a socket.
//!
//! One thread — the caller's — owns the [`Bus`]: it polls the listener and every connection,
//! reads what arrived, cuts it into frames (a length above the limit is refused before the
//! body is buffered), feeds them to the bus with the current time, writes the bus's frames,
//! closes connections, launches tools, prints the trace, and returns when no script process is
//! left.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;

use viastack_kernel::Instant;

use crate::interp::{Bus, Output, ToolId};
use crate::wire::{frame_len, LEN_FIELD};

/// Where a bus (or a tool serving its values) listens: `host:port` or `unix:/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// TCP.
    Tcp(String),
    /// A Unix stream socket.
    Unix(PathBuf),
}

impl Endpoint {
    /// Parses `unix:/path` or `host:port`.
    pub fn parse(s: &str) -> Endpoint {
        match s.strip_prefix("unix:") {
            Some(p) => Endpoint::Unix(PathBuf::from(p)),
            None => Endpoint::Tcp(s.to_string()),
        }
    }

    /// Connects to it.
    ///
    /// # Errors
    /// The socket's error.
    pub fn connect(&self) -> io::Result<Stream> {
        match self {
            Endpoint::Tcp(a) => {
                let s = TcpStream::connect(a)?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Endpoint::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p)?)),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => f.write_str(a),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A connected stream, TCP or Unix.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix.
    Unix(UnixStream),
}

impl Stream {
    /// A second handle on the same connection.
    ///
    /// # Errors
    /// The OS's error.
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// The descriptor, for `poll`.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }

    /// Makes reads and writes return `WouldBlock` instead of waiting.
    ///
    /// # Errors
    /// The OS's error.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(true),
            Stream::Unix(s) => s.set_nonblocking(true),
        }
    }

    /// Shuts both directions down.
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// A bound listener, TCP or Unix.
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix (the path is removed when dropped).
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `ep` (a stale Unix socket file is replaced).
    ///
    /// # Errors
    /// The OS's error.
    pub fn bind(ep: &Endpoint) -> io::Result<Listener> {
        match ep {
            Endpoint::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(a)?)),
            Endpoint::Unix(p) => {
                let _ = std::fs::remove_file(p);
                Ok(Listener::Unix(UnixListener::bind(p)?, p.clone()))
            }
        }
    }

    /// The descriptor, for `poll`.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(l, _) => l.as_fd(),
        }
    }

    /// Where it listens, as tools should dial it.
    pub fn endpoint(&self) -> Endpoint {
        match self {
            Listener::Tcp(l) => Endpoint::Tcp(
                l.local_addr()
                    .map_or_else(|_| "?".to_string(), |a: SocketAddr| a.to_string()),
            ),
            Listener::Unix(_, p) => Endpoint::Unix(p.clone()),
        }
    }

    /// The next connection.
    ///
    /// # Errors
    /// The OS's error.
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }

    /// A second handle on the listener.
    ///
    /// # Errors
    /// The OS's error.
    pub fn try_clone(&self) -> io::Result<Listener> {
        Ok(match self {
            Listener::Tcp(l) => Listener::Tcp(l.try_clone()?),
            Listener::Unix(l, p) => Listener::Unix(l.try_clone()?, p.clone()),
        })
    }
}

/// Reads one whole frame (length field included), refusing a LEN above `max` before
/// allocating. `Ok(None)` at a clean end of stream.
///
/// # Errors
/// The socket's error, or `InvalidData` for a LEN of 0 or above `max`.
pub fn read_frame(r: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut head = [0u8; LEN_FIELD];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let total = frame_len(&head, max)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
        .unwrap_or(LEN_FIELD);
    let mut buf = vec![0u8; total];
    buf[..LEN_FIELD].copy_from_slice(&head);
    r.read_exact(&mut buf[LEN_FIELD..])?;
    Ok(Some(buf))
}

/// What `serve` prints, how it starts tools, how it secures connections and bounds writes.
pub struct ServeOptions {
    /// Where the trace's JSON lines go (when the bus was configured with `trace`).
    pub trace: Option<Box<dyn Write + Send>>,
    /// TLS on every accepted connection (`bus serve --tls-cert/--tls-key`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Bytes queued for one connection before it counts as a slow reader and is closed
    /// (default 4 × the largest frame: two large frames crossing do not trip it).
    pub max_queued_bytes: usize,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            trace: None,
            tls: None,
            max_queued_bytes: 4 * crate::wire::DEFAULT_MAX_FRAME,
        }
    }
}

/// The driver's clock: nanoseconds since `serve` started.
struct Clock(std::time::Instant);
impl Clock {
    #[allow(clippy::disallowed_methods)] // the driver owns the clock (DESIGN.md §6.1)
    fn start() -> Clock {
        Clock(std::time::Instant::now())
    }
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A tool's connection: the bytes of its next frame received so far, and the bytes queued
/// for it. The socket is non-blocking: the bus thread never waits on one slow reader.
struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    tls: Option<Box<rustls::ServerConnection>>,
    /// The bus closed it; it stays until its queue is written (TERMINATE, END).
    closing: bool,
}

impl Conn {
    fn queued(&self) -> usize {
        self.out.len() - self.out_pos
    }

    fn wants_write(&self) -> bool {
        self.queued() > 0 || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Writes what the socket takes now. `Err` when the connection is broken.
    fn pump(&mut self) -> io::Result<()> {
        loop {
            if let Some(tls) = self.tls.as_mut() {
                let mut fed = 0;
                if self.out_pos < self.out.len() {
                    fed = tls.writer().write(&self.out[self.out_pos..])?;
                    self.out_pos += fed;
                }
                if tls.wants_write() {
                    match tls.write_tls(&mut self.stream) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                } else if fed == 0 {
                    break;
                }
            } else {
                if self.out_pos >= self.out.len() {
                    break;
                }
                match self.stream.write(&self.out[self.out_pos..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => self.out_pos += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos > (1 << 20) && self.out_pos * 2 > self.out.len() {
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(())
    }

    /// Reads what arrived into `chunk` (plaintext). `Ok(None)`: nothing now; `Ok(Some(0))`:
    /// end of stream.
    fn read(&mut self, chunk: &mut [u8]) -> io::Result<Option<usize>> {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let Some(tls) = self.tls.as_mut() else {
            return match recv(
                self.stream.as_fd().as_raw_fd(),
                chunk,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(n) => Ok(Some(n)),
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => Ok(None),
                Err(e) => Err(e.into()),
            };
        };
        let mut eof = false;
        match tls.read_tls(&mut self.stream) {
            Ok(0) => eof = true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        tls.process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match tls.reader().read(chunk) {
            Ok(0) => Ok(Some(0)),
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if eof {
                    Ok(Some(0))
                } else {
                    Ok(None)
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// Runs `bus` on `listener` until no script process is left; returns the bus's counters.
///
/// # Errors
/// A failure of the listener or of `poll` itself (a tool's failures only close that tool's
/// connection).
pub fn serve(
    listener: Listener,
    mut bus: Bus,
    mut opts: ServeOptions,
) -> io::Result<crate::interp::Counters> {
    use nix::errno::Errno;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

    let clock = Clock::start();
    let endpoint = listener.endpoint();
    let max = bus.config().max_frame;
    let mut conns: std::collections::BTreeMap<ToolId, Conn> = Default::default();
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        flush(&mut bus, &mut conns, &endpoint, &mut opts, &clock);
        if bus.process_count() == 0 {
            break;
        }
        let now = clock.now();
        // A due timer (a lease, a delay) is handled after what already arrived is read, so
        // a PING waiting in a socket while the bus was busy still counts.
        let due = bus.poll_timeout(now).is_some_and(|at| at <= now);
        let timeout = match bus.poll_timeout(now) {
            Some(at) if at <= now => PollTimeout::ZERO,
            // Rounded up to the next millisecond (poll's resolution), so a due timer is due.
            Some(at) => {
                let ms = at
                    .as_nanos()
                    .saturating_sub(now.as_nanos())
                    .div_ceil(1_000_000);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        // One poll over the listener and every connection: frames are read and handled on
        // this thread, with no hand-off between threads; a connection with bytes queued is
        // polled for writing too.
        let ids: Vec<ToolId> = conns.keys().copied().collect();
        let (accept, ready): (bool, Vec<(bool, bool)>) = {
            let mut fds = Vec::with_capacity(ids.len() + 1);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            for id in &ids {
                if let Some(c) = conns.get(id) {
                    let mut flags = PollFlags::POLLIN;
                    if c.wants_write() {
                        flags |= PollFlags::POLLOUT;
                    }
                    fds.push(PollFd::new(c.stream.as_fd(), flags));
                }
            }
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let any = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let writable = |f: &PollFd| {
                f.revents()
                    .is_some_and(|r| r.intersects(PollFlags::POLLOUT | PollFlags::POLLERR))
            };
            let readable = |f: &PollFd| {
                f.revents().is_some_and(|r| {
                    r.intersects(
                        PollFlags::POLLIN
                            | PollFlags::POLLHUP
                            | PollFlags::POLLERR
                            | PollFlags::POLLNVAL,
                    )
                })
            };
            (
                fds.first().is_some_and(any),
                fds.iter()
                    .skip(1)
                    .map(|f| (readable(f), writable(f)))
                    .collect(),
            )
        };
        let now = clock.now();
        if accept {
            if let Ok(stream) = listener.accept() {
                let tls = match &opts.tls {
                    Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                        Ok(c) => Some(Box::new(c)),
                        Err(e) => {
                            tracing::warn!("tls: {e}");
                            None
                        }
                    },
                    None => None,
                };
                if (opts.tls.is_none() || tls.is_some()) && stream.set_nonblocking().is_ok() {
                    let id = bus.handle_connect(now);
                    conns.insert(
                        id,
                        Conn {
                            stream,
                            buf: Vec::new(),
                            out: Vec::new(),
                            out_pos: 0,
                            tls,
                            closing: false,
                        },
                    );
                }
            }
        }
        if !accept && ready.iter().all(|(r, w)| !r && !w) {
            bus.handle_timeout(now);
            continue;
        }
        for (&id, (r, w)) in ids.iter().zip(ready) {
            if w {
                let Some(c) = conns.get_mut(&id) else {
                    continue;
                };
                if c.pump().is_err() {
                    conns.remove(&id);
                    bus.handle_disconnect(now, id);
                    continue;
                }
                if c.closing && !c.wants_write() {
                    c.stream.shutdown();
                    conns.remove(&id);
                    continue;
                }
            }
            if let Some(c) = conns.get_mut(&id).filter(|c| c.closing) {
                // What a closing connection sends is dropped; its hang-up ends it.
                if r && matches!(c.read(&mut chunk), Ok(Some(0)) | Err(_)) {
                    conns.remove(&id);
                }
                continue;
            }
            if !r {
                continue;
            }
            let Some(c) = conns.get_mut(&id) else {
                continue;
            };
            match c.read(&mut chunk) {
                Ok(Some(0)) | Err(_) => {
                    conns.remove(&id);
                    bus.handle_disconnect(now, id);
                    continue;
                }
                Ok(Some(n)) => {
                    // A large frame's buffer is sized once from its LEN (no doubling).
                    if let Ok(Some(total)) = frame_len(&c.buf, max) {
                        c.buf.reserve_exact(total.saturating_sub(c.buf.len()));
                    }
                    c.buf.extend_from_slice(&chunk[..n]);
                    bus.handle_progress(now, id);
                }
                Ok(None) => {
                    // TLS handshake bytes may be due.
                    if c.pump().is_err() {
                        conns.remove(&id);
                        bus.handle_disconnect(now, id);
                    }
                    continue;
                }
            }
            if c.tls.is_some() && c.pump().is_err() {
                conns.remove(&id);
                bus.handle_disconnect(now, id);
                continue;
            }
            loop {
                match frame_len(&c.buf, max) {
                    Ok(Some(total)) if c.buf.len() >= total => {
                        let frame = if c.buf.len() == total {
                            std::mem::take(&mut c.buf)
                        } else {
                            let rest = c.buf.split_off(total);
                            std::mem::replace(&mut c.buf, rest)
                        };
                        if let Err(e) = bus.handle_bytes(now, id, &frame) {
                            tracing::warn!(tool = id, "bad frame: {e}");
                            c.buf.clear();
                            break;
                        }
                    }
                    Ok(_) => break,
                    Err(e) => {
                        // LEN 0 or above the limit: refused before buffering the body.
                        tracing::warn!(tool = id, "bad frame: {e}");
                        let head: Vec<u8> = c.buf.iter().copied().take(LEN_FIELD).collect();
                        let _ = bus.handle_bytes(now, id, &head);
                        c.buf.clear();
                        break;
                    }
                }
            }
        }
        if due {
            bus.handle_timeout(clock.now());
        }
    }
    flush(&mut bus, &mut conns, &endpoint, &mut opts, &clock);
    // What is still queued goes out before the connections close (bounded: a reader that
    // takes nothing for a lease is left behind).
    linger(&mut conns, &clock, bus.config().lease);
    for c in conns.values() {
        c.stream.shutdown();
    }
    Ok(bus.counters())
}

/// Drains the queues of connections whose bytes are still on their way (the last frames of a
/// run, such as TERMINATE), for at most `limit`.
fn linger(
    conns: &mut std::collections::BTreeMap<ToolId, Conn>,
    clock: &Clock,
    limit: std::time::Duration,
) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = clock.now().saturating_add(limit);
    loop {
        conns.retain(|_, c| c.pump().is_ok() && c.wants_write());
        if conns.is_empty() || clock.now() >= until {
            return;
        }
        let mut fds: Vec<PollFd> = conns
            .values()
            .map(|c| PollFd::new(c.stream.as_fd(), PollFlags::POLLOUT))
            .collect();
        if poll(&mut fds, PollTimeout::from(100u8)).is_err() {
            return;
        }
    }
}

fn flush(
    bus: &mut Bus,
    conns: &mut std::collections::BTreeMap<ToolId, Conn>,
    endpoint: &Endpoint,
    opts: &mut ServeOptions,
    clock: &Clock,
) {
    loop {
        let mut slow = Vec::new();
        while let Some(o) = bus.poll_output() {
            match o {
                Output::Send { tool, frame } => {
                    if let Some(c) = conns.get_mut(&tool) {
                        frame.emit(&mut c.out);
                        // Written now as far as the socket takes it; the rest waits in the
                        // queue, bounded.
                        if c.pump().is_err() || c.queued() > opts.max_queued_bytes {
                            slow.push(tool);
                            c.stream.shutdown();
                            conns.remove(&tool);
                        }
                    }
                }
                Output::Close { tool } => {
                    // Its last frames (TERMINATE, END) go out first: the connection stays
                    // until its queue is written.
                    if let Some(c) = conns.get_mut(&tool) {
                        if c.pump().is_ok() && c.wants_write() {
                            c.closing = true;
                        } else if let Some(c) = conns.remove(&tool) {
                            c.stream.shutdown();
                        }
                    }
                }
                Output::Launch { tool, command } => {
                    let spawned = std::process::Command::new("sh")
                        .arg("-c")
                        .arg(&command)
                        .env("VIASTACK_BUS", endpoint.to_string())
                        .env("VIASTACK_TOOL", &tool)
                        .spawn();
                    if let Err(e) = spawned {
                        tracing::warn!(tool, command, "cannot launch: {e}");
                    }
                }
            }
        }
        if slow.is_empty() {
            break;
        }
        let now = clock.now();
        for tool in slow {
            bus.handle_slow_reader(now, tool);
        }
    }
    if let Some(w) = opts.trace.as_mut() {
        while let Some(line) = bus.poll_trace() {
            let _ = writeln!(w, "{line}");
        }
        let _ = w.flush();
    }
}

/// TLS for the bus's TCP connections (issue 19 §3): the server's configuration from a PEM
/// certificate chain and key (`bus serve --tls-cert/--tls-key`).
///
/// # Errors
/// A file that cannot be read or parsed, or a key that does not fit the certificate.
pub fn tls_server_config(
    cert_pem: &std::path::Path,
    key_pem: &std::path::Path,
) -> io::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &std::path::Path, e: rustls::pki_types::pem::Error| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", what.display()),
        )
    };
    let certs = CertificateDer::pem_file_iter(cert_pem)
        .map_err(|e| bad(cert_pem, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(cert_pem, e))?;
    let key = PrivateKeyDer::from_pem_file(key_pem).map_err(|e| bad(key_pem, e))?;
    if let PrivateKeyDer::Pkcs8(k) = &key {
        if ec_pkcs8_without_public_key(k.secret_pkcs8_der()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                TlsKeyError::EcKeyWithoutPublicKey {
                    path: key_pem.display().to_string(),
                },
            ));
        }
    }
    tls_server_config_der(certs, key)
}

/// Why a TLS key file cannot serve (inside the `io::Error` of [`tls_server_config`]; find it
/// with `get_ref()` and `downcast_ref`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsKeyError {
    /// An EC key in PKCS#8 whose inner SEC1 structure leaves out the public key — what the
    /// JDK (`keytool`, `Key.getEncoded()`) writes. rustls's `ring` provider reads an EC key
    /// only with its public key inside, and computing it needs curve arithmetic the bus does
    /// not carry; `openssl ec` rewrites the key with it.
    #[error(
        "{path}: an EC private key without its public key (the encoding of the JDK's keytool), \
         which rustls (ring) cannot load: rewrite it with `openssl ec -in {path} -out {path}` \
         (SEC1 with the public key), or make the key with -keyalg RSA"
    )]
    EcKeyWithoutPublicKey {
        /// The key file.
        path: String,
    },
}

/// One DER element at the start of `b`: (tag, contents, rest).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        b = &b[n..];
        len
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// Whether `pkcs8` is an EC key (id-ecPublicKey) whose ECPrivateKey has no `[1] publicKey`.
fn ec_pkcs8_without_public_key(pkcs8: &[u8]) -> bool {
    const ID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    let check = || -> Option<bool> {
        let (0x30, info, _) = der(pkcs8)? else {
            return None;
        };
        let (0x02, _version, rest) = der(info)? else {
            return None;
        };
        let (0x30, alg, rest) = der(rest)? else {
            return None;
        };
        let (0x06, oid, _) = der(alg)? else {
            return None;
        };
        if oid != ID_EC_PUBLIC_KEY {
            return Some(false);
        }
        let (0x04, inner, _) = der(rest)? else {
            return None;
        };
        let (0x30, mut ec, _) = der(inner)? else {
            return None;
        };
        while !ec.is_empty() {
            let (tag, _, rest) = der(ec)?;
            if tag == 0xa1 {
                return Some(false);
            }
            ec = rest;
        }
        Some(true)
    };
    check().unwrap_or(false)
}

/// The server's TLS configuration from DER certificates and key.
///
/// # Errors
/// A key that does not fit the certificate.
pub fn tls_server_config_der(
    certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> io::Result<Arc<rustls::ServerConfig>> {
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(io::Error::other)?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Arc::new(cfg))
}

/// How a tool reaches a bus over TLS: the roots it trusts and the name the bus's
/// certificate must carry.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// rustls's client configuration.
    pub config: Arc<rustls::ClientConfig>,
    /// The name checked against the certificate (a DNS name or an IP address).
    pub server_name: rustls::pki_types::ServerName<'static>,
}

impl TlsClient {
    /// Trusts the PEM certificates in `ca_pem` (a CA, or the bus's own self-signed
    /// certificate) and checks the bus's certificate against `server_name`.
    ///
    /// # Errors
    /// A file that cannot be read or parsed, or an invalid name.
    pub fn from_pem(ca_pem: &std::path::Path, server_name: &str) -> io::Result<TlsClient> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let certs = CertificateDer::pem_file_iter(ca_pem)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        TlsClient::from_der(certs, server_name)
    }

    /// Trusts the DER certificates `roots`.
    ///
    /// # Errors
    /// A certificate rustls does not accept as a root, or an invalid name.
    pub fn from_der(
        roots: Vec<rustls::pki_types::CertificateDer<'static>>,
        server_name: &str,
    ) -> io::Result<TlsClient> {
        let mut store = rustls::RootCertStore::empty();
        for c in roots {
            store
                .add(c)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(store)
        .with_no_client_auth();
        let server_name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
        })
    }

    /// Connects to `addr` (TCP), completes the handshake (verifying the bus's certificate),
    /// and returns a plain stream whose bytes a thread carries over the TLS session — so the
    /// tool's reader and writer halves work as on a plain socket.
    ///
    /// # Errors
    /// The socket's error, or the handshake's (an untrusted certificate, a wrong name).
    pub fn connect(&self, addr: &str) -> io::Result<Stream> {
        let mut tcp = TcpStream::connect(addr)?;
        tcp.set_nodelay(true)?;
        let mut conn = rustls::ClientConnection::new(self.config.clone(), self.server_name.clone())
            .map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        let (app, inner) = UnixStream::pair()?;
        std::thread::spawn(move || {
            let _ = tls_shuttle(conn, tcp, inner);
        });
        Ok(Stream::Unix(app))
    }
}

/// Carries bytes between the tool's end of a socket pair and the TLS session until either
/// side ends.
fn tls_shuttle(
    mut conn: rustls::ClientConnection,
    mut tcp: TcpStream,
    mut app: UnixStream,
) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    tcp.set_nonblocking(true)?;
    app.set_nonblocking(true)?;
    let would_block = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        )
    };
    let mut to_app: Vec<u8> = Vec::new();
    let mut to_app_pos = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let mut app_open = true;
    loop {
        let (tcp_ready, app_ready) = {
            let mut tf = PollFlags::empty();
            if to_app.len() - to_app_pos < (1 << 20) {
                tf |= PollFlags::POLLIN;
            }
            if conn.wants_write() {
                tf |= PollFlags::POLLOUT;
            }
            let mut af = PollFlags::empty();
            if app_open && !conn.wants_write() {
                af |= PollFlags::POLLIN;
            }
            if to_app_pos < to_app.len() {
                af |= PollFlags::POLLOUT;
            }
            let mut fds = [
                PollFd::new(std::os::fd::AsFd::as_fd(&tcp), tf),
                PollFd::new(std::os::fd::AsFd::as_fd(&app), af),
            ];
            poll(&mut fds, PollTimeout::NONE).map_err(io::Error::from)?;
            (
                fds[0].revents().unwrap_or(PollFlags::empty()),
                fds[1].revents().unwrap_or(PollFlags::empty()),
            )
        };
        if !tcp_ready.is_empty() {
            if tcp_ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                match conn.read_tls(&mut tcp) {
                    Ok(0) => {
                        // The bus closed: deliver what is left, then end the tool's side.
                        let _ = app.set_nonblocking(false);
                        let _ = app.write_all(&to_app[to_app_pos..]);
                        let _ = app.shutdown(Shutdown::Both);
                        return Ok(());
                    }
                    Ok(_) => {}
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(e),
                }
                conn.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                loop {
                    match conn.reader().read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => to_app.extend_from_slice(&buf[..n]),
                        Err(e) if would_block(&e) => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            while conn.wants_write() {
                match conn.write_tls(&mut tcp) {
                    Ok(_) => {}
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        while to_app_pos < to_app.len() {
            match app.write(&to_app[to_app_pos..]) {
                Ok(n) => to_app_pos += n,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        if to_app_pos == to_app.len() {
            to_app.clear();
            to_app_pos = 0;
        }
        if app_ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) && app_open {
            match app.read(&mut buf) {
                Ok(0) => {
                    app_open = false;
                    conn.send_close_notify();
                }
                Ok(n) => conn.writer().write_all(&buf[..n])?,
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
            while conn.wants_write() {
                match conn.write_tls(&mut tcp) {
                    Ok(_) => {}
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            if !app_open && !conn.wants_write() {
                let _ = tcp.shutdown(Shutdown::Write);
            }
        }
        if !app_open
            && !conn.wants_write()
            && to_app.is_empty()
            && tcp_ready.contains(PollFlags::POLLHUP)
        {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_probe_reads_any_prefix_without_panicking() {
        // The JDK's P-256 PKCS#8 key (no public key), then one with `[1] publicKey` appended.
        let jdk = decode(
            "3041020100301306072a8648ce3d020106082a8648ce3d030107042730250201010420\
                          0000000000000000000000000000000000000000000000000000000000000001",
        );
        assert!(ec_pkcs8_without_public_key(&jdk));
        for n in 0..jdk.len() {
            assert!(!ec_pkcs8_without_public_key(&jdk[..n]));
        }
        let with_pub = decode("3049020100301306072a8648ce3d020106082a8648ce3d030107042f302d0201010420\
                               0000000000000000000000000000000000000000000000000000000000000001a106030400000000");
        assert!(!ec_pkcs8_without_public_key(&with_pub));
    }

    fn decode(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
            .collect()
    }
}
