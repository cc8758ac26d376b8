//! `viastack services …`: spec bundles for services deployed at run time (issue 16 §4; seed
//! 000 §4.3.2, fetching a spec, and §4.3.1, malicious specs).
//!
//! - `hash FILE`: the spec's content address (SHA-256, 64 hex digits).
//! - `sign FILE --key K`: signs the hash with the Ed25519 private key in `K` (the 64 hex digits
//!   `viastack keygen` writes) and writes `FILE.sig`, which the `messagestore` layer ships with
//!   the spec.
//! - `pubkey --key K`: the public key of `K`, for `trusted_keys`.
//! - `serve DIR [--listen ADDR]`: a services server on UDP answering spec requests (by hash or
//!   by ServiceID) with the bundles of `DIR/*.scxml` (and their `.sig`), in the messagestore
//!   wire format (`SPEC_REQUEST` / `SPEC_RESPONSE`, docs/WIRE.md).
//! - `serve DIR --stack STACK --id N (--nodes M | --deployment FILE)`: the same specs served
//!   to an overlay on real sockets (seed 000 §4.3.2, the services server the nodes ask after
//!   the source and the neighbours): node N of STACK, whose `messagestore` names it its
//!   `server`, joins the overlay (`overlay join`'s loop and status lines) with the
//!   directory's specs as its services; the other nodes (`overlay join STACK`) fetch them
//!   through the stack's device and checksum like every datagram, verify and run them.
//! - `fetch HASH --from ADDR [--out FILE] [--trusted-key K]`: asks a server for a spec by hash
//!   and writes it once its hash (and, with `--trusted-key`, its signature) verified and it
//!   loads.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context as _};
use clap::Subcommand;
use viastack_protocols::messagestore::{decode, encode};
use viastack_protocols::specbundle::{self, Assembly, Bundle, Hash, Signature};
use viastack_spec::service::Message as SMsg;

/// `viastack services` subcommands.
#[derive(Subcommand)]
pub enum ServicesCommand {
    /// Print a spec's content address: the SHA-256 of the file, 64 hex digits.
    Hash {
        /// The SCXML specification.
        file: PathBuf,
    },
    /// Sign a spec's hash with an Ed25519 key and write FILE.sig.
    Sign {
        /// The SCXML specification (it must load).
        file: PathBuf,
        /// The private key: a file of 64 hex digits (`viastack keygen --out K`).
        #[arg(long)]
        key: PathBuf,
    },
    /// Print the Ed25519 public key of a private key (for `trusted_keys`).
    Pubkey {
        /// The private key file.
        #[arg(long)]
        key: PathBuf,
    },
    /// Serve the specs of a directory (*.scxml, with *.scxml.sig) to nodes asking over UDP:
    /// on a bare socket (--listen, for `services fetch`), or as node N of a stack whose
    /// `messagestore` names N its `server` (--stack, for `overlay join` nodes).
    Serve {
        /// The directory.
        dir: PathBuf,
        /// Address to listen on without a stack (port 0: any; the bound address is printed
        /// first). Default 127.0.0.1:7420.
        #[arg(long, conflicts_with = "stack")]
        listen: Option<SocketAddr>,
        /// A stack whose `messagestore` names this node its `server` (e.g.
        /// stacks/overlay-services.toml): run that node of the overlay, its messagestore
        /// starting with the directory's specs, answering the other nodes' spec requests
        /// through the stack's device and checksum.
        #[arg(long)]
        stack: Option<PathBuf>,
        /// With a stack: this node's id (the layer's `server`).
        #[arg(long, requires = "stack")]
        id: Option<u32>,
        /// With a stack: loopback deployment of N nodes, node i at 127.0.0.1:(base-port + i).
        #[arg(long, requires = "stack")]
        nodes: Option<u32>,
        /// With a stack: first port of the loopback deployment.
        #[arg(long, default_value_t = 47000)]
        base_port: u16,
        /// With a stack: the deployment file.
        #[arg(long, requires = "stack", conflicts_with = "nodes")]
        deployment: Option<PathBuf>,
        /// With a stack: write the status (JSON, as `overlay join`) to this file each second.
        #[arg(long, requires = "stack")]
        status_file: Option<PathBuf>,
        /// With a stack: stop after this long.
        #[arg(long, value_parser = crate::duration_arg, requires = "stack")]
        duration: Option<viastack_kernel::Duration>,
    },
    /// Fetch a spec by hash from a services server and verify it.
    Fetch {
        /// The spec's hash (64 hex digits).
        hash: String,
        /// The server's address.
        #[arg(long)]
        from: SocketAddr,
        /// Write the spec here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Accept the spec only if signed by this public key (64 hex digits).
        #[arg(long)]
        trusted_key: Option<String>,
        /// Requests sent before giving up (one second apart).
        #[arg(long, default_value_t = 5)]
        tries: u32,
    },
}

