//! `viastack bench unicast` (issue 3 §4, issue 13 §5): reliable FIFO unicast on loopback,
//! viastack against its references in one run.
//!
//! Lanes, for each message size (1 KiB and 64 KiB by default):
//! - `reliable_fifo`: viastack `device < bundle < reliable-fifo < fragment` over UDP;
//! - `reliable_fifo_unbundled`: the same without `bundle` (one datagram per segment);
//! - `reliable_fifo_encrypt`: `device < encrypt < bundle < reliable-fifo < fragment`;
//! - `tcp`: kernel TCP, one connection; `udp`: raw kernel UDP, no reliability (what arrives);
//! - `quinn`: QUIC (quinn), one stream;
//! - `jgroups_unicast3`, `jgroups_unicast4`: JGroups 5.5 in two JVMs, its shipped `tcp.xml`
//!   and `tcp-new.xml` ([`jgroups`]); skipped with the reason printed when `java`/`mvn` are
//!   missing.
//!
//! **Method** ([`super::stats`]): one untimed warm-up round, then `--repeat` timed rounds; in
//! each round every lane moves the same number of messages, in an order that rotates by one
//! lane per round, so the machine's slow phases fall on every lane alike. A lane's figure is
//! the median of its rounds (its best is shown too); a ratio is of medians, with a 95 %
//! interval from a paired bootstrap over rounds. CPU time per message is the process's (both
//! JVMs' for JGroups) over the round, read from `/proc/PID/stat` for every lane alike.
//!
//! Ratios: `reliable_vs_tcp`, `encrypted_vs_quinn`, `bundled_vs_unbundled`,
//! `reliable_vs_jgroups_unicast3`/`_unicast4` and `reliable_vs_jgroups` (against the better of
//! the two). Plus a 64-byte ping-pong, `reliable_fifo` (with `bundle`) against raw UDP
//! (`reliable_vs_udp_p50`): bundling must add no delay to a lone message.
//!
//! viastack's sender and receiver threads are pinned to cores 0 and 1 (this machine has 2) and
//! share nothing but sockets; every loop blocks in `poll` rather than spinning.

use clap::Args;
use serde_json::{json, Map, Value};

pub mod jgroups;

/// The class path of the JGroups harness `bench/jgroups` (built with Maven when needed), or
/// why it cannot be had: shared with `bench multicast`'s peer lane.
pub fn jgroups_classpath() -> Result<String, String> {
    jgroups::classpath()
}
pub mod reference;
mod viastack;

use super::cpu::process_cpu;
use super::stats::{median, percentile, ratio_of_medians_ci95};

/// Options of `viastack bench unicast`.
#[derive(Args)]
pub struct UnicastArgs {
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1024usize, 65536])]
    size: Vec<usize>,
    /// Bytes to move per measurement (the message count follows from the size).
    #[arg(long, default_value_t = 256 << 20)]
    volume: u64,
    /// Timed rounds per lane (after one warm-up round); the median is reported.
    #[arg(long, default_value_t = 5)]
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
    /// Seconds from the first send to the last arrival (or its acknowledgement).
    pub secs: f64,
    /// CPU seconds the lane's processes used over the round, when known.
    pub cpu_secs: Option<f64>,
}

impl Measurement {
    fn messages_per_sec(&self) -> f64 {
        self.messages as f64 / self.secs
    }
    fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }
    fn cpu_us_per_message(&self) -> f64 {
        self.cpu_secs
            .map_or(f64::NAN, |c| c * 1e6 / self.messages as f64)
    }
}

pub use super::pin;

/// A 64-character hex key for the encrypted configuration (a benchmark key, not a secret).
const BENCH_KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// The stack of a viastack lane: `device [< encrypt] [< bundle] < reliable-fifo < fragment`.
fn reliable_stack(encrypt: bool, bundle: bool) -> String {
    let mut layers = vec!["dev"];
    let mut decl = String::from("[layers.dev]\nkind = \"device\"\n");
    if encrypt {
        layers.push("crypt");
        decl += &format!("[layers.crypt]\nkind = \"encrypt\"\nkey = \"{BENCH_KEY}\"\n");
    }
    if bundle {
        layers.push("pack");
        // Loopback carries 64 KiB datagrams: bundles as large as UDP allows, less the
        // device's tag and encrypt's nonce and tag.
        decl += "[layers.pack]\nkind = \"bundle\"\nmax_bytes = 65000\n";
    }
    layers.extend(["rel", "frag"]);
    format!(
        r#"{decl}
[layers.rel]
kind = "reliable-fifo"
# Windows sized for loopback, like a socket buffer there (the defaults suit a WAN path):
# 1024 segments in flight, 4096 messages held per peer.
send_window = 1024
receive_window = 1024
send_buffer = 4096
[layers.frag]
kind = "fragment"
# Fragments as large as UDP allows on loopback.
mtu = 60000
[qos.q]
layers = {layers:?}
[channels.data]
qos = "q"
"#
    )
}

