//! The Rust tool client (seed 003 "The design", the tool side): connect to a bus, answer its
//! evaluate and do requests, send events and notes, and put and get values by value or by
//! reference.
//!
//! - [`Tool::put`] keeps a value whose encoding exceeds the bus's threshold (announced in REG)
//!   and returns a reference to it (location, size, signature) to send in its place; smaller
//!   values, and every value of a passive tool (one that cannot accept connections, seed 003's
//!   passive–passive case), go by value.
//! - [`Tool::resolve`] replaces the references of a received term by their values, fetching
//!   each from its owner with GET and PUT chunks under a window the consumer grants (flow
//!   control by CREDIT frames), at most once per consumer (a cache keyed by owner and
//!   variable), then ACKs the delivery so the bus can release its count.
//! - A FIN from the bus frees the owned value ([`Request::Fin`] from [`Tool::next_request`] tells the tool too).
//! - A thread sends PING at a third of the lease, so a live tool keeps its references.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use thiserror::Error;

use crate::net::{read_frame, Endpoint, Listener, Stream};
use crate::saf;
use crate::term::{Arena, Kind, RefInfo, Term};
use crate::wire::{self, FailCode, Frame, WireError, DEFAULT_MAX_FRAME, VERSION};

/// What went wrong on the tool side.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// A frame did not decode.
    #[error("bad frame: {0}")]
    Wire(#[from] WireError),
    /// A fetched value did not decode.
    #[error("bad value: {0}")]
    Term(#[from] saf::SafError),
    /// The bus refused the handshake or closed the connection.
    #[error("bus ended the connection: {0}")]
    Ended(String),
    /// A reference could not be fetched (owner lost, unknown variable, refused).
    #[error("transfer failed ({code:?}): {detail}")]
    Transfer {
        /// Why.
        code: FailCode,
        /// Details.
        detail: String,
    },
    /// The other side broke the protocol.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The owner's listener is not the one the bus vouched for: another certificate than the
    /// reference's pinned fingerprint, or plain TCP while this tool is on a TLS bus
    /// ([`crate::owner_tls`]). Nothing was fetched.
    #[error("owner at {location} not verified: {detail}")]
    OwnerUnverified {
        /// The reference's location.
        location: String,
        /// Why.
        detail: String,
    },
}

/// How a tool connects.
#[derive(Debug, Clone)]
pub struct ToolConfig {
    /// Its name (its type in the script).
    pub name: String,
    /// Its credential.
    pub token: String,
    /// Where it serves its values: `Some("127.0.0.1:0")` (active, the default), a Unix path
    /// `unix:/…`, or `None` (passive: everything goes by value).
    pub serve: Option<String>,
    /// PUT chunk size.
    pub chunk: usize,
    /// Window granted when fetching (bytes in flight before a CREDIT).
    pub window: u32,
    /// Largest frame accepted from the bus.
    pub max_frame: usize,
    /// TLS to the bus (its TCP address), verifying its certificate against given roots.
    pub tls: Option<crate::net::TlsClient>,
    /// Same-host transfers in a sealed memfd over Unix sockets (asking as a consumer,
    /// answering as an owner; [`crate::memfd`]); streaming otherwise.
    pub memfd: bool,
    /// The certificate a TCP listener serves values with ([`crate::owner_tls`]). When `tls`
    /// is set and this is `None`, a fresh self-signed one is made at connect time.
    pub owner_identity: Option<Arc<crate::owner_tls::OwnerIdentity>>,
    /// On a TLS bus, still fetch from owners that serve plain TCP (a client without owner
    /// TLS). Off by default: such a fetch fails with [`ClientError::OwnerUnverified`].
    pub plain_owners: bool,
}

impl ToolConfig {
    /// An active tool named `name`.
    pub fn new(name: &str) -> ToolConfig {
        ToolConfig {
            name: name.to_string(),
            token: String::new(),
            serve: Some("127.0.0.1:0".into()),
            chunk: 256 * 1024,
            window: 4 << 20,
            max_frame: DEFAULT_MAX_FRAME,
            tls: None,
            memfd: true,
            owner_identity: None,
            plain_owners: false,
        }
    }
}

/// A request from the bus.
#[derive(Debug, Clone)]
pub enum Request {
    /// Evaluate `term` and answer with [`Tool::value`].
    Eval {
        /// Echo it in the answer.
        request: u64,
        /// Delivery to [`Tool::resolve`] (0: no references).
        delivery: u64,
        /// The term.
        term: Term,
    },
    /// Do `term`.
    Do {
        /// Delivery to resolve.
        delivery: u64,
        /// The term.
        term: Term,
    },
    /// The script acknowledged an event.
    AckEvent {
        /// The event's number.
        event: u64,
        /// Delivery to resolve.
        delivery: u64,
        /// The term.
        term: Term,
    },
    /// The bus freed one of this tool's values (already dropped from its store).
    Fin {
        /// The variable.
        var: u64,
    },
    /// A transfer or frame failed.
    Fail {
        /// Delivery concerned.
        delivery: u64,
        /// Why.
        code: FailCode,
        /// Details.
        detail: String,
    },
    /// The script ends the tool.
    Terminate {
        /// Why.
        term: Term,
    },
}

/// A value an owner keeps: its term stream, and the sealed memfd holding it when the owner
/// serves same-host consumers (made once at `put`, handed over as is).
struct Stored {
    bytes: crate::term::Bytes,
    memfd: Option<std::os::fd::OwnedFd>,
    /// Where the stream starts in the memfd (after the gap of a shared blob).
    offset: usize,
}

type Store = Arc<Mutex<HashMap<u64, Arc<Stored>>>>;

/// What separates a location from its same-host part: `BASE;local=BOOT_ID@/path/to/socket`
/// (an owner serving TCP also listens on a Unix socket; a consumer on the same host — same
/// kernel boot id — fetches there, as a memfd).
pub const LOCAL: &str = ";local=";

/// The kernel's boot id (one per host and boot), the same-host test of [`LOCAL`] locations.
pub fn boot_id() -> Option<&'static str> {
    static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && !s.contains('@'))
    })
    .as_deref()
}

