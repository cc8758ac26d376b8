//! `file-transfer`: one file from one process to another over a reliable viastack stack,
//! checked end to end — the receiver has the file only if its size and SHA-256 match, and the
//! sender succeeds only once the receiver has said so and every message was acknowledged.
//!
//! ```text
//! file-transfer recv --id 1 --addr 127.0.0.1:7001 --peer 0=127.0.0.1:7000 --out DIR
//! file-transfer send --id 0 --addr 127.0.0.1:7000 --peer 1=127.0.0.1:7001 FILE
//! ```
//!
//! Start the receiver first: it prints `listening on ADDR` once its node is open, waits for
//! one file, and exits. `--stack stacks/file-fifo.toml` (both sides) runs the same transfer
//! over `reliable-fifo` + `fragment` instead of SP (`stacks/file-sp.toml`, the default).
//! Progress bars go to standard error when it is a terminal (`--quiet`: none); the summary
//! (bytes, seconds, MB/s) goes to standard output. Exit status 0 means the file arrived
//! intact; anything else is reported on standard error with status 1.
//!
//! # Protocol
//! On the stack's channel `file`, which must deliver reliably and in order (both shipped
//! stacks do). Every message starts with a kind byte; numbers are big-endian.
//!
//! | kind | direction | body |
//! | --- | --- | --- |
//! | `0x01` OFFER | sender → receiver | version `1` (u8) · size (u64) · name length (u16) · name (UTF-8) |
//! | `0x02` CHUNK | sender → receiver | offset (u64) · up to [`CHUNK`] bytes of the file |
//! | `0x03` END | sender → receiver | SHA-256 of the content (32 bytes) |
//! | `0x04` ABORT | sender → receiver | reason (UTF-8): the sender gave up (say, a read error) |
//! | `0x10` ACCEPT | receiver → sender | — |
//! | `0x11` PROGRESS | receiver → sender | bytes written so far (u64), every [`PROGRESS_EVERY`] bytes |
//! | `0x12` DONE | receiver → sender | size (u64): size and digest verified, file in place |
//! | `0x13` FAILED | receiver → sender | reason (UTF-8): offer refused, or verification failed |
//!
//! The sender offers the file and waits for ACCEPT (a receiver refuses a name that is not a
//! plain file name — no `/`, `\`, `..` — or one that exists without `--overwrite`), then sends
//! the chunks, each at the offset where the last one ended, and END. The digest travels in
//! END, not in OFFER, so the sender reads the file once, hashing as it sends. The receiver
//! writes to `DIR/.NAME.part`, and at END checks the size and digest, syncs the file to disk
//! and renames it to `DIR/NAME` before answering DONE; on any failure it removes the partial
//! file and answers FAILED.
//!
//! # Memory and time bounds
//! The file is read and written in chunks, never whole. `Channel::send` waits while the
//! node's send queue is full or the stack holds `max_unsettled` messages unacknowledged, so
//! a sender waits for a slow receiver instead of buffering the file. A side that hears
//! nothing from its peer for `--timeout` (PROGRESS comes every MiB), or whose stack reports
//! messages undelivered (`SendFailed`), gives up with a message naming the peer.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use ring::digest;
use viastack::{Channel, FailureKind, Node, NodeEvent, NodeId, Notice, Received, RecvError};

/// Bytes of the file per CHUNK message.
const CHUNK: usize = 32 * 1024;
/// The receiver reports its progress every this many bytes.
const PROGRESS_EVERY: u64 = 1 << 20;
/// Longest name accepted: leaves room for the `.NAME.part` file under NAME_MAX (255).
const MAX_NAME: usize = 200;
/// The protocol version in OFFER.
const VERSION: u8 = 1;

#[derive(Parser)]
#[command(about = "Send one file over a reliable viastack stack, verified end to end")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send FILE to the receiver.
    Send(SendArgs),
    /// Receive one file into --out DIR.
    Recv(RecvArgs),
}