/// The ping-pong's stack: reliable FIFO with `bundle`, which must not delay a lone message.
const PINGPONG_STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.pack]
kind = "bundle"
max_bytes = 65000
[layers.rel]
kind = "reliable-fifo"
[qos.q]
layers = ["dev", "pack", "rel"]
[channels.data]
qos = "q"
"#;

/// Every lane, in the order of the table.
const LANES: [&str; 8] = [
    "reliable_fifo",
    "reliable_fifo_unbundled",
    "reliable_fifo_encrypt",
    "tcp",
    "udp",
    "quinn",
    jgroups::STACKS[0].0,
    jgroups::STACKS[1].0,
];

/// One round's measurement of every lane (None: not run or failed).
type Round = [Option<Measurement>; LANES.len()];

/// The lane `name`'s rounds summarised: medians, best, CPU per message.
fn lane_json(rounds: &[Round], lane: usize) -> Value {
    let ms: Vec<Measurement> = rounds.iter().filter_map(|r| r[lane]).collect();
    if ms.is_empty() {
        return Value::Null;
    }
    let rate: Vec<f64> = ms.iter().map(Measurement::messages_per_sec).collect();
    let mb: Vec<f64> = ms.iter().map(Measurement::mb_per_sec).collect();
    let cpu: Vec<f64> = ms
        .iter()
        .map(Measurement::cpu_us_per_message)
        .filter(|c| c.is_finite())
        .collect();
    json!({
        "rounds": ms.len(),
        "messages": ms[0].messages,
        "messages_per_sec": median(&rate),
        "mb_per_sec": median(&mb),
        "gbit_per_sec": median(&mb) * 8.0 / 1e3,
        "best_messages_per_sec": rate.iter().copied().fold(f64::NAN, f64::max),
        "cpu_us_per_message": median(&cpu),
    })
}

/// Throughput ratio lane `a` / lane `b` on medians, with its 95 % interval.
fn ratio(rounds: &[Round], a: usize, b: usize) -> (f64, [f64; 2]) {
    let pairs: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|r| Some((r[a]?.mb_per_sec(), r[b]?.mb_per_sec())))
        .collect();
    let (xs, ys): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
    (median(&xs) / median(&ys), ratio_of_medians_ci95(&pairs))
}

/// The JGroups pairs, started once for the whole benchmark (their JITs warm over every round);
/// `None` with the reason printed when the lane cannot run.
fn start_jgroups(args: &UnicastArgs) -> Vec<Option<jgroups::Pair>> {
    let wanted: Vec<bool> = jgroups::STACKS.iter().map(|(n, _)| args.wants(n)).collect();
    if !wanted.iter().any(|w| *w) {
        return vec![None, None];
    }
    let cp = match jgroups::classpath() {
        Ok(cp) => cp,
        Err(why) => {
            eprintln!("bench unicast: JGroups lanes skipped: {why}");
            return vec![None, None];
        }
    };
    jgroups::STACKS
        .iter()
        .zip(wanted)
        .map(|((name, config), on)| {
            if !on {
                return None;
            }
            jgroups::Pair::start(&cp, config, &format!("viastack-bench-{name}"))
                .map_err(|e| eprintln!("bench unicast: {name} skipped: {e:#}"))
                .ok()
        })
        .collect()
}