/// A location split into its base (TCP, TLS or Unix) and its same-host part (boot id, Unix
/// socket path), if any.
pub fn split_local(location: &str) -> (&str, Option<(&str, &str)>) {
    match location.rsplit_once(LOCAL) {
        Some((base, tail)) => match tail.split_once('@') {
            Some((id, path)) if !path.is_empty() => (base, Some((id, path))),
            _ => (base, None),
        },
        None => (location, None),
    }
}

/// Removes the same-host socket file when the tool goes.
struct LocalSocket(std::path::PathBuf);

impl Drop for LocalSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Counts of a tool's transfers.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolStats {
    /// Values fetched from owners (each at most once).
    pub fetches: u64,
    /// Bytes fetched.
    pub fetched_bytes: u64,
    /// References resolved from the cache.
    pub cache_hits: u64,
    /// Of the fetches, those handed over as a memfd (same host, Unix socket).
    pub memfd_fetches: u64,
    /// Of the memfd fetches, those found through a TCP or TLS owner's same-host socket
    /// ([`LOCAL`]), chosen automatically.
    pub local_fetches: u64,
    /// Values put in place: made with [`Tool::shared_blob`], sealed without a copy.
    pub in_place_puts: u64,
    /// Of the fetches, those over TLS to an owner whose certificate matched its pin.
    pub tls_fetches: u64,
    /// Fetches refused because the owner was not verified ([`ClientError::OwnerUnverified`]).
    pub unverified_owners: u64,
}

/// A tool connected to a bus.
pub struct Tool {
    id: u64,
    threshold: u32,
    writer: Arc<Mutex<Stream>>,
    /// Buffered: a small frame's length and body come in one read (one syscall, not two).
    reader: io::BufReader<Stream>,
    location: String,
    store: Store,
    next_var: u64,
    next_event: u64,
    cache: HashMap<(u64, u64), Term>,
    config: ToolConfig,
    stop: Arc<AtomicBool>,
    _ping: mpsc::Sender<()>,
    /// Frames from the bus read while resolving a relayed reference, for `next_request`.
    pending: std::collections::VecDeque<Frame>,
    /// Values this (passive) tool is sending through the bus: var → (delivery, position,
    /// window left).
    relaying: HashMap<u64, (u64, usize, usize)>,
    /// The tool's arena (build terms with it).
    pub arena: Arena,
    /// Transfer counts.
    pub stats: ToolStats,
    /// Values go into a sealed memfd at `put` (the tool serves same-host consumers).
    memfd_store: bool,
    _local: Option<LocalSocket>,
}

fn write_frame(w: &Mutex<Stream>, f: &Frame) -> io::Result<()> {
    let bytes = f.to_bytes();
    let mut s = w
        .lock()
        .map_err(|_| io::Error::other("writer lock poisoned"))?;
    s.write_all(&bytes)
}