#[derive(Args)]
struct Common {
    /// The stack file (its channel `file` carries the transfer).
    #[arg(long, default_value = "stacks/file-sp.toml")]
    stack: PathBuf,
    /// Give up after this long without a word from the peer (`30`, `30s`, `500ms`).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    place: viastack_examples::Where,
}

#[derive(Args)]
struct SendArgs {
    #[command(flatten)]
    common: Common,
    /// The file to send.
    file: PathBuf,
    /// The name it gets at the receiver (default: FILE's own name).
    #[arg(long)]
    name: Option<String>,
    /// The receiving node (default: the other node of a two-node deployment).
    #[arg(long)]
    to: Option<u32>,
}

#[derive(Args)]
struct RecvArgs {
    #[command(flatten)]
    common: Common,
    /// The directory the file is written to (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Replace a file of the same name in DIR.
    #[arg(long)]
    overwrite: bool,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Send(a) => send(&a),
        Command::Recv(a) => receive(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("file-transfer: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The messages
// ---------------------------------------------------------------------------------------------

const OFFER: u8 = 0x01;
const CHUNK_KIND: u8 = 0x02;
const END: u8 = 0x03;
const ABORT: u8 = 0x04;
const ACCEPT: u8 = 0x10;
const PROGRESS: u8 = 0x11;
const DONE: u8 = 0x12;
const FAILED: u8 = 0x13;

/// One message of the protocol (see the module documentation).
#[derive(Debug, PartialEq, Eq)]
enum Msg<'a> {
    Offer { size: u64, name: &'a str },
    Chunk { offset: u64, data: &'a [u8] },
    End { sha256: [u8; 32] },
    Abort { reason: &'a str },
    Accept,
    Progress { bytes: u64 },
    Done { size: u64 },
    Failed { reason: &'a str },
}

impl<'a> Msg<'a> {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the message to `out`.
    fn encode_into(&self, out: &mut Vec<u8>) {
        match *self {
            Msg::Offer { size, name } => {
                out.extend([OFFER, VERSION]);
                out.extend(size.to_be_bytes());
                // A longer name is cut to what fits; the receiver refuses it anyway.
                let name = &name.as_bytes()[..name.len().min(usize::from(u16::MAX))];
                out.extend((name.len() as u16).to_be_bytes());
                out.extend(name);
            }
            Msg::Chunk { offset, data } => {
                out.push(CHUNK_KIND);
                out.extend(offset.to_be_bytes());
                out.extend(data);
            }
            Msg::End { sha256 } => {
                out.push(END);
                out.extend(sha256);
            }
            Msg::Abort { reason } => {
                out.push(ABORT);
                out.extend(reason.as_bytes());
            }
            Msg::Accept => out.push(ACCEPT),
            Msg::Progress { bytes } => {
                out.push(PROGRESS);
                out.extend(bytes.to_be_bytes());
            }
            Msg::Done { size } => {
                out.push(DONE);
                out.extend(size.to_be_bytes());
            }
            Msg::Failed { reason } => {
                out.push(FAILED);
                out.extend(reason.as_bytes());
            }
        }
    }

    /// # Errors
    /// An empty message, an unknown kind or version, a truncated body, a name or reason
    /// that is not UTF-8.
    fn decode(bytes: &'a [u8]) -> anyhow::Result<Self> {
        let (&kind, body) = bytes.split_first().context("an empty message")?;
        let u64_at = |at: usize| -> anyhow::Result<u64> {
            body.get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .with_context(|| format!("message kind {kind:#04x} is truncated"))
        };
        let text = |b: &'a [u8]| std::str::from_utf8(b).context("text that is not UTF-8");
        Ok(match kind {
            OFFER => {
                let version = body.first().copied().context("an empty OFFER")?;
                if version != VERSION {
                    bail!("OFFER of protocol version {version}; this program speaks {VERSION}");
                }
                let size = u64_at(1)?;
                let len = body
                    .get(9..11)
                    .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
                    .context("OFFER is truncated")?;
                let name = body
                    .get(11..11 + len)
                    .context("OFFER's name is truncated")?;
                Msg::Offer {
                    size,
                    name: text(name)?,
                }
            }
            CHUNK_KIND => Msg::Chunk {
                offset: u64_at(0)?,
                data: &body[8.min(body.len())..],
            },
            END => Msg::End {
                sha256: body.try_into().context("END holds no 32-byte digest")?,
            },
            ABORT => Msg::Abort {
                reason: text(body)?,
            },
            ACCEPT => Msg::Accept,
            PROGRESS => Msg::Progress { bytes: u64_at(0)? },
            DONE => Msg::Done { size: u64_at(0)? },
            FAILED => Msg::Failed {
                reason: text(body)?,
            },
            other => bail!("unknown message kind {other:#04x}"),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Both sides
// ---------------------------------------------------------------------------------------------

/// `30`, `30s` or `500ms`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (s.strip_suffix('s').unwrap_or(s), 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(Duration::from_secs_f64(n * unit)),
        _ => Err(format!(
            "`{s}`: write seconds (`30`, `30s`) or milliseconds (`500ms`)"
        )),
    }
}

/// The clock, for the application's own measurements.
#[allow(clippy::disallowed_methods)] // an application times its own transfer
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// The peer is gone or silent: nothing more can be said to it.
#[derive(Debug)]
struct PeerGone(String);

impl std::fmt::Display for PeerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PeerGone {}

/// The next message for the application (waiting at most `timeout` when given), skipping
/// notices that need no action.
///
/// # Errors
/// [`PeerGone`]: the stack reports messages to a peer undelivered, the timeout passed, or the
/// node closed.
fn next_message(node: &Node, timeout: Option<Duration>) -> anyhow::Result<Received> {
    loop {
        let event = match timeout {
            Some(t) => node.recv_timeout(t).map_err(|e| match e {
                RecvError::Timeout => PeerGone(format!(
                    "no word from the peer for {:.1} s (--timeout)",
                    t.as_secs_f64()
                )),
                RecvError::Closed => PeerGone("the node closed".into()),
            })?,
            None => node
                .recv()
                .ok_or_else(|| PeerGone("the node closed".into()))?,
        };
        match event {
            NodeEvent::Message(m) => return Ok(m),
            NodeEvent::Notice(Notice::SendFailed {
                kind, peer, tags, ..
            }) => {
                let why = match kind {
                    FailureKind::PeerUnreachable => "is unreachable (the stack gave up)",
                    FailureKind::SendRefused => "refused messages (a bound was reached)",
                    FailureKind::PeerRestarted => "restarted",
                    FailureKind::SendAborted => "did not acknowledge before the close",
                };
                return Err(PeerGone(format!(
                    "node {} {why}: {} message(s) not delivered",
                    peer.0,
                    tags.len()
                ))
                .into());
            }
            // Suspicions and other notices: the timeout and SendFailed decide.
            NodeEvent::Notice(_) => {}
        }
    }
}

/// A progress bar of `len` bytes on standard error (hidden when it is not a terminal).
fn progress_bar(len: u64, quiet: bool, what: String) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .map_or_else(
        |_| ProgressStyle::default_bar(),
        |s| s.progress_chars("=> "),
    );
    ProgressBar::new(len).with_style(style).with_message(what)
}

/// `bytes in seconds (MB/s)`.
fn rate(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let mb_s = if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    };
    format!("{bytes} bytes in {secs:.2} s ({mb_s:.1} MB/s)")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn open_node(c: &Common, builder: viastack::NodeBuilder) -> anyhow::Result<Node> {
    builder
        .stack_file(&c.stack)
        .deployment(c.place.deployment()?)
        .linger(c.timeout)
        .open()
        .with_context(|| format!("cannot open node {} of {}", c.place.id, c.stack.display()))
}

// ---------------------------------------------------------------------------------------------
// The sender
// ---------------------------------------------------------------------------------------------

fn send(args: &SendArgs) -> anyhow::Result<()> {
    let c = &args.common;
    let file =
        File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", args.file.display());
    }
    let size = meta.len();
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .file
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| {
                format!(
                    "{} has no UTF-8 file name: give --name",
                    args.file.display()
                )
            })?
            .to_string(),
    };
    // A short send queue: the file waits on disk, not in memory.
    let node = open_node(c, Node::builder().send_queue(64))?;
    let to = match args.to {
        Some(t) => NodeId(t),
        None if node.nodes() == 2 => NodeId(1 - node.id().0),
        None => bail!(
            "the deployment has {} nodes: say which receives the file with --to ID",
            node.nodes()
        ),
    };
    let channel = node.channel("file")?;
    channel.send(to, Msg::Offer { size, name: &name }.encode())?;
    let reply = |node: &Node| -> anyhow::Result<Vec<u8>> {
        loop {
            let m = next_message(node, Some(c.timeout))?;
            if m.from == to {
                return Ok(m.payload);
            }
        }
    };
    let answer = reply(&node).with_context(|| format!("offering {name} to node {}", to.0))?;
    match Msg::decode(&answer)? {
        Msg::Accept => {}
        Msg::Failed { reason } => bail!("node {} refused {name}: {reason}", to.0),
        other => bail!("node {} answered the offer with {other:?}", to.0),
    }
    let started = now();
    let bar = progress_bar(size, c.quiet, format!("{name} → node {}", to.0));
    // The file goes out from a thread of its own (its sends wait for the stack); this one
    // listens to the receiver.
    let pump = {
        let channel = channel.clone();
        std::thread::spawn(move || pump(file, size, &channel, to))
    };
    let outcome = loop {
        let payload = match reply(&node) {
            Ok(p) => p,
            Err(e) => break Err(e),
        };
        match Msg::decode(&payload)? {
            Msg::Progress { bytes } => bar.set_position(bytes),
            Msg::Done { size: confirmed } if confirmed == size => break Ok(()),
            Msg::Done { size: confirmed } => {
                break Err(anyhow!(
                    "node {} confirmed {confirmed} bytes of {size}",
                    to.0
                ))
            }
            Msg::Failed { reason } => break Err(anyhow!("node {} failed: {reason}", to.0)),
            other => break Err(anyhow!("unexpected {other:?} from node {}", to.0)),
        }
    };
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    // A read error of the pump is the cause of what the receiver answered: report it first.
    let sha256 = match (outcome, pump.join()) {
        (_, Err(_)) => bail!("the thread reading {} panicked", args.file.display()),
        (_, Ok(Err(e))) => return Err(e),
        (Err(e), Ok(Ok(_))) => return Err(e.context(format!("sending {name}"))),
        (Ok(()), Ok(Ok(sha256))) => sha256,
    };
    let report = node.close()?;
    if report.aborted > 0 {
        // The receiver's Done (its size and SHA-256) already proves every byte arrived; what
        // is unacknowledged is a retransmission whose ACK was lost after the receiver left.
        eprintln!(
            "note: {} message(s) to node {} unacknowledged at close; the receiver had already \
             confirmed the whole file",
            report.aborted, to.0
        );
    }
    println!(
        "sent {name} to node {}: {}; SHA-256 {} verified by the receiver",
        to.0,
        rate(size, elapsed),
        hex(&sha256[..8])
    );
    Ok(())
}

/// Sends the file in CHUNKs and END; on a local failure sends ABORT (the receiver answers it
/// with FAILED, which ends the transfer on the listening side). The digest sent.
fn pump(mut file: File, size: u64, channel: &Channel, to: NodeId) -> anyhow::Result<[u8; 32]> {
    let result = (|| -> anyhow::Result<[u8; 32]> {
        let mut sha = digest::Context::new(&digest::SHA256);
        let mut offset = 0u64;
        loop {
            // The message is built in place: kind and offset, then the bytes read.
            let mut msg = Vec::with_capacity(9 + CHUNK);
            Msg::Chunk { offset, data: &[] }.encode_into(&mut msg);
            let head = msg.len();
            msg.resize(head + CHUNK, 0);
            let n = read_full(&mut file, &mut msg[head..]).context("reading the file")?;
            if n == 0 {
                break;
            }
            msg.truncate(head + n);
            sha.update(&msg[head..]);
            offset += n as u64;
            if offset > size {
                bail!("the file grew while it was sent (offered {size} bytes)");
            }
            channel.send(to, msg)?;
        }
        if offset != size {
            bail!("the file shrank while it was sent: {offset} of {size} bytes");
        }
        let sha256: [u8; 32] = sha
            .finish()
            .as_ref()
            .try_into()
            .context("a SHA-256 digest of 32 bytes")?;
        channel.send(to, Msg::End { sha256 }.encode())?;
        Ok(sha256)
    })();
    if let Err(e) = &result {
        let reason = format!("{e:#}");
        let _ = channel.send(to, Msg::Abort { reason: &reason }.encode());
    }
    result
}

// ---------------------------------------------------------------------------------------------
// The receiver
// ---------------------------------------------------------------------------------------------

/// `name` if it is a plain file name: one path component, no separator, not `.` or `..`.
///
/// # Errors
/// Why it is not.
fn plain_file_name(name: &str) -> Result<&str, String> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).file_name() == Some(name.as_ref());
    if !plain {
        return Err(format!(
            "`{}` is not a plain file name",
            name.escape_debug()
        ));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "a name of {} bytes (at most {MAX_NAME})",
            name.len()
        ));
    }
    Ok(name)
}

