//! `viastack bench unicast` (issue 3 §4): reliable FIFO unicast on loopback, viastack against
//! its references in one run.
//!
//! Configurations, for each message size (1 KiB and 64 KiB by default):
//! - `reliable_fifo`: viastack `device < reliable-fifo < fragment` over UDP;
//! - `reliable_fifo_encrypt`: the same with `encrypt` (ChaCha20-Poly1305) above the device;
//! - `tcp`: kernel TCP, one connection;
//! - `udp`: raw kernel UDP, no reliability (what arrives);
//! - `quinn`: QUIC (quinn), one stream.
//!
//! Ratios: `reliable_vs_tcp` and `encrypted_vs_quinn` (throughput). Plus a 64-byte ping-pong,
//! `reliable_fifo` against raw UDP (p50/p99 round trip, and `reliable_vs_udp_p50`).
//!
//! The sender runs on core 0 and the receiver on core 1 (this machine has 2); every loop
//! blocks in `poll` rather than spinning. Each configuration keeps its best of `--repeat`
//! runs, measured round-robin so machine noise hits them alike.

use clap::Args;
use serde_json::{json, Map, Value};

pub mod reference;
mod viastack;

/// Options of `viastack bench unicast`.
#[derive(Args)]
pub struct UnicastArgs {
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1024usize, 65536])]
    size: Vec<usize>,
    /// Bytes to move per measurement (the message count follows from the size).
    #[arg(long, default_value_t = 256 << 20)]
    volume: u64,
    /// Runs per configuration (the best is kept).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Round trips in the ping-pong.
    #[arg(long, default_value_t = 5000)]
    rounds: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Run only these parts (for profiling): configuration names and/or `pingpong`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Pin both sides to core 0 instead of cores 0 and 1 (one host's view: no cross-core
    /// wake-ups, which dominate small round trips on a VM).
    #[arg(long)]
    same_core: bool,
}

impl UnicastArgs {
    fn wants(&self, part: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == part)
    }
}

/// One measured transfer.
#[derive(Debug, Clone, Copy)]
pub struct Measurement {
    /// Messages that arrived.
    pub messages: u64,
    /// Payload bytes that arrived.
    pub bytes: u64,
    /// Seconds from the first send to the last arrival.
    pub secs: f64,
}

impl Measurement {
    fn messages_per_sec(&self) -> f64 {
        self.messages as f64 / self.secs
    }
    fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }
    fn json(&self) -> Value {
        json!({
            "messages": self.messages,
            "bytes": self.bytes,
            "secs": self.secs,
            "messages_per_sec": self.messages_per_sec(),
            "mb_per_sec": self.mb_per_sec(),
            "gbit_per_sec": self.bytes as f64 * 8.0 / self.secs / 1e9,
        })
    }
}

pub use super::pin;

/// A 64-character hex key for the encrypted configuration (a benchmark key, not a secret).
const BENCH_KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn reliable_stack(encrypt: bool) -> String {
    let crypt = if encrypt {
        format!("[layers.crypt]\nkind = \"encrypt\"\nkey = \"{BENCH_KEY}\"\n")
    } else {
        String::new()
    };
    let layers = if encrypt {
        r#"["dev", "crypt", "rel", "frag"]"#
    } else {
        r#"["dev", "rel", "frag"]"#
    };
    format!(
        r#"
[layers.dev]
kind = "device"
{crypt}
[layers.rel]
kind = "reliable-fifo"
[layers.frag]
kind = "fragment"
# Loopback carries 64 KiB datagrams: fragments as large as UDP allows.
mtu = 60000
[qos.q]
layers = {layers}
[channels.data]
qos = "q"
"#
    )
}

const PINGPONG_STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.rel]
kind = "reliable-fifo"
[qos.q]
layers = ["dev", "rel"]
[channels.data]
qos = "q"
"#;

/// The `q` quantile of `samples` (sorted in place), nearest rank.
pub fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples.get(i).copied().unwrap_or(f64::NAN)
}