impl Tool {
    /// Connects to the bus at `bus` (`host:port` or `unix:/path`) and registers.
    ///
    /// # Errors
    /// The socket's error, or the bus's refusal.
    pub fn connect(bus: &str, config: ToolConfig) -> Result<Tool, ClientError> {
        let store: Store = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut local = None;
        let location = match &config.serve {
            None => String::new(),
            Some(ep) => {
                let l = Listener::bind(&Endpoint::parse(ep))?;
                let mut loc = l.endpoint().to_string();
                // On a TLS bus, a TCP listener serves TLS with a pinned certificate.
                let identity = match (&l, &config.tls, &config.owner_identity) {
                    (Listener::Tcp(_), _, Some(id)) => Some(id.clone()),
                    (Listener::Tcp(_), Some(_), None) => {
                        Some(Arc::new(crate::owner_tls::OwnerIdentity::generate()?))
                    }
                    _ => None,
                };
                let server = match &identity {
                    Some(id) => {
                        loc = id.location(&loc);
                        Some(id.server_config()?)
                    }
                    None => None,
                };
                let tcp = matches!(l, Listener::Tcp(_));
                {
                    let (store, config, stop) = (store.clone(), config.clone(), stop.clone());
                    thread::spawn(move || serve_values(l, server, store, config, stop));
                }
                // A TCP owner also listens on a Unix socket, announced with the host's boot
                // id: a consumer on the same host fetches there as a memfd, without copies
                // (chosen automatically; other hosts use the TCP address).
                if tcp && config.memfd {
                    if let Some(id) = boot_id() {
                        let path = std::env::temp_dir().join(format!(
                            "viastack-owner-{}-{:x}.sock",
                            std::process::id(),
                            fresh_nonce()
                        ));
                        if let Ok(ul) = Listener::bind(&Endpoint::Unix(path.clone())) {
                            use std::os::unix::fs::PermissionsExt;
                            let _ = std::fs::set_permissions(
                                &path,
                                std::fs::Permissions::from_mode(0o600),
                            );
                            loc = format!("{loc}{LOCAL}{id}@{}", path.display());
                            local = Some(LocalSocket(path));
                            let (store, config, stop) =
                                (store.clone(), config.clone(), stop.clone());
                            thread::spawn(move || serve_values(ul, None, store, config, stop));
                        }
                    }
                }
                loc
            }
        };
        let stream = match &config.tls {
            Some(tls) => tls.connect(bus)?,
            None => Endpoint::parse(bus).connect()?,
        };
        let mut reader = io::BufReader::with_capacity(64 * 1024, stream.try_clone()?);
        let writer = Arc::new(Mutex::new(stream));
        write_frame(
            &writer,
            &Frame::Hello {
                version: VERSION,
                name: config.name.clone(),
                location: location.clone(),
                token: config.token.clone(),
            },
        )?;
        let max = config.max_frame;
        let mut arena = Arena::new();
        let first = match read_frame(&mut reader, max)? {
            Some(b) => Frame::parse(&mut arena, &b, max)?,
            None => return Err(ClientError::Ended("closed during the handshake".into())),
        };
        let (id, lease_ms, threshold) = match first {
            Frame::Reg {
                tool,
                lease_ms,
                threshold,
                ..
            } => (tool, lease_ms, threshold),
            Frame::End { reason } => return Err(ClientError::Ended(reason)),
            f => {
                return Err(ClientError::Protocol(format!(
                    "REG expected, got {}",
                    f.name()
                )))
            }
        };
        // The PING thread waits on a channel the tool holds: dropping the tool ends it
        // (a timed wait, not a sleep).
        let (ping_keep, park) = mpsc::channel::<()>();
        {
            let (writer, stop) = (writer.clone(), stop.clone());
            let every = std::time::Duration::from_millis(u64::from(lease_ms / 3).max(1));
            thread::spawn(move || {
                let mut nonce = 0;
                while let Err(mpsc::RecvTimeoutError::Timeout) = park.recv_timeout(every) {
                    nonce += 1;
                    if stop.load(Ordering::Relaxed)
                        || write_frame(&writer, &Frame::Ping { nonce }).is_err()
                    {
                        break;
                    }
                }
            });
        }
        Ok(Tool {
            id,
            threshold,
            writer,
            reader,
            location,
            store,
            next_var: 0,
            next_event: 0,
            cache: HashMap::new(),
            stop,
            _ping: ping_keep,
            pending: Default::default(),
            relaying: HashMap::new(),
            arena,
            stats: ToolStats::default(),
            memfd_store: config.memfd
                && (local.is_some()
                    || config
                        .serve
                        .as_deref()
                        .is_some_and(|s| s.starts_with("unix:"))),
            _local: local,
            config,
        })
    }

    /// The tool's id on the bus.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Where it serves its values ("" when passive; a TCP owner's same-host socket follows
    /// [`LOCAL`]).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Values this tool still holds for others.
    pub fn held(&self) -> usize {
        self.store.lock().map_or(0, |s| s.len())
    }

    fn send(&self, f: &Frame) -> Result<(), ClientError> {
        Ok(write_frame(&self.writer, f)?)
    }

    /// Sends any frame to the bus as is (extensions, and tests of the bus's refusals).
    ///
    /// # Errors
    /// The socket's error.
    pub fn send_frame(&self, f: &Frame) -> Result<(), ClientError> {
        self.send(f)
    }

    /// The next request from the bus (blocking). FINs free the value before being returned.
    ///
    /// # Errors
    /// The connection's failure or end.
    pub fn next_request(&mut self) -> Result<Request, ClientError> {
        loop {
            let f = match self.pending.pop_front() {
                Some(f) => f,
                None => {
                    let f = self.read_bus()?;
                    match self.owner_frame(f)? {
                        Some(f) => f,
                        None => continue,
                    }
                }
            };
            return Ok(match f {
                Frame::Eval {
                    request,
                    delivery,
                    term,
                } => Request::Eval {
                    request,
                    delivery,
                    term,
                },
                Frame::Do { delivery, term } => Request::Do { delivery, term },
                Frame::AckEvent {
                    event,
                    delivery,
                    term,
                } => Request::AckEvent {
                    event,
                    delivery,
                    term,
                },
                Frame::Fin { var } => {
                    if let Ok(mut s) = self.store.lock() {
                        s.remove(&var);
                    }
                    Request::Fin { var }
                }
                Frame::Fail {
                    delivery,
                    code,
                    detail,
                } => Request::Fail {
                    delivery,
                    code,
                    detail,
                },
                Frame::Terminate { term } => Request::Terminate { term },
                Frame::End { reason } => return Err(ClientError::Ended(reason)),
                Frame::Ping { .. } | Frame::Unknown { .. } => continue,
                f => {
                    return Err(ClientError::Protocol(format!(
                        "{} not expected from the bus",
                        f.name()
                    )))
                }
            });
        }
    }

    /// The next frame from the bus (blocking; read on the caller's thread: no hand-off per
    /// frame).
    fn read_bus(&mut self) -> Result<Frame, ClientError> {
        let Some(bytes) = read_frame(&mut self.reader, self.config.max_frame)? else {
            return Err(ClientError::Ended("connection closed".into()));
        };
        // Every frame's terms are built in the tool's arena: the ones nobody holds any more
        // go once it has doubled (amortised), so a long-running tool's arena stays bounded
        // (`tests/bounded.rs`).
        self.arena.purge_if_large();
        Ok(Frame::parse(
            &mut self.arena,
            &bytes,
            self.config.max_frame,
        )?)
    }