/// Runs a `services` subcommand.
///
/// # Errors
/// Files unreadable, keys malformed, a spec that does not load or verify, a server that does
/// not answer.
pub fn run(what: ServicesCommand) -> anyhow::Result<ExitCode> {
    match what {
        ServicesCommand::Hash { file } => {
            let text = read(&file)?;
            outln!("{}", specbundle::hex(&specbundle::hash(&text)))?;
        }
        ServicesCommand::Sign { file, key } => {
            let text = read(&file)?;
            let src =
                std::str::from_utf8(&text).map_err(|_| anyhow!("{}: not UTF-8", file.display()))?;
            if let Err(e) = viastack_spec::service::Service::load(&file.display().to_string(), src)
            {
                bail!("{} does not load; not signing it:\n{e}", file.display());
            }
            let seed = read_key(&key)?;
            let sig = specbundle::sign(&specbundle::hash(&text), &seed).map_err(|e| anyhow!(e))?;
            let out = sig_path(&file);
            std::fs::write(&out, format!("{}\n", sig.to_line()))
                .with_context(|| format!("{}: cannot write", out.display()))?;
            outln!("{}", sig.to_line())?;
            eprintln!("wrote {}", out.display());
        }
        ServicesCommand::Pubkey { key } => {
            let seed = read_key(&key)?;
            let pk = specbundle::public_key(&seed).map_err(|e| anyhow!(e))?;
            outln!("{}", specbundle::hex(&pk))?;
        }
        ServicesCommand::Serve {
            dir,
            listen,
            stack: None,
            ..
        } => serve(
            &dir,
            listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7420))),
        )?,
        ServicesCommand::Serve {
            dir,
            stack: Some(file),
            id,
            nodes,
            base_port,
            deployment,
            status_file,
            duration,
            ..
        } => {
            let Some(me) = id else {
                bail!("which node is the server? give --id (the messagestore's `server`)");
            };
            let text = server_stack(&file, &dir, me)?;
            let args = crate::overlay_cmd::JoinArgs {
                file,
                id,
                deployment,
                nodes,
                base_port,
                status_file,
                send_every: None,
                service: None,
                duration,
                settle: viastack_kernel::Duration::from_secs(3),
            };
            return crate::overlay_cmd::join_as(&args, crate::overlay_cmd::Role::SpecServer(text));
        }
        ServicesCommand::Fetch {
            hash,
            from,
            out,
            trusted_key,
            tries,
        } => {
            let want: Hash = specbundle::parse_hex(&hash).map_err(|e| anyhow!("hash: {e}"))?;
            let trusted: Vec<[u8; 32]> = match trusted_key {
                Some(k) => vec![specbundle::parse_hex(&k).map_err(|e| anyhow!("key: {e}"))?],
                None => Vec::new(),
            };
            let b = fetch(&want, from, tries)?;
            let svc = specbundle::accept(&b, None, Some(&want), &trusted)
                .map_err(|e| anyhow!("refused the spec from {from}: {e}"))?;
            match &out {
                Some(p) => {
                    std::fs::write(p, &b.text)
                        .with_context(|| format!("{}: cannot write", p.display()))?;
                    if let Some(s) = &b.signature {
                        std::fs::write(sig_path(p), format!("{}\n", s.to_line()))
                            .with_context(|| format!("{}.sig: cannot write", p.display()))?;
                    }
                }
                None => {
                    use std::io::Write as _;
                    std::io::stdout().lock().write_all(&b.text)?;
                }
            }
            eprintln!(
                "fetched {} from {from}: {} bytes, ServiceID {}, {}",
                specbundle::hex(&b.hash),
                b.text.len(),
                svc.id(),
                b.signature.map_or("unsigned".to_string(), |s| format!(
                    "signed by {}",
                    specbundle::hex(&s.key)
                ))
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn read(p: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))
}