fn receive(args: &RecvArgs) -> anyhow::Result<()> {
    let c = &args.common;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // Few events waiting: chunks wait in the sender's stack, not in this process.
    let node = open_node(c, Node::builder().event_queue(256))?;
    let channel = node.channel("file")?;
    println!(
        "node {} listening on {}; waiting for a file",
        node.id().0,
        node.local_addr()
    );
    // Wait as long as it takes for an offer; then the timeout applies.
    let offer = next_message(&node, None)?;
    let from = offer.from;
    let (size, name) = match Msg::decode(&offer.payload)? {
        Msg::Offer { size, name } => (size, name.to_string()),
        other => bail!("node {} began with {other:?}, not an offer", from.0),
    };
    let say = |m: Msg<'_>| channel.send(from, m.encode());
    let target = match plain_file_name(&name) {
        Ok(n) => args.out.join(n),
        Err(reason) => {
            say(Msg::Failed { reason: &reason })?;
            node.close()?;
            bail!("refused an offer from node {}: {reason}", from.0);
        }
    };
    if target.exists() && !args.overwrite {
        let reason = format!("{name} exists at the receiver (it may pass --overwrite)");
        say(Msg::Failed { reason: &reason })?;
        node.close()?;
        bail!("refused an offer from node {}: {reason}", from.0);
    }
    let part = args.out.join(format!(".{name}.part"));
    let file = File::create(&part).with_context(|| format!("cannot create {}", part.display()))?;
    say(Msg::Accept)?;
    let started = now();
    let bar = progress_bar(size, c.quiet, format!("{name} ← node {}", from.0));
    let result = write_file(&node, &channel, from, file, size, c.timeout, &bar);
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let sha256 = match result.and_then(|sha| {
        std::fs::rename(&part, &target)
            .with_context(|| format!("cannot rename {} to {}", part.display(), target.display()))?;
        Ok(sha)
    }) {
        Ok(sha) => sha,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            if e.downcast_ref::<PeerGone>().is_none() {
                // The sender is there to be told.
                let reason = format!("{e:#}");
                let _ = say(Msg::Failed { reason: &reason });
                let _ = node.close();
            }
            return Err(e.context(format!("receiving {name} from node {}", from.0)));
        }
    };
    say(Msg::Done { size })?;
    let report = node.close()?;
    println!(
        "received {name} from node {}: {}; SHA-256 {} verified; written to {}",
        from.0,
        rate(size, elapsed),
        hex(&sha256[..8]),
        target.display()
    );
    if report.aborted > 0 {
        eprintln!(
            "file-transfer: the file is intact, but node {} did not acknowledge the confirmation",
            from.0
        );
    }
    Ok(())
}