    /// The owner's side of a relayed transfer (seed 003 "active <- passive", "passive -
    /// passive"): a GET or CREDIT the bus relays to this passive tool is answered with PUT
    /// chunks on the bus connection, within the consumer's window. Other frames are returned.
    fn owner_frame(&mut self, f: Frame) -> Result<Option<Frame>, ClientError> {
        match f {
            Frame::Get {
                delivery,
                var,
                offset,
                window,
            } => {
                let known = self.store.lock().ok().is_some_and(|s| s.contains_key(&var));
                if !known {
                    self.send(&Frame::Fail {
                        delivery,
                        code: FailCode::UnknownVar,
                        detail: format!("no variable {var}"),
                    })?;
                    return Ok(None);
                }
                let pos = usize::try_from(offset).unwrap_or(usize::MAX);
                self.relaying.insert(var, (delivery, pos, window as usize));
                self.pump_relay(var)?;
                Ok(None)
            }
            Frame::Credit { var, bytes } => {
                if let Some(r) = self.relaying.get_mut(&var) {
                    r.2 = r.2.saturating_add(bytes as usize);
                }
                self.pump_relay(var)?;
                Ok(None)
            }
            f => Ok(Some(f)),
        }
    }

    fn pump_relay(&mut self, var: u64) -> Result<(), ClientError> {
        let Some(&(_, mut pos, mut allowed)) = self.relaying.get(&var) else {
            return Ok(());
        };
        let value = self.store.lock().ok().and_then(|s| s.get(&var).cloned());
        let Some(value) = value else {
            self.relaying.remove(&var);
            return Ok(());
        };
        let value = &value.bytes;
        let total = value.len();
        pos = pos.min(total);
        while pos < total && allowed > 0 {
            let n = self.config.chunk.min(allowed).min(total - pos);
            self.send(&Frame::Put {
                var,
                offset: pos as u64,
                total: total as u64,
                data: value[pos..pos + n].to_vec(),
            })?;
            pos += n;
            allowed -= n;
        }
        if pos >= total {
            self.relaying.remove(&var);
        } else if let Some(r) = self.relaying.get_mut(&var) {
            r.1 = pos;
            r.2 = allowed;
        }
        Ok(())
    }

    /// Fetches a passive owner's value through the bus: GET and CREDIT on the bus
    /// connection, PUT chunks relayed back; frames meanwhile are kept for `next_request`
    /// (and relayed GETs of this tool's own values are served, so two passive tools never
    /// wait on each other).
    fn fetch_relayed(&mut self, r: &RefInfo, delivery: u64) -> Result<Vec<u8>, ClientError> {
        let window = self.config.window;
        self.send(&Frame::Get {
            delivery,
            var: r.var,
            offset: 0,
            window,
        })?;
        let total = usize::try_from(r.size).map_err(|_| ClientError::Protocol("size".into()))?;
        let mut out = Vec::with_capacity(total);
        let mut since_credit = 0usize;
        while out.len() < total {
            let f = self.read_bus()?;
            let Some(f) = self.owner_frame(f)? else {
                continue;
            };
            match f {
                Frame::Put {
                    var,
                    offset,
                    total: t,
                    data,
                } if var == r.var => {
                    if offset as usize != out.len() || t != r.size || out.len() + data.len() > total
                    {
                        return Err(ClientError::Protocol("relayed PUT out of order".into()));
                    }
                    since_credit += data.len();
                    out.extend_from_slice(&data);
                    if since_credit >= window as usize / 2 && out.len() < total {
                        self.send(&Frame::Credit {
                            var: r.var,
                            bytes: since_credit as u32,
                        })?;
                        since_credit = 0;
                    }
                }
                Frame::Fail {
                    delivery: d,
                    code,
                    detail,
                } if d == delivery => return Err(ClientError::Transfer { code, detail }),
                Frame::End { reason } => return Err(ClientError::Ended(reason)),
                f => self.pending.push_back(f),
            }
        }
        Ok(out)
    }

    /// Answers an evaluation.
    ///
    /// # Errors
    /// The socket's error.
    pub fn value(&mut self, request: u64, term: Term) -> Result<(), ClientError> {
        self.send(&Frame::Value { request, term })
    }

    /// Sends an event; returns its number (echoed by the acknowledgement).
    ///
    /// # Errors
    /// The socket's error.
    pub fn event(&mut self, term: Term) -> Result<u64, ClientError> {
        self.next_event += 1;
        self.send(&Frame::Event {
            event: self.next_event,
            term,
        })?;
        Ok(self.next_event)
    }

    /// Publishes a note.
    ///
    /// # Errors
    /// The socket's error.
    pub fn note(&mut self, term: Term) -> Result<(), ClientError> {
        self.send(&Frame::Note { term })
    }

    /// A new variable number for a value this tool keeps: 62 random bits (never 0, never one
    /// in use). The number is the value's capability: the owner serves a GET for any variable
    /// it holds, and only tools the bus delivered the reference to can know it, so it must
    /// not be guessable (sequential numbers let any tool that reaches the owner's listener
    /// fetch values it was never granted). 62 bits keep it a positive `long` for the Java
    /// client and an exact integer everywhere. Should the system's random source fail, the
    /// counter is used instead, with a warning.
    fn fresh_var(&mut self) -> u64 {
        use ring::rand::SecureRandom;
        let rng = ring::rand::SystemRandom::new();
        for _ in 0..8 {
            let mut b = [0u8; 8];
            if rng.fill(&mut b).is_err() {
                break;
            }
            let var = u64::from_be_bytes(b) >> 2;
            let taken = self
                .store
                .lock()
                .map(|s| s.contains_key(&var))
                .unwrap_or(true);
            if var != 0 && !taken {
                return var;
            }
        }
        tracing::warn!("no random variable number: falling back to a counter");
        self.next_var += 1;
        self.next_var
    }