/// Runs the benchmark and prints the result.
pub fn run(args: &UnicastArgs) -> anyhow::Result<()> {
    super::set_same_core(args.same_core);
    let configs = [
        "reliable_fifo",
        "reliable_fifo_encrypt",
        "tcp",
        "udp",
        "quinn",
    ];
    let mut out = Map::new();
    for &size in &args.size {
        let size = size.max(1);
        let count = (args.volume / size as u64).clamp(100, 500_000);
        // In flight: about 4 MiB, like a socket buffer, at least 16 messages, and at most half
        // reliable-fifo's default send buffer (1024 messages), which refuses beyond it.
        let window = ((4u64 << 20) / size as u64).clamp(16, 512);
        let mut best: Vec<Option<Measurement>> = vec![None; configs.len()];
        for _ in 0..args.repeat.max(1) {
            for (i, name) in configs.iter().enumerate() {
                if !args.wants(name) {
                    continue;
                }
                let m = match *name {
                    "reliable_fifo" => {
                        viastack::throughput(&reliable_stack(false), size, count, window)
                    }
                    "reliable_fifo_encrypt" => {
                        viastack::throughput(&reliable_stack(true), size, count, window)
                    }
                    "tcp" => reference::tcp(size, count),
                    "udp" => reference::udp(size, count),
                    _ => reference::quinn(size, count),
                };
                match m {
                    Ok(m) if best[i].is_none_or(|b| m.mb_per_sec() > b.mb_per_sec()) => {
                        best[i] = Some(m)
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("bench unicast: {name} at {size} bytes failed: {e:#}"),
                }
            }
        }
        let mut row = Map::new();
        for (name, m) in configs.iter().zip(&best) {
            row.insert((*name).into(), m.map_or(Value::Null, |m| m.json()));
        }
        let rate = |i: usize| best[i].map_or(f64::NAN, |m| m.mb_per_sec());
        row.insert("reliable_vs_tcp".into(), json!(rate(0) / rate(2)));
        row.insert("encrypted_vs_quinn".into(), json!(rate(1) / rate(4)));
        out.insert(size.to_string(), Value::Object(row));
    }
    let (mut reliable, mut raw) = if args.wants("pingpong") {
        (
            viastack::pingpong(PINGPONG_STACK, 64, args.rounds)?,
            reference::udp_pingpong(64, args.rounds)?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let (rp50, rp99) = (
        percentile(&mut reliable, 0.5),
        percentile(&mut reliable, 0.99),
    );
    let (up50, up99) = (percentile(&mut raw, 0.5), percentile(&mut raw, 0.99));
    out.insert(
        "pingpong_64".into(),
        json!({
            "reliable_fifo": { "p50_us": rp50, "p99_us": rp99 },
            "udp": { "p50_us": up50, "p99_us": up99 },
            "reliable_vs_udp_p50": rp50 / up50,
        }),
    );
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&Value::Object(out))?)?;
        return Ok(());
    }
    for &size in &args.size {
        let Some(Value::Object(row)) = out.get(&size.max(1).to_string()) else {
            continue;
        };
        outln!("{} bytes per message", size)?;
        outln!(
            "  {:<24} {:>14} {:>12} {:>10}",
            "configuration",
            "messages/s",
            "MB/s",
            "Gbit/s"
        )?;
        for name in configs {
            match row.get(name) {
                Some(Value::Object(m)) => outln!(
                    "  {:<24} {:>14.0} {:>12.1} {:>10.2}",
                    name,
                    m["messages_per_sec"].as_f64().unwrap_or(f64::NAN),
                    m["mb_per_sec"].as_f64().unwrap_or(f64::NAN),
                    m["gbit_per_sec"].as_f64().unwrap_or(f64::NAN)
                )?,
                _ => outln!("  {:<24} failed", name)?,
            }
        }
        outln!(
            "  reliable_vs_tcp {:.3} (target >= 0.5 at 64 KiB)   encrypted_vs_quinn {:.3} (target >= 2 at 64 KiB)",
            row["reliable_vs_tcp"].as_f64().unwrap_or(f64::NAN),
            row["encrypted_vs_quinn"].as_f64().unwrap_or(f64::NAN)
        )?;
    }
    outln!(
        "ping-pong 64 B: reliable_fifo p50 {rp50:.1} µs p99 {rp99:.1} µs; raw UDP p50 {up50:.1} µs p99 {up99:.1} µs; ratio {:.2} (target <= 1.5)",
        rp50 / up50
    )?;
    Ok(())
}