fn read_key(p: &Path) -> anyhow::Result<[u8; 32]> {
    let s = std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?;
    specbundle::parse_hex(&s).map_err(|e| anyhow!("{}: {e}", p.display()))
}

fn sig_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".sig");
    PathBuf::from(s)
}

/// The specs of a directory: `dir/*.scxml`, sorted.
fn spec_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot read", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "scxml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The text of `stack` for its services server, node `id`: every `messagestore` layer must
/// name `id` its `server`; it gets the specs of `dir` (absolute paths; their `.sig` files
/// come with them) as its `service` and `known_at = id`, so that this node — and only it
/// among the nodes started from the stack file as is — starts with them.
fn server_stack(stack: &Path, dir: &Path, id: u32) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(stack)
        .with_context(|| format!("{}: cannot read", stack.display()))?;
    let mut doc: toml::Table = text
        .parse()
        .with_context(|| format!("{}: not TOML", stack.display()))?;
    let mut paths = Vec::new();
    for f in spec_files(dir)? {
        let abs = std::fs::canonicalize(&f)
            .with_context(|| format!("{}: cannot resolve", f.display()))?;
        let shown = abs
            .to_str()
            .filter(|s| !s.contains(','))
            .ok_or_else(|| anyhow!("{}: a path with a comma or not UTF-8", abs.display()))?
            .to_string();
        paths.push(shown);
    }
    if paths.is_empty() {
        bail!("{}: no *.scxml to serve", dir.display());
    }
    let mut stores = 0;
    if let Some(toml::Value::Table(layers)) = doc.get_mut("layers") {
        for (name, layer) in layers.iter_mut() {
            let Some(t) = layer.as_table_mut() else {
                continue;
            };
            if t.get("kind").and_then(toml::Value::as_str) != Some("messagestore") {
                continue;
            }
            let server = t.get("server").and_then(toml::Value::as_integer);
            if server != Some(i64::from(id)) {
                bail!(
                    "{}: layer `{name}` does not name node {id} its services server \
                     (`server = {id}`)",
                    stack.display()
                );
            }
            t.insert("service".into(), toml::Value::String(paths.join(",")));
            t.insert("known_at".into(), toml::Value::String(id.to_string()));
            stores += 1;
        }
    }
    if stores == 0 {
        bail!("{}: no `messagestore` layer", stack.display());
    }
    toml::to_string(&doc).with_context(|| format!("{}: cannot rewrite", stack.display()))
}