    /// A blob of `len` bytes made directly in shared memory (`fill` writes them): sent by
    /// reference, a same-host consumer reads it where `fill` wrote it — no copy between the
    /// tools ([`crate::memfd::shared_blob`]). Put it last in the value (`data(B)`).
    ///
    /// # Errors
    /// The kernel's (no memfd support).
    pub fn shared_blob(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> io::Result<Term> {
        let b = crate::memfd::shared_blob(len, fill)?;
        Ok(self.arena.blob(b))
    }

    /// The term to send for `value`: the value itself when small, else a reference to it,
    /// kept here until the bus's FIN. A passive tool's reference has no location: consumers
    /// GET it through the bus, which relays to this tool's connection.
    pub fn put(&mut self, value: &Term) -> Term {
        let segments = saf::encode_segments(value);
        let len: usize = segments
            .iter()
            .map(|s| match s {
                saf::Segment::Own(v) => v.len(),
                saf::Segment::Blob(b) => b.len(),
            })
            .sum();
        if len <= self.threshold as usize {
            return value.clone();
        }
        // Same-host consumers get it as a memfd: written once, here, straight from the term.
        let mut stored = None;
        // A value ending in a shared blob (made in a memfd, `memfd::shared_blob`): only the
        // stream's head is written, in front of the blob; nothing is copied.
        if let [saf::Segment::Own(head), saf::Segment::Blob(b), saf::Segment::Own(tail)] =
            &segments[..]
        {
            if tail.is_empty() {
                if let Some((fd, offset, bytes)) = crate::memfd::seal_in_place(head, b) {
                    self.stats.in_place_puts += 1;
                    stored = Some(Stored {
                        bytes,
                        memfd: Some(fd),
                        offset,
                    });
                }
            }
        }
        if self.memfd_store && stored.is_none() {
            match crate::memfd::sealed_segments(&segments) {
                Ok((fd, bytes)) => {
                    stored = Some(Stored {
                        bytes,
                        memfd: Some(fd),
                        offset: 0,
                    })
                }
                Err(e) => tracing::debug!("no memfd for a value: {e}"),
            }
        }
        let stored = stored.unwrap_or_else(|| {
            let mut out = Vec::with_capacity(len);
            for s in &segments {
                match s {
                    saf::Segment::Own(v) => out.extend_from_slice(v),
                    saf::Segment::Blob(b) => out.extend_from_slice(b),
                }
            }
            Stored {
                bytes: out.into(),
                memfd: None,
                offset: 0,
            }
        });
        let var = self.fresh_var();
        let size = len as u64;
        if let Ok(mut s) = self.store.lock() {
            s.insert(var, Arc::new(stored));
        }
        let sig = self.arena.signature(value, 64);
        self.arena.reference(RefInfo {
            owner: self.id,
            var,
            size,
            location: self.location.as_str().into(),
            sig,
        })
    }

    /// `term` with every reference replaced by its value (fetched from its owner at most once),
    /// then ACKs `delivery` (when non-zero).
    ///
    /// # Errors
    /// A transfer's failure (the delivery is not acknowledged then).
    pub fn resolve(&mut self, term: &Term, delivery: u64) -> Result<Term, ClientError> {
        for r in term.refs() {
            if self.cache.contains_key(&(r.owner, r.var)) {
                self.stats.cache_hits += 1;
                continue;
            }
            let value = if r.owner == self.id {
                let bytes = self
                    .store
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&r.var).cloned())
                    .ok_or_else(|| ClientError::Transfer {
                        code: FailCode::UnknownVar,
                        detail: "own value already freed".into(),
                    })?;
                saf::decode_shared(&mut self.arena, &bytes.bytes)?
            } else {
                let bytes = if r.location.is_empty() {
                    self.fetch_relayed(&r, delivery)?.into()
                } else {
                    self.fetch_direct(&r, delivery)?
                };
                self.stats.fetches += 1;
                self.stats.fetched_bytes += bytes.len() as u64;
                // Large blobs stay where they arrived (the mapped memfd, or the fetched
                // buffer): no copy.
                saf::decode_shared(&mut self.arena, &bytes)?
            };
            self.cache.insert((r.owner, r.var), value);
        }
        let out = substitute_refs(&mut self.arena, term, &self.cache);
        if delivery != 0 {
            self.send(&Frame::Ack { delivery })?;
        }
        Ok(out)
    }

    /// Fetches one reference's bytes straight from its owner (memfd, TLS or plain stream, as
    /// its location and this tool's configuration allow), counting how it went. [`Tool::resolve`]
    /// uses it; it is public for tools that handle references themselves.
    ///
    /// # Errors
    /// The transfer's failure; [`ClientError::OwnerUnverified`] when the owner's certificate
    /// does not match the reference's pin (or it serves plain TCP while this tool is on TLS).
    pub fn fetch_direct(
        &mut self,
        r: &RefInfo,
        delivery: u64,
    ) -> Result<crate::term::Bytes, ClientError> {
        match fetch(r, delivery, &self.config) {
            Ok((bytes, how)) => {
                self.stats.memfd_fetches += u64::from(matches!(how, How::Memfd | How::Local));
                self.stats.local_fetches += u64::from(how == How::Local);
                self.stats.tls_fetches += u64::from(how == How::Tls);
                Ok(bytes)
            }
            Err(e) => {
                if matches!(e, ClientError::OwnerUnverified { .. }) {
                    self.stats.unverified_owners += 1;
                    tracing::warn!("{e}");
                }
                Err(e)
            }
        }
    }

    /// Forgets the fetched values `term` refers to (its references may be fetched again only
    /// if the bus grants them again).
    pub fn release(&mut self, term: &Term) {
        for r in term.refs() {
            self.cache.remove(&(r.owner, r.var));
        }
        self.arena.purge();
    }

    /// Says goodbye (END) and closes.
    pub fn close(self) {
        let _ = self.send(&Frame::End {
            reason: "bye".into(),
        });
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(s) = self.writer.lock() {
            s.shutdown();
        }
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn substitute_refs(arena: &mut Arena, t: &Term, values: &HashMap<(u64, u64), Term>) -> Term {
    match t.kind() {
        Kind::Ref(r) => values
            .get(&(r.owner, r.var))
            .cloned()
            .unwrap_or_else(|| t.clone()),
        Kind::Appl { fun, args } => {
            let args = args
                .iter()
                .map(|a| substitute_refs(arena, a, values))
                .collect();
            arena.make(Kind::Appl {
                fun: fun.clone(),
                args,
            })
        }
        Kind::List(xs) => {
            let xs = xs
                .iter()
                .map(|a| substitute_refs(arena, a, values))
                .collect();
            arena.make(Kind::List(xs))
        }
        Kind::Annot { term, annos } => {
            let term = substitute_refs(arena, term, values);
            arena.make(Kind::Annot {
                term,
                annos: annos.clone(),
            })
        }
        _ => t.clone(),
    }
}

/// Asks a same-host owner for the value as a memfd (GET with window 0, [`crate::memfd`]):
/// `Some` bytes, or `None` when the owner answered FAIL (then stream on the same connection).
fn fetch_memfd(
    s: &mut Stream,
    r: &RefInfo,
    delivery: u64,
    total: usize,
) -> Result<Option<crate::term::Bytes>, ClientError> {
    let Stream::Unix(u) = &*s else {
        return Ok(None);
    };
    let mut w = u;
    w.write_all(
        &Frame::Get {
            delivery,
            var: r.var,
            offset: 0,
            window: 0,
        }
        .to_bytes(),
    )?;
    // The answer is one small frame (PUT without data, or FAIL); read its length first,
    // with the descriptor that comes with the first byte.
    let mut head = [0u8; 4];
    let (n, fd) = crate::memfd::recv_with_fd(u, &mut head)?;
    if n == 0 {
        return Err(ClientError::Transfer {
            code: FailCode::OwnerLost,
            detail: "owner closed the transfer".into(),
        });
    }
    let mut s2 = u;
    if n < 4 {
        std::io::Read::read_exact(&mut s2, &mut head[n..])?;
    }
    let len = u32::from_be_bytes(head) as usize;
    if len == 0 || len > 64 * 1024 {
        return Err(ClientError::Protocol("memfd answer too long".into()));
    }
    let mut frame = head.to_vec();
    frame.resize(4 + len, 0);
    std::io::Read::read_exact(&mut s2, &mut frame[4..])?;
    let mut arena = Arena::new();
    match Frame::parse(&mut arena, &frame, 64 * 1024)? {
        Frame::Put {
            var,
            offset,
            total: t,
            data,
        } if var == r.var && t == r.size && data.is_empty() => {
            // `offset`: where the stream starts in the memfd (a shared blob's head gap).
            let fd =
                fd.ok_or_else(|| ClientError::Protocol("memfd PUT without a descriptor".into()))?;
            let offset = usize::try_from(offset)
                .map_err(|_| ClientError::Protocol("memfd offset".into()))?;
            Ok(Some(crate::memfd::map_at(fd, offset, total, true)?))
        }
        Frame::Fail {
            code: FailCode::Refused,
            ..
        } => Ok(None),
        Frame::Fail { code, detail, .. } => Err(ClientError::Transfer { code, detail }),
        f => Err(ClientError::Protocol(format!(
            "unexpected {} for a memfd GET",
            f.name()
        ))),
    }
}

/// How a value was fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Memfd,
    /// A memfd through a TCP/TLS owner's same-host socket.
    Local,
    Tls,
    Stream,
}