/// Writes the chunks from `from` until END; checks the size and digest and syncs the file.
fn write_file(
    node: &Node,
    channel: &Channel,
    from: NodeId,
    file: File,
    size: u64,
    timeout: Duration,
    bar: &ProgressBar,
) -> anyhow::Result<[u8; 32]> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut sha = digest::Context::new(&digest::SHA256);
    let mut written = 0u64;
    let mut reported = 0u64;
    let sent = loop {
        let m = next_message(node, Some(timeout))?;
        if m.from != from {
            let busy = Msg::Failed {
                reason: "busy with another transfer",
            };
            channel.send(m.from, busy.encode())?;
            continue;
        }
        match Msg::decode(&m.payload)? {
            Msg::Chunk { offset, data } => {
                if offset != written {
                    bail!("a chunk at offset {offset} where {written} was expected");
                }
                if written + data.len() as u64 > size {
                    bail!("more than the {size} bytes offered");
                }
                out.write_all(data).context("writing the file")?;
                sha.update(data);
                written += data.len() as u64;
                bar.set_position(written);
                if written - reported >= PROGRESS_EVERY {
                    reported = written;
                    channel.send(from, Msg::Progress { bytes: written }.encode())?;
                }
            }
            Msg::End { sha256 } => break sha256,
            Msg::Abort { reason } => bail!("the sender gave up: {reason}"),
            other => bail!("unexpected {other:?} during the transfer"),
        }
    };
    if written != size {
        bail!("{written} bytes received, {size} offered");
    }
    if sha.finish().as_ref() != sent {
        bail!("the SHA-256 of the bytes received differs from the sender's");
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all().context("syncing the file to disk")?;
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_file_names_are_accepted() {
        for ok in [
            "report.pdf",
            "a",
            ".hidden",
            "..dots",
            "with space",
            "été.txt",
        ] {
            assert_eq!(plain_file_name(ok), Ok(ok));
        }
        for bad in [
            "",
            ".",
            "..",
            "../evil",
            "../../etc/passwd",
            "dir/file",
            "/etc/passwd",
            "dir\\file",
            "..\\evil",
            "nul\0byte",
            "trailing/",
        ] {
            assert!(plain_file_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(plain_file_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(plain_file_name(&"x".repeat(MAX_NAME + 1)).is_err());
    }

    #[test]
    fn messages_survive_their_encoding() {
        let data = [7u8; 100];
        for m in [
            Msg::Offer {
                size: 1 << 40,
                name: "été.bin",
            },
            Msg::Chunk {
                offset: 12345,
                data: &data,
            },
            Msg::Chunk {
                offset: 0,
                data: &[],
            },
            Msg::End { sha256: [9; 32] },
            Msg::Abort { reason: "disk" },
            Msg::Accept,
            Msg::Progress { bytes: 1 << 20 },
            Msg::Done { size: 42 },
            Msg::Failed { reason: "no" },
        ] {
            assert_eq!(Msg::decode(&m.encode()).ok(), Some(m));
        }
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in [
            &[][..],
            &[0x7f],
            &[OFFER],
            &[OFFER, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0],
            &[OFFER, VERSION, 0, 0, 0, 0, 0, 0, 0, 1, 0, 5, b'a'],
            &[OFFER, VERSION, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0xff],
            &[CHUNK_KIND, 0, 0],
            &[END, 1, 2, 3],
            &[PROGRESS, 1],
            &[FAILED, 0xc3],
        ] {
            assert!(Msg::decode(bad).is_err(), "{bad:?} decoded");
        }
    }

    #[test]
    fn durations_in_seconds_or_milliseconds() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
