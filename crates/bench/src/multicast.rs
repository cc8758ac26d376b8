//! `viastack bench multicast` (issue 17 "Figures", seed 004's measurements): the multicast
//! service composed from protocol components, measured the `bench sp` way — lanes take turns
//! round by round, each figure is the median of its rounds with the rounds' range or a 95 %
//! interval.
//!
//! - **Stack latency** (seed 004 "stack latency"), per component and per stack, against
//!   message size: two hosts on one LAN run cumulative stacks — `interface` + `mcast-forward`,
//!   then `+ checksum`, `+ igmp`, `+ dvmrp` — in the deterministic simulator with zero-latency
//!   links; a stack's figure is the wall-clock time per multicast message (the sender's stack
//!   down, the receiver's up, plus the simulator's fixed cost), a component's is the paired
//!   difference between the stack with it and the one without (the simulator's cost cancels).
//!   Beside them the whole stack's one-way latency on loopback UDP (median, real time).
//! - **Basic multicast throughput** against message size: seed 004's 15-node network
//!   (`stacks/mcast-net15.toml`: receivers H1–H4 four hops from source A) with every node a
//!   thread on loopback UDP, all four hosts joined, A sending at an offered rate for a window;
//!   messages/s received per receiver over the window and the fraction delivered.
//! - **Reliable multicast against link error rate** 0–20 %: `stacks/mcast-reliable.toml` (the
//!   `mcast-reliable` layer) in the simulator with the links' loss set to each rate; skipped
//!   with the reason while that file does not exist.
//! - **Join and leave latency**: the 15-node network in the simulator, A multicasting every
//!   millisecond; H1 joins (its report, the graft up the pruned branch) and later leaves (the
//!   last-member queries, the prune); join latency = join → first data delivered at H1, leave
//!   latency = leave → last data reaching H1's LAN, read from H1's counters every 0.5 ms of
//!   virtual time, over several seeds.
//! - **Peer:** JGroups with its shipped `tcp.xml` (NAKACK2 reliable multicast over loopback
//!   TCP) in one JVM (`bench/jgroups`, `McastPeer`: a sender and as many receiving channels as
//!   viastack has receivers), 1000-byte messages, beside viastack's reliable multicast on
//!   loopback in the same run, the same shape (one sender, four receivers on one LAN segment,
//!   no routers; the sender as fast as the service accepts, waiting for room on `SendRefused`;
//!   first send to last delivery at every receiver; exactly once asserted — `multicast_peer.rs`):
//!   `reliable_multicast_vs_jgroups` (messages/s received per receiver, target ≥ 2).
//! - **Testbed** (`--testbed`, root): how close basic multicast comes to the links' capacity
//!   on the netns testbed (`mcast_testbed.rs`: every link tbf-limited, A offering stepped
//!   rates, each receiver's link-layer bits/s from its interface counters); without root the
//!   lane says so and is skipped.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration as WallDuration, Instant as WallClock};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use serde_json::{json, Map, Value};
use viastack_kernel::{Duration, NodeId};
use viastack_scenario::RunOptions;
use viastack_stack::{Catalog, StackFile};

use super::plot::{Chart, Scale, Series};

#[path = "multicast_peer.rs"]
mod peer;
use super::pause::Paused;
use super::stats::{median, percentile, ratio_of_medians_ci95};

/// Options of `viastack bench multicast`.
#[derive(Args)]
pub struct MulticastArgs {
    /// Message sizes in bytes for stack latency and throughput, comma-separated.
    #[arg(long, value_delimiter = ',')]
    size: Vec<usize>,
    /// Rounds: every lane runs once per round, in an order that rotates.
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Messages per stack-latency run (simulator).
    #[arg(long, default_value_t = 5000)]
    messages: u64,
    /// Send window of the loopback throughput runs, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    window_ms: u64,
    /// Offered rate of the loopback throughput runs: microseconds between two messages.
    #[arg(long, default_value_t = 50)]
    interval_us: u64,
    /// Link error rates of the reliable lane, comma-separated fractions.
    #[arg(long, value_delimiter = ',')]
    error_rate: Vec<f64>,
    /// Seeds of the join/leave lane.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// Messages per peer-lane round (1000 bytes each).
    #[arg(long, default_value_t = 20000)]
    peer_messages: u64,
    /// Only these lanes, comma-separated: stack, throughput, reliable, join, peer, testbed.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Peer lane: measure viastack's side only (no JVM), e.g. to profile it.
    #[arg(long)]
    no_jgroups: bool,
    /// Peer lane: leave the JVM running during viastack's rounds (by default it is stopped with
    /// SIGSTOP for the round: an idle JVM takes CPU from the measured lane).
    #[arg(long)]
    no_pause: bool,
    /// Also measure on the netns testbed (needs root).
    #[arg(long)]
    testbed: bool,
    /// Tiny sizes and counts: a smoke test, not figures to record.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
    /// Write PNG charts into this directory (created if missing).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// The receivers of the 15-node network (and of the peer lane).
const RECEIVERS: [&str; 4] = ["H1", "H2", "H3", "H4"];
/// The group every stack here uses.
const GROUP: &str = "239.1.1.1";

/// The source tree's `stacks/` directory.
fn stacks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../stacks")
}