/// Fetches a reference's bytes from its owner — as a memfd from a same-host owner on a Unix
/// socket when both allow it, over TLS pinned to the owner's certificate for a `tls:`
/// location, else streamed: GET with a window, PUT chunks, CREDIT as the window drains. The
/// owner may not send more than the reference's size.
fn fetch(
    r: &RefInfo,
    delivery: u64,
    config: &ToolConfig,
) -> Result<(crate::term::Bytes, How), ClientError> {
    let (base, local) = split_local(&r.location);
    // Same host (same boot id) and the owner's socket reachable: a memfd, no copy. Any
    // failure to reach it falls back to the base location.
    if let Some((id, path)) = local {
        if config.memfd && Some(id) == boot_id() {
            if let Ok(mut s) = Endpoint::Unix(path.into()).connect() {
                let total =
                    usize::try_from(r.size).map_err(|_| ClientError::Protocol("size".into()))?;
                if let Some(bytes) = fetch_memfd(&mut s, r, delivery, total)? {
                    let _ = s.write_all(
                        &Frame::End {
                            reason: "done".into(),
                        }
                        .to_bytes(),
                    );
                    return Ok((bytes, How::Local));
                }
                return Ok((stream_on(s, r, delivery, config)?.into(), How::Stream));
            }
        }
    }
    let r = &RefInfo {
        location: base.into(),
        ..r.clone()
    };
    if config.memfd && r.location.starts_with("unix:") {
        let total = usize::try_from(r.size).map_err(|_| ClientError::Protocol("size".into()))?;
        let mut s = Endpoint::parse(&r.location).connect()?;
        if let Some(bytes) = fetch_memfd(&mut s, r, delivery, total)? {
            let _ = s.write_all(
                &Frame::End {
                    reason: "done".into(),
                }
                .to_bytes(),
            );
            return Ok((bytes, How::Memfd));
        }
        return Ok((stream_on(s, r, delivery, config)?.into(), How::Stream));
    }
    if r.location.starts_with(crate::owner_tls::PREFIX) {
        let unverified = |detail: String| ClientError::OwnerUnverified {
            location: r.location.to_string(),
            detail,
        };
        let Some((addr, pin)) = crate::owner_tls::parse_location(&r.location) else {
            return Err(unverified("malformed TLS location".into()));
        };
        let s = match crate::owner_tls::connect_pinned(addr, pin) {
            Ok(s) => s,
            Err(crate::owner_tls::PinError::Unverified(why)) => return Err(unverified(why)),
            Err(crate::owner_tls::PinError::Io(e)) => return Err(e.into()),
        };
        return Ok((stream_on(s, r, delivery, config)?.into(), How::Tls));
    }
    if r.location.is_empty() {
        return Err(ClientError::Transfer {
            code: FailCode::Refused,
            detail: "owner is passive (no location)".into(),
        });
    }
    if config.tls.is_some() && !config.plain_owners && !r.location.starts_with("unix:") {
        return Err(ClientError::OwnerUnverified {
            location: r.location.to_string(),
            detail: "the owner serves plain TCP while this tool is on a TLS bus".into(),
        });
    }
    let s = Endpoint::parse(&r.location).connect()?;
    Ok((stream_on(s, r, delivery, config)?.into(), How::Stream))
}

