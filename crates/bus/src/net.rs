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

/// What `serve` prints and how it starts tools.
#[derive(Default)]
pub struct ServeOptions {
    /// Where the trace's JSON lines go (when the bus was configured with `trace`).
    pub trace: Option<Box<dyn Write + Send>>,
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

/// A tool's connection and the bytes of its next frame received so far.
struct Conn {
    stream: Stream,
    buf: Vec<u8>,
}

/// Runs `bus` on `listener` until no script process is left.
///
/// # Errors
/// A failure of the listener or of `poll` itself (a tool's failures only close that tool's
/// connection).
pub fn serve(listener: Listener, mut bus: Bus, mut opts: ServeOptions) -> io::Result<()> {
    use nix::errno::Errno;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;

    let clock = Clock::start();
    let endpoint = listener.endpoint();
    let max = bus.config().max_frame;
    let mut conns: std::collections::BTreeMap<ToolId, Conn> = Default::default();
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        flush(&mut bus, &mut conns, &endpoint, &mut opts);
        if bus.process_count() == 0 {
            break;
        }
        let now = clock.now();
        let timeout = match bus.poll_timeout(now) {
            Some(at) if at <= now => {
                bus.handle_timeout(now);
                continue;
            }
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
        // this thread, with no hand-off between threads.
        let ids: Vec<ToolId> = conns.keys().copied().collect();
        let (accept, ready): (bool, Vec<bool>) = {
            let mut fds = Vec::with_capacity(ids.len() + 1);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            for id in &ids {
                if let Some(c) = conns.get(id) {
                    fds.push(PollFd::new(c.stream.as_fd(), PollFlags::POLLIN));
                }
            }
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let any = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (
                fds.first().is_some_and(any),
                fds.iter().skip(1).map(any).collect(),
            )
        };
        let now = clock.now();
        if accept {
            if let Ok(stream) = listener.accept() {
                let id = bus.handle_connect(now);
                conns.insert(
                    id,
                    Conn {
                        stream,
                        buf: Vec::new(),
                    },
                );
            }
        }
        if !accept && ready.iter().all(|r| !r) {
            bus.handle_timeout(now);
            continue;
        }
        for (&id, r) in ids.iter().zip(ready) {
            if !r {
                continue;
            }
            let Some(c) = conns.get_mut(&id) else {
                continue;
            };
            match recv(
                c.stream.as_fd().as_raw_fd(),
                &mut chunk,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => {
                    conns.remove(&id);
                    bus.handle_disconnect(now, id);
                    continue;
                }
                Ok(n) => {
                    // A large frame's buffer is sized once from its LEN (no doubling).
                    if let Ok(Some(total)) = frame_len(&c.buf, max) {
                        c.buf.reserve_exact(total.saturating_sub(c.buf.len()));
                    }
                    c.buf.extend_from_slice(&chunk[..n]);
                }
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(_) => {
                    conns.remove(&id);
                    bus.handle_disconnect(now, id);
                    continue;
                }
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
    }
    flush(&mut bus, &mut conns, &endpoint, &mut opts);
    for c in conns.values() {
        c.stream.shutdown();
    }
    Ok(())
}

fn flush(
    bus: &mut Bus,
    conns: &mut std::collections::BTreeMap<ToolId, Conn>,
    endpoint: &Endpoint,
    opts: &mut ServeOptions,
) {
    let mut buf = Vec::new();
    while let Some(o) = bus.poll_output() {
        match o {
            Output::Send { tool, frame } => {
                if let Some(c) = conns.get_mut(&tool) {
                    buf.clear();
                    frame.emit(&mut buf);
                    if c.stream.write_all(&buf).is_err() {
                        c.stream.shutdown();
                    }
                }
            }
            Output::Close { tool } => {
                if let Some(c) = conns.remove(&tool) {
                    c.stream.shutdown();
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
    if let Some(w) = opts.trace.as_mut() {
        while let Some(line) = bus.poll_trace() {
            let _ = writeln!(w, "{line}");
        }
        let _ = w.flush();
    }
}
