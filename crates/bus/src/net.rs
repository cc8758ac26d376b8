//! The bus on real sockets (the driver of [`crate::interp::Bus`]; seed 003 "The design": one
//! bus, tools connected over TCP or a Unix socket). The only place of the bus that reads the
//! clock or touches a socket.
//!
//! Threads: one accepts connections; one per connection reads whole frames (length checked
//! against the limit before any allocation) and hands their bytes to the core; the core — the
//! calling thread — owns the [`Bus`], feeds it inputs with the current time, writes its frames,
//! closes connections, launches tools, prints the trace, and returns when no script process is
//! left.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;

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

enum Input {
    Conn(Stream),
    Frame(ToolId, Vec<u8>),
    Bad(ToolId, Vec<u8>),
    Closed(ToolId),
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

/// Runs `bus` on `listener` until no script process is left.
///
/// # Errors
/// A failure of the listener itself (a tool's failures only close that tool's connection).
pub fn serve(listener: Listener, mut bus: Bus, mut opts: ServeOptions) -> io::Result<()> {
    let clock = Clock::start();
    let endpoint = listener.endpoint();
    let max = bus.config().max_frame;
    let (tx, rx) = mpsc::channel::<Input>();
    let accept_tx = tx.clone();
    let acceptor = listener.try_clone()?;
    thread::spawn(move || {
        while let Ok(s) = acceptor.accept() {
            if accept_tx.send(Input::Conn(s)).is_err() {
                break;
            }
        }
    });
    let mut conns: std::collections::BTreeMap<ToolId, Stream> = Default::default();
    loop {
        flush(&mut bus, &mut conns, &endpoint, &mut opts);
        if bus.process_count() == 0 {
            break;
        }
        let now = clock.now();
        let input = match bus.poll_timeout(now) {
            Some(at) if at <= now => {
                bus.handle_timeout(now);
                continue;
            }
            Some(at) => match rx.recv_timeout(std::time::Duration::from_nanos(
                at.as_nanos().saturating_sub(now.as_nanos()),
            )) {
                Ok(i) => i,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bus.handle_timeout(clock.now());
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(i) => i,
                Err(_) => break,
            },
        };
        let now = clock.now();
        match input {
            Input::Conn(s) => {
                let id = bus.handle_connect(now);
                let Ok(mut reader) = s.try_clone() else {
                    bus.handle_disconnect(now, id);
                    continue;
                };
                conns.insert(id, s);
                let tx = tx.clone();
                thread::spawn(move || loop {
                    match read_frame(&mut reader, max) {
                        Ok(Some(f)) => {
                            if tx.send(Input::Frame(id, f)).is_err() {
                                break;
                            }
                        }
                        Ok(None) => {
                            let _ = tx.send(Input::Closed(id));
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                            let _ = tx.send(Input::Bad(id, vec![0, 0, 0, 0]));
                            break;
                        }
                        Err(_) => {
                            let _ = tx.send(Input::Closed(id));
                            break;
                        }
                    }
                });
            }
            Input::Frame(id, bytes) | Input::Bad(id, bytes) => {
                if let Err(e) = bus.handle_bytes(now, id, &bytes) {
                    tracing::warn!(tool = id, "bad frame: {e}");
                }
            }
            Input::Closed(id) => {
                conns.remove(&id);
                bus.handle_disconnect(now, id);
            }
        }
    }
    flush(&mut bus, &mut conns, &endpoint, &mut opts);
    for s in conns.values() {
        s.shutdown();
    }
    Ok(())
}

fn flush(
    bus: &mut Bus,
    conns: &mut std::collections::BTreeMap<ToolId, Stream>,
    endpoint: &Endpoint,
    opts: &mut ServeOptions,
) {
    let mut buf = Vec::new();
    while let Some(o) = bus.poll_output() {
        match o {
            Output::Send { tool, frame } => {
                if let Some(s) = conns.get_mut(&tool) {
                    buf.clear();
                    frame.emit(&mut buf);
                    if s.write_all(&buf).is_err() {
                        s.shutdown();
                    }
                }
            }
            Output::Close { tool } => {
                if let Some(s) = conns.remove(&tool) {
                    s.shutdown();
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