/// A PUT frame's fixed part: length, kind, variable, offset, total.
const PUT_HEAD: usize = 4 + 1 + 24;

/// The streamed fetch on a connection to the owner.
fn stream_on(
    mut s: impl io::Read + Write,
    r: &RefInfo,
    delivery: u64,
    config: &ToolConfig,
) -> Result<Vec<u8>, ClientError> {
    let mut arena = Arena::new();
    s.write_all(
        &Frame::Get {
            delivery,
            var: r.var,
            offset: 0,
            window: config.window.max(1),
        }
        .to_bytes(),
    )?;
    let total = usize::try_from(r.size).map_err(|_| ClientError::Protocol("size".into()))?;
    let max = config.max_frame.max(config.chunk + 64);
    let mut out = Vec::with_capacity(total);
    let mut since_credit: usize = 0;
    let lost = || ClientError::Transfer {
        code: FailCode::OwnerLost,
        detail: "owner closed the transfer".into(),
    };
    while out.len() < total {
        // A PUT chunk's bytes are read straight into the value (no frame buffer, no copy
        // out of the decoded frame: at 50 MB those two copies were a third of the
        // by-reference time, `bench bus`); any other frame is decoded whole.
        let mut head = [0u8; PUT_HEAD];
        match s.read_exact(&mut head[..4]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(lost()),
            Err(e) => return Err(e.into()),
        }
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > max {
            return Err(ClientError::Protocol(format!(
                "frame of {len} bytes over the limit of {max} while fetching"
            )));
        }
        if len >= PUT_HEAD - 4 {
            s.read_exact(&mut head[4..])?;
            let word = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&head[at..at + 8]);
                u64::from_be_bytes(b)
            };
            let (var, offset, t) = (word(5), word(13), word(21));
            let n = len - (PUT_HEAD - 4);
            if head[4] == wire::KIND_PUT {
                if var != r.var
                    || offset != out.len() as u64
                    || t != r.size
                    || n > total - out.len()
                {
                    return Err(ClientError::Protocol(format!(
                        "unexpected PUT (var {var}, offset {offset} of {t}, {n} bytes) while fetching"
                    )));
                }
                let got = (&mut s).take(n as u64).read_to_end(&mut out)?;
                if got < n {
                    return Err(lost());
                }
                since_credit += n;
                if since_credit >= config.window as usize / 2 && out.len() < total {
                    s.write_all(
                        &Frame::Credit {
                            var: r.var,
                            bytes: since_credit as u32,
                        }
                        .to_bytes(),
                    )?;
                    since_credit = 0;
                }
                continue;
            }
        }
        // Not a PUT: the whole frame, decoded.
        let mut bytes = vec![0u8; 4 + len];
        let have = (4 + len).min(PUT_HEAD);
        bytes[..have].copy_from_slice(&head[..have]);
        s.read_exact(&mut bytes[have..])?;
        match Frame::parse(&mut arena, &bytes, usize::MAX)? {
            Frame::Put {
                offset,
                total: t,
                data,
                ..
            } if offset as usize == out.len() && t == r.size && out.len() + data.len() <= total => {
                since_credit += data.len();
                out.extend_from_slice(&data);
                if since_credit >= config.window as usize / 2 && out.len() < total {
                    s.write_all(
                        &Frame::Credit {
                            var: r.var,
                            bytes: since_credit as u32,
                        }
                        .to_bytes(),
                    )?;
                    since_credit = 0;
                }
            }
            Frame::Fail { code, detail, .. } => return Err(ClientError::Transfer { code, detail }),
            f => {
                return Err(ClientError::Protocol(format!(
                    "unexpected {} while fetching",
                    f.name()
                )))
            }
        }
    }
    let _ = s.write_all(
        &Frame::End {
            reason: "done".into(),
        }
        .to_bytes(),
    );
    Ok(out)
}