fn load(path: &Path, catalog: &Catalog) -> anyhow::Result<StackFile> {
    let src = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    viastack_stack::parse(&path.display().to_string(), &src, catalog)
        .map_err(|d| anyhow!("{}: {d}", path.display()))
}

fn group_addr() -> u32 {
    u32::from(
        GROUP
            .parse::<std::net::Ipv4Addr>()
            .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
    )
}

fn dur_us(us: u64) -> Duration {
    Duration::from_micros(us)
}

/// The cumulative stacks of the stack-latency lane: name, the component it adds, its layers.
const LAN_STACKS: [(&str, &str, &str); 4] = [
    ("interface+forward", "mcast-forward", r#""dev", "data""#),
    ("+checksum", "checksum", r#""dev", "sum", "data""#),
    ("+igmp", "igmp", r#""dev", "sum", "groups", "data""#),
    (
        "+dvmrp",
        "dvmrp",
        r#""dev", "sum", "route", "groups", "data""#,
    ),
];

/// Two hosts on one LAN with `layers`, A multicasting `messages` of `size` bytes every
/// `interval`, H1 joined.
fn lan_text(layers: &str, size: usize, messages: u64, interval_us: u64, latency: &str) -> String {
    let start_ms = 300;
    let duration_ms = start_ms + messages * interval_us / 1000 + 500;
    format!(
        r#"# bench multicast: two hosts on one LAN (generated)
[layers.dev]
kind = "interface"
port = 0
[layers.sum]
kind = "checksum"
[layers.route]
kind = "dvmrp"
time_scale = 0.1
[layers.groups]
kind = "igmp"
time_scale = 0.1
[layers.data]
kind = "mcast-forward"
group = "{GROUP}"
[qos.if0]
layers = [{layers}]
[channels.if0]
qos = "if0"
[[topology.node]]
name = "A"
role = "host"
[[topology.node]]
name = "H1"
role = "host"
[[topology.link]]
name = "lan"
nodes = ["A", "H1"]
[scenario]
nodes = 2
seed = 1
duration = "{duration_ms}ms"
expect = "none"
[scenario.link]
latency = "{latency}"
[[scenario.group]]
node = 1
action = "join"
group = "{GROUP}"
at = "100ms"
[[scenario.workload]]
channel = "if0"
pattern = "multicast"
senders = [0]
messages = {messages}
size = {size}
interval = "{interval_us}us"
start = "{start_ms}ms"
"#
    )
}

fn parse_text(name: &str, text: &str, catalog: &Catalog) -> anyhow::Result<StackFile> {
    viastack_stack::parse(name, text, catalog).map_err(|d| anyhow!("{name}: {d}"))
}

/// Sum of counter `name` over every node of a report (`layer.counter`, any layer name).
fn counter(report: &viastack_scenario::Report, suffix: &str) -> u64 {
    report
        .counters
        .iter()
        .filter(|(k, _)| k.ends_with(suffix))
        .map(|(_, v)| *v)
        .sum()
}

/// One stack-latency measurement: wall-clock ns per message of a simulated LAN run.
fn stack_cost(file: &StackFile, catalog: &Catalog, messages: u64) -> anyhow::Result<f64> {
    let t0 = WallClock::now();
    let report = viastack_scenario::run(file, catalog, &RunOptions::default(), |_| {})?;
    let secs = t0.elapsed().as_secs_f64();
    let got = counter(&report, ".data_delivered");
    if got < messages {
        bail!("{}: {got} of {messages} delivered", file.path);
    }
    Ok(secs * 1e9 / messages as f64)
}

/// Min and max of `v`.
fn range(v: &[f64]) -> [f64; 2] {
    [
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    ]
}

fn lane_stack_latency(args: &Cfg, catalog: &Catalog) -> anyhow::Result<Value> {
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let files = LAN_STACKS
            .iter()
            .map(|(name, _, layers)| {
                parse_text(
                    &format!("lan{name}"),
                    &lan_text(layers, size, args.messages, 100, "0ms"),
                    catalog,
                )
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
        for file in &files {
            stack_cost(file, catalog, args.messages)?; // warm-up: caches, allocator
        }
        for round in 0..args.repeat as usize {
            for k in 0..files.len() {
                let i = (k + round) % files.len();
                ns[i].push(stack_cost(&files[i], catalog, args.messages)?);
            }
        }
        // The whole stack on loopback UDP, real time: one-way latency of first deliveries.
        let lo_msgs = (args.messages / 10).clamp(20, 500);
        let lo = parse_text(
            "lan-loopback",
            &lan_text(LAN_STACKS[3].2, size, lo_msgs, 2000, "0ms"),
            catalog,
        )?;
        let mut loopback = Vec::new();
        for _ in 0..args.repeat.min(3) {
            let r = viastack_net::run_threads(&lo, catalog, &RunOptions::default())?;
            loopback.push(r.latency.p50_us);
        }
        let mut stacks = Map::new();
        let mut components = Map::new();
        for (i, (name, component, _)) in LAN_STACKS.iter().enumerate() {
            stacks.insert(
                (*name).into(),
                json!({"ns_per_msg": median(&ns[i]), "range": range(&ns[i])}),
            );
            let diffs: Vec<f64> = if i == 0 {
                ns[0].clone()
            } else {
                ns[i].iter().zip(&ns[i - 1]).map(|(a, b)| a - b).collect()
            };
            components.insert(
                (*component).into(),
                json!({"ns_per_msg": median(&diffs), "range": range(&diffs)}),
            );
        }
        rows.push(json!({
            "size": size,
            "stacks": stacks,
            "components": components,
            "loopback_p50_us": median(&loopback),
            "loopback_range_us": range(&loopback),
        }));
    }
    Ok(json!({
        "what": "wall-clock ns per multicast message through the sender's and the receiver's \
                 stack (two hosts, one LAN, simulator, zero-latency link); a component's figure \
                 is the paired difference of the stacks with and without it (mcast-forward's \
                 includes the simulator's and the workload's own cost); loopback_p50_us: the \
                 whole stack's one-way latency on loopback UDP",
        "messages": args.messages,
        "rounds": args.repeat,
        "sizes": rows,
    }))
}

/// The 15-node network for the throughput and join/leave lanes: no crashes, no link failures,
/// no loss, no group events, no workloads (the lane adds its own).
fn net15(catalog: &Catalog) -> anyhow::Result<StackFile> {
    let mut file = load(&stacks_dir().join("mcast-net15.toml"), catalog)?;
    let sc = file
        .scenario
        .as_mut()
        .context("mcast-net15.toml: no scenario")?;
    sc.crashes.clear();
    sc.link_failures.clear();
    sc.link.loss = 0.0;
    sc.groups.clear();
    sc.workloads.clear();
    Ok(file)
}

fn node_of(file: &StackFile, name: &str) -> anyhow::Result<u32> {
    file.scenario
        .as_ref()
        .and_then(|s| s.topology.as_ref())
        .and_then(|t| t.node_index(name))
        .with_context(|| format!("{}: no node {name}", file.path))
}

fn join(file: &mut StackFile, node: &str, at: Duration, join: bool) -> anyhow::Result<()> {
    let n = node_of(file, node)?;
    let sc = file.scenario.as_mut().context("no scenario")?;
    sc.groups.push(viastack_stack::model::GroupEventSpec {
        node: n,
        join,
        group: group_addr(),
        at,
        line: 0,
    });
    Ok(())
}

fn multicast_from(
    file: &mut StackFile,
    node: &str,
    messages: u64,
    size: usize,
    interval: Duration,
    start: Duration,
) -> anyhow::Result<()> {
    let n = node_of(file, node)?;
    let sc = file.scenario.as_mut().context("no scenario")?;
    sc.workloads.push(viastack_stack::model::Workload {
        channel: "if0".into(),
        messages,
        size: size as u64,
        interval,
        start,
        pattern: viastack_stack::model::Pattern::Multicast,
        senders: Some(vec![n]),
        line: 0,
    });
    Ok(())
}

/// Routing on the 15-node network (DVMRP at × 0.1) has converged by then.
const CONVERGED_MS: u64 = 3000;

fn lane_throughput(args: &Cfg, catalog: &Catalog) -> anyhow::Result<Value> {
    let messages = (args.window_ms * 1000 / args.interval_us.max(1)).max(1);
    let mut files = Vec::new();
    for &size in &args.sizes {
        let mut f = net15(catalog)?;
        for h in RECEIVERS {
            join(&mut f, h, dur_us(1_000_000), true)?;
        }
        let start = dur_us(CONVERGED_MS * 1000);
        multicast_from(&mut f, "A", messages, size, dur_us(args.interval_us), start)?;
        if let Some(sc) = f.scenario.as_mut() {
            sc.duration = start + dur_us(args.window_ms * 1000 + 500_000);
        }
        files.push((size, f));
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
    let mut fractions: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
    for round in 0..args.repeat as usize {
        for k in 0..files.len() {
            let i = (k + round) % files.len();
            let r = viastack_net::run_threads(&files[i].1, catalog, &RunOptions::default())?;
            let per_receiver = counter(&r, ".data_delivered") as f64 / RECEIVERS.len() as f64;
            rates[i].push(per_receiver / (args.window_ms as f64 / 1000.0));
            fractions[i].push(per_receiver / messages as f64);
        }
    }
    let rows: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(i, (size, _))| {
            let rate = median(&rates[i]);
            json!({
                "size": size,
                "msgs_per_s_per_receiver": rate,
                "range": range(&rates[i]),
                "mbit_s_per_receiver": rate * *size as f64 * 8.0 / 1e6,
                "delivered_fraction": median(&fractions[i]),
            })
        })
        .collect();
    Ok(json!({
        "what": "seed 004's 15-node network on loopback UDP (every node a thread), receivers \
                 H1-H4 four hops from A; A offers one message every interval for the window; \
                 messages received per receiver per second of the window",
        "offered_msgs_per_s": 1e6 / args.interval_us.max(1) as f64,
        "window_ms": args.window_ms,
        "rounds": args.repeat,
        "sizes": rows,
    }))
}

fn lane_join_leave(args: &Cfg, catalog: &Catalog) -> anyhow::Result<Value> {
    let mut f = net15(catalog)?;
    let (join_at, leave_at, end) = (8_000u64, 12_000u64, 14_000u64);
    join(&mut f, "H2", dur_us(1_000_000), true)?;
    join(&mut f, "H1", dur_us(join_at * 1000), true)?;
    join(&mut f, "H1", dur_us(leave_at * 1000), false)?;
    let start = dur_us(CONVERGED_MS * 1000);
    let interval = dur_us(1000);
    multicast_from(&mut f, "A", end - CONVERGED_MS, 64, interval, start)?;
    if let Some(sc) = f.scenario.as_mut() {
        sc.duration = dur_us(end * 1000 + 500_000);
    }
    let h1 = NodeId(node_of(&f, "H1")?);
    let slice_us = 500u64;
    let slices = ((end * 1000 + 500_000) / slice_us) as u32;
    let (mut joins, mut leaves) = (Vec::new(), Vec::new());
    for seed in 1..=args.seeds {
        let mut first_delivery: Option<u64> = None;
        let mut last_arrival: Option<u64> = None;
        let mut before = 0u64;
        viastack_scenario::run_observed(
            &f,
            catalog,
            &RunOptions {
                seed: Some(seed),
                duration: None,
            },
            slices,
            |_, t, sim| {
                let us = t.as_nanos() / 1000;
                let Some(node) = sim.node(h1) else { return };
                let (mut delivered, mut arrived) = (0, 0);
                for (k, v) in node.kernel().counters() {
                    if k.ends_with(".data_delivered") {
                        delivered += v;
                    }
                    // igmp counts the data a host's LAN carries while it is no member.
                    if k.ends_with(".data_delivered") || k.ends_with(".not_member") {
                        arrived += v;
                    }
                }
                if delivered > 0 && first_delivery.is_none() {
                    first_delivery = Some(us);
                }
                if arrived > before {
                    last_arrival = Some(us);
                }
                before = arrived;
            },
        )?;
        let j = first_delivery.context("H1 never received data after joining")?;
        let l = last_arrival.context("no data reached H1")?;
        joins.push((j as f64 - (join_at * 1000) as f64) / 1000.0);
        leaves.push((l as f64 - (leave_at * 1000) as f64) / 1000.0);
    }
    let stat = |v: &mut Vec<f64>| {
        json!({"p50_ms": percentile(v, 0.5), "p10_ms": percentile(v, 0.1),
               "p90_ms": percentile(v, 0.9), "max_ms": percentile(v, 1.0)})
    };
    Ok(json!({
        "what": "15-node network, simulator (links 1-5 ms, as mcast-net15.toml; no loss), A \
                 multicasting every 1 ms; join: H1 joins (H2 already member) → first data \
                 delivered at H1 (report, graft up the pruned branch); leave: H1 leaves → last \
                 data reaching H1's LAN (last-member queries, prune); read every 0.5 ms",
        "seeds": args.seeds,
        "join": stat(&mut joins),
        "leave": stat(&mut leaves),
    }))
}

/// The reliable multicast stack file (helper h-rmc's), if it exists.
fn reliable_file() -> PathBuf {
    stacks_dir().join("mcast-reliable.toml")
}

fn set_loss(file: &mut StackFile, loss: f64) {
    if let Some(sc) = file.scenario.as_mut() {
        sc.link.loss = loss;
        for l in sc.topology.iter_mut().flat_map(|t| t.links.iter_mut()) {
            if l.conditions.loss.is_some() {
                l.conditions.loss = Some(loss);
            }
        }
    }
    for l in file.topology.iter_mut().flat_map(|t| t.links.iter_mut()) {
        if l.conditions.loss.is_some() {
            l.conditions.loss = Some(loss);
        }
    }
}

fn lane_reliable(args: &Cfg, catalog: &Catalog) -> anyhow::Result<Value> {
    let path = reliable_file();
    if !path.is_file() {
        return Ok(json!({"skipped": format!(
            "{} does not exist yet (the mcast-reliable layer, issue 17)", path.display())}));
    }
    let mut base = load(&path, catalog)?;
    if let Some(sc) = base.scenario.as_mut() {
        // Loss only: no crash, no link failure; all four hosts joined before the data.
        sc.crashes.clear();
        sc.link_failures.clear();
        let start = dur_us(CONVERGED_MS * 1000);
        for g in &mut sc.groups {
            g.at = dur_us(1_000_000);
        }
        let n = (args.messages / 2).max(50);
        for w in &mut sc.workloads {
            w.messages = n;
            w.size = PEER_SIZE as u64;
            w.interval = dur_us(1000);
            w.start = start;
        }
        sc.duration = start + dur_us(n * 1000 + 5_000_000);
    }
    let sent_per = base
        .scenario
        .as_ref()
        .map_or(0, |s| s.workloads.iter().map(|w| w.messages).sum::<u64>());
    let mut rows = Vec::new();
    for &e in &args.error_rates {
        let mut f = base.clone();
        set_loss(&mut f, e);
        let (mut fractions, mut walls, mut exact) = (Vec::new(), Vec::new(), true);
        let mut per_message = Vec::new();
        for seed in 1..=args.repeat.max(1) {
            let t0 = WallClock::now();
            let (report, rec) = viastack_scenario::run_recorded(
                &f,
                catalog,
                &RunOptions {
                    seed: Some(u64::from(seed)),
                    duration: None,
                },
                |_| {},
            )?;
            walls.push(t0.elapsed().as_secs_f64());
            let receivers: std::collections::BTreeSet<NodeId> = rec
                .multicast
                .values()
                .flat_map(|m| m.keys().copied())
                .collect();
            let per_node = rec.multicast.values().map(|m| m.len()).sum::<usize>() as f64;
            let n = receivers.len().max(1) as f64;
            fractions.push(per_node / n / sent_per.max(1) as f64);
            exact &= report.duplicated == 0 && report.out_of_order == 0;
            per_message.push(report.network.sent as f64 / sent_per.max(1) as f64);
        }
        rows.push(json!({
            "error_rate": e,
            "delivered_fraction_per_receiver": median(&fractions),
            // The offered load is one message per millisecond (virtual time).
            "delivered_msgs_per_s_per_receiver": 1000.0 * median(&fractions),
            "wall_s": median(&walls),
            "wall_msgs_per_s": sent_per as f64 / median(&walls),
            "exactly_once_in_order": exact,
            "datagrams_per_message": median(&per_message),
        }));
    }
    Ok(json!({
        "what": "stacks/mcast-reliable.toml (15 nodes, 4 receivers) in the simulator, loss \
                 only (no crash, no link failure), every link's loss set to the error rate, \
                 1000-byte messages every 1 ms; per rate the median over seeds of: the fraction \
                 each receiver got, datagrams on the links per message (data, repairs, NACKs, \
                 control), and the simulator's wall-clock messages/s",
        "file": path.display().to_string(),
        "error_rates": rows,
    }))
}

// ---- peer lane ----

/// The JGroups JVM of the peer lane.
struct Jvm {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Jvm {
    fn start(classpath: &str, receivers: usize) -> anyhow::Result<Jvm> {
        let log = std::env::temp_dir().join("viastack-bench-multicast-jgroups.log");
        let hosts: Vec<String> = (0..=receivers)
            .map(|i| format!("127.0.0.1[{}]", 7800 + i))
            .collect();
        let mut child = Command::new("java")
            .args([
                "-Djava.net.preferIPv4Stack=true",
                "-Djgroups.bind_addr=127.0.0.1",
                &format!("-Djgroups.tcpping.initial_hosts={}", hosts.join(",")),
                "-cp",
                classpath,
                "viastack.bench.McastPeer",
                "tcp.xml",
                "viastack-mcast",
                &receivers.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).map_or(Stdio::null(), Stdio::from))
            .spawn()
            .context("java")?;
        let stdin = child.stdin.take().context("JVM stdin")?;
        let stdout = child.stdout.take().context("JVM stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("viastack-bench ") {
                    if tx.send(rest.to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        let mut jvm = Jvm {
            child,
            stdin,
            lines,
        };
        let ready = jvm.expect(WallDuration::from_secs(90))?;
        if !ready.starts_with("ready") {
            bail!("JGroups McastPeer: {ready} (log: {})", log.display());
        }
        Ok(jvm)
    }

    fn expect(&mut self, within: WallDuration) -> anyhow::Result<String> {
        self.lines
            .recv_timeout(within)
            .map_err(|_| anyhow!("the JGroups peer said nothing for {within:?}"))
    }

    /// One round: its time in seconds.
    fn round(&mut self, round: u32, count: u64, size: usize) -> anyhow::Result<f64> {
        writeln!(self.stdin, "round {round} {count} {size}")?;
        self.stdin.flush()?;
        let line = self.expect(WallDuration::from_secs(180))?;
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["done", r, secs] if r == round.to_string() => Ok(secs.parse()?),
            _ => bail!("JGroups McastPeer: {line}"),
        }
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = WallClock::now() + WallDuration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(WallClock::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    break;
                }
            }
        }
        let _ = self.child.wait();
    }
}

const PEER_SIZE: usize = 1000;
/// The peer lane's `bundle` size: what fits loopback's 64 KiB datagrams with room to spare.
const PEER_BUNDLE_BYTES: usize = 32_000;
/// The peer lane's send buffer, receive window and order buffer (packets): 4 MB of 1000-byte
/// messages, so a receiver descheduled for a few milliseconds does not stall the sender.
const PEER_WINDOW: usize = 4096;

fn lane_peer(args: &Cfg, catalog: &Catalog) -> anyhow::Result<Value> {
    let viastack = Some(parse_text(
        "bench-multicast-peer-lan.toml",
        &peer::lan_text(GROUP, PEER_BUNDLE_BYTES, PEER_WINDOW),
        catalog,
    )?);
    let mut detail = Vec::new();
    let jgroups = match crate::unicast::jgroups_classpath() {
        Ok(_) if args.no_jgroups => None,
        Ok(cp) => Some(Jvm::start(&cp, RECEIVERS.len())?),
        Err(why) => {
            eprintln!("bench multicast: JGroups lane skipped: {why}");
            None
        }
    };
    let mut jg = Vec::new();
    let mut vs = Vec::new();
    let mut jvm = jgroups;
    if let Some(j) = jvm.as_mut() {
        // Warm-up: JIT.
        j.round(0, args.peer_messages, PEER_SIZE)?;
    }
    for round in 1..=args.repeat {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let (mut a, mut b) = (None, None);
        for lane in order {
            if lane == 0 {
                if let Some(j) = jvm.as_mut() {
                    if !args.no_pause && viastack.is_some() {
                        // Stopped during viastack's rounds: let its timers catch up first.
                        std::thread::sleep(WallDuration::from_millis(300));
                    }
                    let secs = j.round(round, args.peer_messages, PEER_SIZE)?;
                    a = Some(args.peer_messages as f64 / secs);
                }
            } else if let Some(f) = &viastack {
                // The JVM is stopped during viastack's round (`bench::pause`): an idle JVM's
                // JIT, GC and JGroups timers take CPU from the round on two cores.
                let _paused = jvm
                    .as_ref()
                    .filter(|_| !args.no_pause)
                    .map(|j| Paused::stop([j.child.id()]));
                let r = peer::round(f, catalog, args.peer_messages, PEER_SIZE, group_addr())?;
                b = Some(r.per_receiver);
                detail.push(json!({
                    "msgs_per_s_per_receiver": r.per_receiver,
                    "secs": r.secs,
                    "delivered_exactly_once": r.delivered,
                    "send_refused_and_retried": r.refused,
                    "datagrams": r.datagrams,
                    "cpu_secs": r.cpu_secs,
                    "cpu_us_per_message": r.cpu_secs.map(|c| c * 1e6 / args.peer_messages as f64),
                }));
            }
        }
        if let Some(a) = a {
            jg.push(a);
        }
        if let Some(b) = b {
            vs.push(b);
        }
    }
    drop(jvm);
    let mut doc = Map::new();
    doc.insert("what".into(), json!("messages/s received per receiver, 1000-byte messages, one sender and 4 receivers, loopback, window from the first send to the last delivery at every receiver, sender as fast as the service accepts: JGroups tcp.xml (TCP, NAKACK2) in one JVM vs viastack's reliable multicast with every node a thread and one UDP socket"));
    doc.insert("viastack_network".into(), json!("one LAN segment: A, H1-H4 (seed 004's hosts, no routers), host stack interface+checksum+bundle(32000 bytes)+igmp+mcast-reliable+mcast-order+mcast-forward, the sender handing over 64 messages per kernel batch; a broadcast is one datagram per other node"));
    doc.insert("viastack_rounds".into(), json!(detail));
    doc.insert("messages".into(), json!(args.peer_messages));
    doc.insert(
        "jvm_paused_during_viastack_rounds".into(),
        json!(!args.no_pause && !jg.is_empty()),
    );
    if jg.is_empty() {
        doc.insert(
            "jgroups_nakack2".into(),
            json!({"skipped": if args.no_jgroups { "--no-jgroups" } else { "java/mvn missing" }}),
        );
    } else {
        doc.insert(
            "jgroups_nakack2".into(),
            json!({"msgs_per_s_per_receiver": median(&jg), "range": range(&jg)}),
        );
    }
    {
        doc.insert(
            "viastack_reliable".into(),
            json!({"msgs_per_s_per_receiver": median(&vs), "range": range(&vs)}),
        );
    }
    if !jg.is_empty() && !vs.is_empty() {
        let pairs: Vec<(f64, f64)> = vs.iter().copied().zip(jg.iter().copied()).collect();
        doc.insert(
            "reliable_multicast_vs_jgroups".into(),
            json!(median(&vs) / median(&jg)),
        );
        doc.insert(
            "reliable_multicast_vs_jgroups_ci95".into(),
            json!(ratio_of_medians_ci95(&pairs)),
        );
    }
    Ok(Value::Object(doc))
}

fn lane_testbed(quick: bool, repeat: u32) -> Value {
    super::mcast_testbed::lane(quick, repeat)
}

/// The resolved options.
struct Cfg {
    sizes: Vec<usize>,
    repeat: u32,
    messages: u64,
    window_ms: u64,
    interval_us: u64,
    error_rates: Vec<f64>,
    seeds: u64,
    peer_messages: u64,
    no_jgroups: bool,
    no_pause: bool,
}

impl Cfg {
    fn from(a: &MulticastArgs) -> Cfg {
        if a.quick {
            return Cfg {
                sizes: if a.size.is_empty() {
                    vec![64, 1024]
                } else {
                    a.size.clone()
                },
                repeat: 2,
                messages: 300,
                window_ms: 200,
                interval_us: 1000,
                error_rates: if a.error_rate.is_empty() {
                    vec![0.0, 0.1]
                } else {
                    a.error_rate.clone()
                },
                seeds: 2,
                peer_messages: 2000,
                no_jgroups: a.no_jgroups,
                no_pause: a.no_pause,
            };
        }
        Cfg {
            sizes: if a.size.is_empty() {
                vec![64, 256, 1024, 4096, 8192]
            } else {
                a.size.clone()
            },
            repeat: a.repeat.max(1),
            messages: a.messages.max(1),
            window_ms: a.window_ms.max(1),
            interval_us: a.interval_us.max(1),
            error_rates: if a.error_rate.is_empty() {
                vec![0.0, 0.05, 0.1, 0.15, 0.2]
            } else {
                a.error_rate.clone()
            },
            seeds: a.seeds.max(1),
            peer_messages: a.peer_messages.max(1),
            no_jgroups: a.no_jgroups,
            no_pause: a.no_pause,
        }
    }
}

/// Runs the benchmark and prints its document.
pub fn run(args: &MulticastArgs) -> anyhow::Result<()> {
    let catalog = viastack_stack::standard_catalog();
    let cfg = Cfg::from(args);
    let mut doc = Map::new();
    doc.insert("quick".into(), json!(args.quick));
    doc.insert("receivers".into(), json!(RECEIVERS.len()));
    let wants = |lane: &str| args.only.is_empty() || args.only.iter().any(|o| o == lane);
    type Lane = fn(&Cfg, &Catalog) -> anyhow::Result<Value>;
    let lanes: [(&str, &str, &str, Lane); 5] = [
        (
            "stack",
            "stack_latency",
            "stack latency",
            lane_stack_latency,
        ),
        (
            "throughput",
            "throughput",
            "basic multicast throughput (15 nodes, loopback)",
            lane_throughput,
        ),
        (
            "reliable",
            "reliable",
            "reliable multicast vs error rate",
            lane_reliable,
        ),
        (
            "join",
            "join_leave",
            "join and leave latency",
            lane_join_leave,
        ),
        ("peer", "peer", "peer lane (JGroups NAKACK2)", lane_peer),
    ];
    for (lane, key, what, f) in lanes {
        if wants(lane) {
            eprintln!("bench multicast: {what} …");
            doc.insert(key.into(), f(&cfg, &catalog)?);
        }
    }
    if args.testbed && wants("testbed") {
        doc.insert("testbed".into(), lane_testbed(args.quick, cfg.repeat));
    } else {
        doc.insert(
            "testbed".into(),
            json!({"skipped": "not asked (--testbed, as root)"}),
        );
    }
    if let Some(r) = doc
        .get("peer")
        .and_then(|p| p["reliable_multicast_vs_jgroups"].as_f64())
    {
        doc.insert("reliable_multicast_vs_jgroups".into(), json!(r));
        doc.insert(
            "targets".into(),
            json!({"reliable_multicast_vs_jgroups": {"target": 2.0, "met": r >= 2.0}}),
        );
    }
    let doc = Value::Object(doc);
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
        let footnote = super::machine::Machine::current().footnote();
        for (name, chart) in charts(&doc, &footnote) {
            let path = dir.join(format!("multicast-{name}.png"));
            chart
                .save_png(&path)
                .with_context(|| format!("{}: cannot plot", path.display()))?;
            eprintln!("bench multicast: drew {}", path.display());
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        outln!("{}", summary(&doc))?;
    }
    Ok(())
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// A few lines for a reader.
fn summary(doc: &Value) -> String {
    let mut out = Vec::new();
    for row in doc["stack_latency"]["sizes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let c = &row["components"];
        out.push(format!(
            "stack latency {:>5} B: full stack {:.0} ns/msg (checksum {:.0}, igmp {:.0}, dvmrp {:.0}); loopback p50 {:.0} µs",
            row["size"],
            f(&row["stacks"]["+dvmrp"]["ns_per_msg"]),
            f(&c["checksum"]["ns_per_msg"]),
            f(&c["igmp"]["ns_per_msg"]),
            f(&c["dvmrp"]["ns_per_msg"]),
            f(&row["loopback_p50_us"]),
        ));
    }
    for row in doc["throughput"]["sizes"].as_array().into_iter().flatten() {
        out.push(format!(
            "throughput {:>5} B: {:.0} msg/s per receiver ({:.1} Mbit/s), {:.1} % delivered",
            row["size"],
            f(&row["msgs_per_s_per_receiver"]),
            f(&row["mbit_s_per_receiver"]),
            100.0 * f(&row["delivered_fraction"]),
        ));
    }
    let jl = &doc["join_leave"];
    if !jl.is_null() {
        out.push(format!(
            "join latency p50 {:.1} ms, leave latency p50 {:.1} ms ({} seeds)",
            f(&jl["join"]["p50_ms"]),
            f(&jl["leave"]["p50_ms"]),
            jl["seeds"]
        ));
    }
    for key in ["reliable", "peer", "testbed"] {
        if !doc[key].is_null() {
            out.push(format!("{key}: {}", doc[key]));
        }
    }
    out.join("\n")
}

/// The charts of a `bench multicast` document: (file stem, chart).
pub fn charts(doc: &Value, footnote: &str) -> Vec<(&'static str, Chart)> {
    let mut out = Vec::new();
    let rows: Vec<&Value> = doc["stack_latency"]["sizes"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if !rows.is_empty() {
        let mut series: Vec<Series> = LAN_STACKS
            .iter()
            .map(|(name, _, _)| Series {
                name: format!("stack {name}"),
                points: rows
                    .iter()
                    .map(|r| (f(&r["size"]), f(&r["stacks"][*name]["ns_per_msg"]) / 1000.0))
                    .collect(),
            })
            .collect();
        for (_, component, _) in &LAN_STACKS[1..] {
            series.push(Series {
                name: format!("component {component}"),
                points: rows
                    .iter()
                    .map(|r| {
                        (
                            f(&r["size"]),
                            f(&r["components"][*component]["ns_per_msg"]) / 1000.0,
                        )
                    })
                    .collect(),
            });
        }
        out.push((
            "stack-latency",
            Chart {
                title: "bench multicast: stack latency per message (simulator, median)".into(),
                x_label: "message size (bytes)".into(),
                y_label: "µs per message (wall clock)".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series,
                bars: vec![],
                footnote: footnote.into(),
            },
        ));
    }
    let rows: Vec<&Value> = doc["throughput"]["sizes"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if !rows.is_empty() {
        out.push((
            "throughput",
            Chart {
                title: "bench multicast: basic multicast, 15-node network on loopback".into(),
                x_label: "message size (bytes)".into(),
                y_label: "Mbit/s received per receiver (median)".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: vec![Series {
                    name: "viastack basic multicast (receivers 4 hops away)".into(),
                    points: rows
                        .iter()
                        .map(|r| (f(&r["size"]), f(&r["mbit_s_per_receiver"])))
                        .collect(),
                }],
                bars: vec![],
                footnote: footnote.into(),
            },
        ));
    }
    let rows: Vec<&Value> = doc["reliable"]["error_rates"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if !rows.is_empty() {
        out.push((
            "reliable",
            Chart {
                title: "bench multicast: reliable multicast throughput against link error rate"
                    .into(),
                x_label: "link error rate (%)".into(),
                y_label: "messages/s delivered per receiver, 1,000/s offered (median)".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Linear,
                series: vec![Series {
                    name: "viastack reliable multicast (15 nodes, 4 receivers, simulator)".into(),
                    points: rows
                        .iter()
                        .map(|r| {
                            (
                                100.0 * f(&r["error_rate"]),
                                1000.0 * f(&r["delivered_fraction_per_receiver"]),
                            )
                        })
                        .collect(),
                }],
                bars: vec![],
                footnote: footnote.into(),
            },
        ));
        out.push((
            "reliable-datagrams",
            Chart {
                title: "bench multicast: reliable multicast's datagrams against link error rate"
                    .into(),
                x_label: "link error rate (%)".into(),
                y_label: "datagrams on the links per message (median)".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Linear,
                series: vec![Series {
                    name: "viastack reliable multicast (15 nodes, 4 receivers, simulator)".into(),
                    points: rows
                        .iter()
                        .map(|r| (100.0 * f(&r["error_rate"]), f(&r["datagrams_per_message"])))
                        .collect(),
                }],
                bars: vec![],
                footnote: footnote.into(),
            },
        ));
    }
    let jl = &doc["join_leave"];
    let mut bars = vec![
        ("join p50 (ms)".to_string(), f(&jl["join"]["p50_ms"])),
        ("join p90 (ms)".to_string(), f(&jl["join"]["p90_ms"])),
        ("leave p50 (ms)".to_string(), f(&jl["leave"]["p50_ms"])),
        ("leave p90 (ms)".to_string(), f(&jl["leave"]["p90_ms"])),
    ];
    bars.retain(|(_, v)| v.is_finite());
    if !bars.is_empty() {
        out.push((
            "join-leave",
            Chart {
                title: "bench multicast: join and leave latency (15 nodes, simulator)".into(),
                x_label: String::new(),
                y_label: "ms".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Linear,
                series: vec![],
                bars,
                footnote: footnote.into(),
            },
        ));
    }
    let p = &doc["peer"];
    let mut bars = vec![
        (
            "JGroups NAKACK2".to_string(),
            f(&p["jgroups_nakack2"]["msgs_per_s_per_receiver"]),
        ),
        (
            "viastack reliable multicast".to_string(),
            f(&p["viastack_reliable"]["msgs_per_s_per_receiver"]),
        ),
    ];
    bars.retain(|(_, v)| v.is_finite());
    if !bars.is_empty() {
        out.push((
            "peer",
            Chart {
                title: "bench multicast: messages/s per receiver, 1000 B, 4 receivers, loopback"
                    .into(),
                x_label: String::new(),
                y_label: "messages/s per receiver (median)".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Linear,
                series: vec![],
                bars,
                footnote: footnote.into(),
            },
        ));
    }
    out
}