/// Runs the benchmark and prints the result.
pub fn run(args: &UnicastArgs) -> anyhow::Result<()> {
    super::set_same_core(args.same_core);
    let mut peers = start_jgroups(args);
    let mut out = Map::new();
    for &size in &args.size {
        let size = size.max(8);
        let count = (args.volume / size as u64).clamp(100, 500_000);
        // Beyond the receiver's last credit: about 4 MiB, like a socket buffer, at least 16
        // messages, and at most half the bench stack's send buffer (4096 messages), which
        // refuses beyond it.
        let window = ((4u64 << 20) / size as u64).clamp(16, 2048);
        let mut rounds: Vec<Round> = Vec::new();
        for round in 0..=args.repeat.max(1) as usize {
            let mut row: Round = [None; LANES.len()];
            for k in 0..LANES.len() {
                let lane = (k + round) % LANES.len();
                let name = LANES[lane];
                if !args.wants(name) {
                    continue;
                }
                let cpu0 = process_cpu(None);
                let m = match name {
                    "reliable_fifo" => {
                        viastack::throughput(&reliable_stack(false, true), size, count, window)
                    }
                    "reliable_fifo_unbundled" => {
                        viastack::throughput(&reliable_stack(false, false), size, count, window)
                    }
                    "reliable_fifo_encrypt" => {
                        viastack::throughput(&reliable_stack(true, true), size, count, window)
                    }
                    "tcp" => reference::tcp(size, count),
                    "udp" => reference::udp(size, count),
                    "quinn" => reference::quinn(size, count),
                    _ => match peers[lane - 6].as_mut() {
                        Some(pair) => pair.round(size, count),
                        None => continue,
                    },
                };
                let cpu1 = process_cpu(None);
                match m {
                    Ok(mut m) => {
                        if m.cpu_secs.is_none() {
                            m.cpu_secs = cpu0.zip(cpu1).map(|(a, b)| (b - a).as_secs_f64());
                        }
                        row[lane] = Some(m);
                    }
                    Err(e) => {
                        eprintln!("bench unicast: {name} at {size} bytes failed: {e:#}");
                        if lane >= 6 {
                            peers[lane - 6] = None;
                        }
                    }
                }
            }
            // Round 0 warms every lane up and is not counted.
            if round > 0 {
                rounds.push(row);
            }
        }
        let mut row = Map::new();
        for (i, name) in LANES.iter().enumerate() {
            row.insert((*name).into(), lane_json(&rounds, i));
        }
        let mut put = |key: &str, (r, ci): (f64, [f64; 2])| {
            row.insert(key.into(), json!(r));
            row.insert(format!("{key}_ci95"), json!(ci));
        };
        put("reliable_vs_tcp", ratio(&rounds, 0, 3));
        put("encrypted_vs_quinn", ratio(&rounds, 2, 5));
        put("bundled_vs_unbundled", ratio(&rounds, 0, 1));
        let u3 = ratio(&rounds, 0, 6);
        let u4 = ratio(&rounds, 0, 7);
        put("reliable_vs_jgroups_unicast3", u3);
        put("reliable_vs_jgroups_unicast4", u4);
        // Against the better JGroups stack: the smaller ratio (NaN ones left out).
        let better = [u3, u4]
            .into_iter()
            .filter(|(r, _)| r.is_finite())
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap_or((f64::NAN, [f64::NAN; 2]));
        put("reliable_vs_jgroups", better);
        row.insert("messages".into(), json!(count));
        out.insert(size.to_string(), Value::Object(row));
    }
    drop(peers);
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
    outln!(
        "median of {} rounds per lane (lanes alternated, one warm-up round), loopback",
        args.repeat.max(1)
    )?;
    for &size in &args.size {
        let Some(Value::Object(row)) = out.get(&size.max(8).to_string()) else {
            continue;
        };
        outln!(
            "{} bytes per message, {} messages per round",
            size,
            row["messages"]
        )?;
        outln!(
            "  {:<26} {:>12} {:>10} {:>8} {:>12} {:>10}",
            "lane",
            "messages/s",
            "MB/s",
            "Gbit/s",
            "best msg/s",
            "CPU µs/msg"
        )?;
        for name in LANES {
            match row.get(name) {
                Some(Value::Object(m)) => {
                    let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
                    outln!(
                        "  {:<26} {:>12.0} {:>10.1} {:>8.2} {:>12.0} {:>10.2}",
                        name,
                        f("messages_per_sec"),
                        f("mb_per_sec"),
                        f("gbit_per_sec"),
                        f("best_messages_per_sec"),
                        f("cpu_us_per_message")
                    )?
                }
                _ => outln!("  {:<26} not run", name)?,
            }
        }
        for (key, target) in [
            ("reliable_vs_tcp", "target >= 0.5 at 64 KiB"),
            ("encrypted_vs_quinn", "target >= 2 at 64 KiB"),
            ("bundled_vs_unbundled", ""),
            ("reliable_vs_jgroups_unicast3", ""),
            ("reliable_vs_jgroups_unicast4", ""),
            ("reliable_vs_jgroups", "target >= 2 at 1 KiB and 64 KiB"),
        ] {
            let ci = |i: usize| row[&format!("{key}_ci95")][i].as_f64().unwrap_or(f64::NAN);
            outln!(
                "  {key:<30} {:>7.3}  (95% CI {:.3}–{:.3}) {target}",
                row[key].as_f64().unwrap_or(f64::NAN),
                ci(0),
                ci(1)
            )?;
        }
    }
    outln!(
        "ping-pong 64 B: reliable_fifo p50 {rp50:.1} µs p99 {rp99:.1} µs; raw UDP p50 {up50:.1} µs p99 {up99:.1} µs; ratio {:.2} (target <= 1.5)",
        rp50 / up50
    )?;
    Ok(())
}