/// The owner's side: answers GETs with PUT chunks within the consumer's window — over TLS
/// when `tls` is set (a TCP listener on a TLS bus, [`crate::owner_tls`]).
fn serve_values(
    l: Listener,
    tls: Option<Arc<rustls::ServerConfig>>,
    store: Store,
    config: ToolConfig,
    stop: Arc<AtomicBool>,
) {
    while let Ok(s) = l.accept() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (store, config, tls) = (store.clone(), config.clone(), tls.clone());
        thread::spawn(move || {
            let _ = match (tls, s) {
                (Some(cfg), Stream::Tcp(tcp)) => rustls::ServerConnection::new(cfg)
                    .map_err(|e| ClientError::Io(io::Error::other(e)))
                    .and_then(|conn| {
                        let mut s = rustls::StreamOwned::new(conn, tcp);
                        let r = serve_one(&mut s, None, &store, &config);
                        s.conn.send_close_notify();
                        let _ = s.flush();
                        r
                    }),
                (_, Stream::Unix(u)) => {
                    let mut w = &u;
                    serve_one(&mut w, Some(&u), &store, &config)
                }
                (None, mut s) => serve_one(&mut s, None, &store, &config),
            };
        });
    }
}

/// Unknown variables one fetching connection may name before the owner closes it.
const MAX_UNKNOWN_VARS: u32 = 3;

fn serve_one(
    s: &mut (impl io::Read + Write),
    unix: Option<&std::os::unix::net::UnixStream>,
    store: &Store,
    config: &ToolConfig,
) -> Result<(), ClientError> {
    let mut arena = Arena::new();
    let max = 1024;
    // Variable numbers are capabilities (see `Tool::fresh_var`): a connection that names
    // unknown ones is guessing, and is closed after a few.
    let mut unknown = 0u32;
    while let Some(bytes) = read_frame(s, max)? {
        let Frame::Get {
            delivery,
            var,
            offset,
            window,
        } = Frame::parse(&mut arena, &bytes, max)?
        else {
            return Ok(());
        };
        let value = store.lock().ok().and_then(|m| m.get(&var).cloned());
        let Some(value) = value else {
            unknown += 1;
            if unknown > MAX_UNKNOWN_VARS {
                return Ok(());
            }
            s.write_all(
                &Frame::Fail {
                    delivery,
                    code: FailCode::UnknownVar,
                    detail: format!("no variable {var}"),
                }
                .to_bytes(),
            )?;
            continue;
        };
        let total = value.bytes.len();
        if window == 0 {
            // A memfd asked for (same host, Unix socket): PUT without data, memfd attached
            // (the one made at `put`, else one made now).
            let sent = match (unix, config.memfd) {
                (Some(u), true) => match &value.memfd {
                    Some(fd) => fd.try_clone(),
                    None => crate::memfd::sealed(&value.bytes),
                }
                .and_then(|fd| {
                    let head = Frame::Put {
                        var,
                        offset: if value.memfd.is_some() {
                            value.offset as u64
                        } else {
                            0
                        },
                        total: total as u64,
                        data: Vec::new(),
                    }
                    .to_bytes();
                    crate::memfd::send_with_fd(u, &head, &fd)
                }),
                _ => Err(io::Error::other("memfd not offered")),
            };
            if let Err(e) = sent {
                s.write_all(
                    &Frame::Fail {
                        delivery,
                        code: FailCode::Refused,
                        detail: format!("no memfd: {e}"),
                    }
                    .to_bytes(),
                )?;
            }
            continue;
        }
        let mut pos = usize::try_from(offset).unwrap_or(usize::MAX).min(total);
        let mut allowed = window as usize;
        let mut buf = Vec::with_capacity(config.chunk + 40);
        while pos < total {
            if allowed == 0 {
                match read_frame(s, max)? {
                    Some(b) => match Frame::parse(&mut arena, &b, max)? {
                        Frame::Credit { bytes, .. } => allowed += bytes as usize,
                        _ => return Ok(()),
                    },
                    None => return Ok(()),
                }
                continue;
            }
            let n = config.chunk.min(allowed).min(total - pos);
            buf.clear();
            // PUT header by hand to avoid copying the chunk into a frame first.
            let len = (1 + 24 + n) as u32;
            buf.extend_from_slice(&len.to_be_bytes());
            buf.push(wire::KIND_PUT);
            buf.extend_from_slice(&var.to_be_bytes());
            buf.extend_from_slice(&(pos as u64).to_be_bytes());
            buf.extend_from_slice(&(total as u64).to_be_bytes());
            s.write_all(&buf)?;
            s.write_all(&value.bytes[pos..pos + n])?;
            pos += n;
            allowed -= n;
        }
    }
    Ok(())
}

/// A random number for the same-host socket's name.
fn fresh_nonce() -> u64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    u64::from_be_bytes(b)
}