/// The bundles of `dir/*.scxml` (each must load), by hash, with their ServiceIDs.
fn load_dir(dir: &Path) -> anyhow::Result<BTreeMap<Hash, (u32, Bundle)>> {
    let mut out = BTreeMap::new();
    for f in spec_files(dir)? {
        let text = read(&f)?;
        let signature = match std::fs::read_to_string(sig_path(&f)) {
            Ok(l) => Some(Signature::parse(&l).map_err(|e| anyhow!("{}.sig: {e}", f.display()))?),
            Err(_) => None,
        };
        let src = std::str::from_utf8(&text).map_err(|_| anyhow!("{}: not UTF-8", f.display()))?;
        let (svc, _) = viastack_spec::service::Service::load(&f.display().to_string(), src)
            .map_err(|e| anyhow!("{} does not load:\n{e}", f.display()))?;
        let b = Bundle::with_signature(&text, signature);
        eprintln!(
            "{}  ServiceID {:<5} {}{}",
            specbundle::hex(&b.hash),
            svc.id(),
            f.display(),
            if b.signature.is_some() {
                " (signed)"
            } else {
                ""
            }
        );
        out.insert(b.hash, (svc.id(), b));
    }
    Ok(out)
}

/// The messagestore frame of a spec message.
fn frame(ty: u8, service_id: u32, payload: Vec<u8>) -> Vec<u8> {
    encode(&SMsg {
        service_id,
        message_type: ty,
        delivery_mode: 3,
        hop_limit: 1,
        payload: Some(Arc::from(payload)),
        ..SMsg::default()
    })
}

fn serve(dir: &Path, listen: SocketAddr) -> anyhow::Result<()> {
    let specs = load_dir(dir)?;
    let sock = UdpSocket::bind(listen).with_context(|| format!("cannot bind {listen}"))?;
    let local = sock.local_addr()?;
    outln!("serving {} specs on udp {local}", specs.len())?;
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, peer) = sock.recv_from(&mut buf)?;
        let Some(m) = decode(&buf[..n]) else {
            continue;
        };
        if m.message_type != specbundle::SPEC_REQUEST {
            continue;
        }
        let Some(want) = specbundle::decode_request(m.payload.as_deref().unwrap_or(&[])) else {
            continue;
        };
        let found = match want {
            Some(h) => specs.get(&h),
            None => specs.values().find(|(id, _)| *id == m.service_id),
        };
        let Some((id, b)) = found else {
            eprintln!(
                "{peer}: no spec for ServiceID {} / {:?}",
                m.service_id,
                want.map(|h| specbundle::hex(&h))
            );
            continue;
        };
        for c in specbundle::chunks(b) {
            let f = frame(specbundle::SPEC_RESPONSE, *id, specbundle::encode_chunk(&c));
            if let Err(e) = sock.send_to(&f, peer) {
                eprintln!("{peer}: {e}");
            }
        }
        eprintln!("{peer}: served {}", specbundle::hex(&b.hash));
    }
}

/// Asks `from` for the spec `want` until its chunks are all in (`tries` requests, one second
/// apart).
fn fetch(want: &Hash, from: SocketAddr, tries: u32) -> anyhow::Result<Bundle> {
    let bind: SocketAddr = if from.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let sock = UdpSocket::bind(bind)?;
    sock.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
    let req = frame(
        specbundle::SPEC_REQUEST,
        0,
        specbundle::encode_request(Some(want)),
    );
    let mut assembly: Option<Assembly> = None;
    let mut buf = vec![0u8; 65_536];
    for _ in 0..tries.max(1) {
        sock.send_to(&req, from)?;
        loop {
            let (n, peer) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e.into()),
            };
            if peer != from {
                continue;
            }
            let Some(m) = decode(&buf[..n]) else { continue };
            if m.message_type != specbundle::SPEC_RESPONSE {
                continue;
            }
            let Some(c) = specbundle::decode_chunk(m.payload.as_deref().unwrap_or(&[])) else {
                continue;
            };
            if c.hash != *want {
                continue;
            }
            let a = match &mut assembly {
                Some(a) if a.matches(&c) => a,
                slot => slot.insert(Assembly::new(&c)),
            };
            if let Some(b) = a.add(c) {
                return Ok(b);
            }
        }
    }
    bail!(
        "{from} did not send spec {} after {tries} requests",
        specbundle::hex(want)
    )
}
