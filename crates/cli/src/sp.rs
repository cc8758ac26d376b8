//! `viastack sp`: the SP transport from the command line (issue 4 "Interfaces").
//!
//! - `sp listen ADDR [--out FILE]` accepts connections and prints one line per event; with
//!   `--out`, writes the messages of the first connection to FILE and exits when it closes;
//! - `sp send ADDR FILE [--reliability MODE] [--priority N]` sends FILE (as messages of at most
//!   255 blocks), waits for the acknowledgements (RELIABLE) and closes;
//! - `sp decode HEX` prints one SP header as a JSON object, or exits 1 naming the invalid field.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::json;
use viastack_sp::socket::{SpError, SpSocket};
use viastack_sp::wire::{Packet, Repr};
use viastack_sp::{Config, Event, Reliability};

/// What to do with SP.
#[derive(Subcommand)]
pub enum SpCommand {
    /// Accept SP connections on ADDR and report what arrives.
    Listen(ListenArgs),
    /// Send FILE to an SP listener at ADDR.
    Send(SendArgs),
    /// Decode one SP packet given in hex and print its header as JSON.
    Decode {
        /// The packet, hex (whitespace ignored).
        hex: String,
    },
}

/// Options of `sp listen`.
#[derive(Args)]
pub struct ListenArgs {
    /// Address to bind, e.g. 127.0.0.1:7400 (port 0 picks one; the first line says which).
    addr: String,
    /// Write the messages of the first connection to this file and exit when it closes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Block size in bytes for this side's messages.
    #[arg(long, default_value_t = Config::default().block_size)]
    block_size: usize,
}

/// Options of `sp send`.
#[derive(Args)]
pub struct SendArgs {
    /// The listener's address.
    addr: String,
    /// The file to send.
    file: PathBuf,
    /// unreliable, retransmit-on-error, checksummed or reliable.
    #[arg(long, default_value = "reliable", value_parser = reliability_arg)]
    reliability: Reliability,
    /// Priority 0 (lowest) to 3 (highest).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    priority: u8,
    /// Block size in bytes.
    #[arg(long, default_value_t = Config::default().block_size)]
    block_size: usize,
    /// Seconds to wait for the transfer.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

fn reliability_arg(s: &str) -> Result<Reliability, String> {
    Reliability::from_name(s).ok_or_else(|| {
        format!(
            "unknown reliability {s:?}: unreliable, retransmit-on-error, checksummed or reliable"
        )
    })
}

/// Runs one `sp` command.
pub fn run(cmd: SpCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SpCommand::Listen(a) => listen(&a),
        SpCommand::Send(a) => send(&a),
        SpCommand::Decode { hex } => Ok(decode(&hex)),
    }
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("{addr}: not an address"))?
        .next()
        .with_context(|| format!("{addr}: resolves to nothing"))
}

fn listen(a: &ListenArgs) -> anyhow::Result<ExitCode> {
    let config = Config {
        block_size: a.block_size,
        ..Config::default()
    };
    let mut sock = SpSocket::bind(resolve(&a.addr)?, config, true)
        .with_context(|| format!("{}: cannot bind", a.addr))?;
    outln!("listening on {}", sock.local_addr()?)?;
    let mut first = None;
    let mut out = Vec::new();
    loop {
        match sock.recv_message(Some(Duration::from_millis(100))) {
            Ok(m) => {
                outln!(
                    "message seq={} priority={} bytes={} from {}",
                    m.seq,
                    m.priority,
                    m.data.len(),
                    m.peer
                )?;
                if first.is_none_or(|h| h == m.handle) {
                    first = Some(m.handle);
                    out.extend_from_slice(&m.data);
                }
            }
            Err(SpError::Timeout) => {}
            Err(e) => return Err(e.into()),
        }
        for (h, ev) in sock.take_notices() {
            outln!("connection {} {ev:?}", h.0)?;
            let end = matches!(ev, Event::Closed { .. } | Event::Failed { .. });
            if let (true, Some(path)) = (end && first.is_none_or(|f| f == h), &a.out) {
                std::fs::write(path, &out)
                    .with_context(|| format!("{}: cannot write", path.display()))?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

fn send(a: &SendArgs) -> anyhow::Result<ExitCode> {
    let data =
        std::fs::read(&a.file).with_context(|| format!("{}: cannot read", a.file.display()))?;
    let config = Config {
        block_size: a.block_size,
        reliability: a.reliability,
        ..Config::default()
    };
    let max = config.max_message(a.reliability);
    let peer = resolve(&a.addr)?;
    let mut sock = SpSocket::bind("0.0.0.0:0", config, false)?;
    let timeout = Duration::from_secs(a.timeout);
    let h = sock
        .connect(peer, timeout)
        .with_context(|| format!("cannot connect to {peer}"))?;
    let mut messages = 0;
    for chunk in data.chunks(max.max(1)) {
        sock.send_message(h, chunk.to_vec(), a.priority)?;
        messages += 1;
    }
    if data.is_empty() {
        sock.send_message(h, Vec::new(), a.priority)?;
        messages = 1;
    }
    sock.flush(h, timeout)
        .context("transfer did not complete")?;
    let stats = sock.stats(h).unwrap_or_default();
    let reason = sock.close(h, timeout).context("close")?;
    outln!(
        "sent {} bytes in {messages} message(s) to {peer} ({}, priority {}): {} packets, {} retransmitted, closed {reason:?}",
        data.len(),
        a.reliability.name(),
        a.priority,
        stats.packets_sent,
        stats.retransmits
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Decodes `hex` and prints the JSON object, or names the invalid field on stderr.
fn decode(hex: &str) -> ExitCode {
    let clean: String = hex.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes: Option<Vec<u8>> = (clean.len() & 1 == 0)
        .then(|| {
            (0..clean.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(clean.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .flatten();
    let Some(bytes) = bytes else {
        eprintln!("error: invalid hex: {hex:?} is not an even number of hex digits");
        return ExitCode::FAILURE;
    };
    let packet = match Packet::new_checked(&bytes[..]) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: invalid {}: {e}", e.field());
            return ExitCode::FAILURE;
        }
    };
    let Ok(r) = Repr::parse_unverified(&packet) else {
        eprintln!("error: invalid type");
        return ExitCode::FAILURE;
    };
    let v = json!({
        "dest_id": r.dest_id,
        "src_id": r.src_id,
        "type": r.packet_type.name(),
        "priority": r.priority,
        "cb": r.cb,
        "flags": r.flags.names().collect::<Vec<_>>(),
        "checksum": packet.checksum(),
        "checksum_ok": packet.verify_checksum(),
        "total_len": packet.total_len(),
        "pblock": r.pblock,
        "tblock": r.tblock,
        "mess_seq_no": r.mess_seq_no,
        "mess_ack_no": r.mess_ack_no,
        "sync_no": r.sync_no,
        "window_size": r.window_size,
        "payload_len": r.payload_len,
    });
    match outln!("{v}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
