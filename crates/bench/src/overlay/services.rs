//! The services figure of `viastack bench overlay` (issue 16 "Figures": `services_vs_base`;
//! seed 000 §6: its SCXML services cost most of the throughput, about 1 Mbit/s sustainable).
//!
//! Two overlays of `nodes` nodes run side by side on loopback UDP, every node a thread of this
//! process behind a [`viastack::overlay::OverlaySocket`]: `base` (device / checksum / overlay,
//! a DT) and `h2hack` (the same with a `messagestore` running `specs/h2hack.scxml`, its
//! acknowledgements batched over a 1 ms `batch_window`: a delayed ACK). Once both
//! have formed (every node's neighbours symmetric, one leader, unchanged over 2 s), rounds
//! alternate between them (the first lane alternates too). In a round one node (rotating)
//! multicasts `messages` messages of `size` bytes as fast as its socket takes them; the round
//! ends when every other node has delivered all of them, or when nothing arrived for 2 s. Its
//! figure is the messages delivered per receiver divided by the time from the first send to
//! the last delivery. Reported per lane: the median messages/s and Mbit/s of payload, the
//! share of the messages delivered; and `services_vs_base`, the ratio of the medians with its
//! 95 % interval (paired bootstrap over rounds). Transparent huge pages are off for the
//! process while it runs (`disable_transparent_huge_pages`: 32 node threads in one
//! process otherwise made the kernel zero 2 MiB regions they barely used; `services_setup`
//! says whether it took).

#![allow(clippy::disallowed_methods)] // benchmarks read the clock and wait for the overlay

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use viastack::overlay::{Delivery, OverlaySocket};
use viastack::{Deployment, Node, NodeEvent, NodeId};

use super::super::stats::{median, ratio_of_medians_ci95};

/// What the services figure is asked to do.
pub struct ServicesRun {
    /// Nodes per overlay.
    pub nodes: u32,
    /// Rounds per lane.
    pub rounds: usize,
    /// Messages per round.
    pub messages: usize,
    /// Bytes per message.
    pub size: usize,
    /// Path of the h2hack specification.
    pub spec: String,
}

const BASE: &str = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "dt"
buddies = "0"
points_seed = 1
[qos.q]
layers = ["dev", "sum", "net"]
[channels.data]
qos = "q"
"#;

const H2HACK: &str = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "dt"
buddies = "0"
points_seed = 1
[layers.store]
kind = "messagestore"
service = "SPEC"
failure_state = "reset"
batch_window = "1ms"
[qos.q]
layers = ["dev", "sum", "net", "store"]
[channels.data]
qos = "q"
"#;

/// A delivery: lane, round, when.
type Arrival = (u8, u32, Instant);

/// One overlay: its sockets, its service, and the threads reading their events.
struct Fleet {
    socks: Vec<OverlaySocket>,
    service: Option<u32>,
    readers: Vec<JoinHandle<()>>,
}

fn free_addrs(n: u32) -> anyhow::Result<Vec<SocketAddr>> {
    let socks = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    socks
        .iter()
        .map(|s| s.local_addr().map_err(Into::into))
        .collect()
}

fn fleet(stack: &str, n: u32, tx: &mpsc::Sender<Arrival>) -> anyhow::Result<Fleet> {
    let addrs = free_addrs(n)?;
    let mut socks = Vec::new();
    for i in 0..n {
        let s = OverlaySocket::join_with(
            Node::builder()
                .stack_text("bench-overlay.toml", stack)
                .deployment(Deployment::new(addrs.clone()).with_id(NodeId(i)))
                .event_queue(1 << 16)
                .linger(Duration::from_millis(200)),
        )?;
        socks.push(s);
    }
    let service = socks[0].services().into_iter().next().flatten();
    let readers = socks
        .iter()
        .map(|s| {
            let events = s.node().events();
            let tx = tx.clone();
            std::thread::spawn(move || {
                while let Some(e) = events.recv() {
                    if let NodeEvent::Message(m) = e {
                        if let Some(h) = m.payload.get(..5) {
                            let round = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                            let _ = tx.send((h[4], round, Instant::now()));
                        }
                    }
                }
            })
        })
        .collect();
    Ok(Fleet {
        socks,
        service,
        readers,
    })
}

/// Waits until every node's neighbours are symmetric with one leader, unchanged over 2 s.
fn formed(f: &Fleet, limit: Duration) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut last: Option<Vec<Vec<NodeId>>> = None;
    while start.elapsed() < limit {
        let sts = f
            .socks
            .iter()
            .map(|s| s.status())
            .collect::<Result<Vec<_>, _>>()?;
        let nbrs: Vec<Vec<NodeId>> = sts.iter().map(|s| s.neighbours.clone()).collect();
        let symmetric = nbrs.iter().enumerate().all(|(i, ns)| {
            !ns.is_empty()
                && ns.iter().all(|n| {
                    nbrs.get(n.0 as usize)
                        .is_some_and(|m| m.contains(&NodeId(i as u32)))
                })
        });
        let leaders = sts.iter().filter(|s| s.leader).count();
        if symmetric && leaders == 1 && last.as_ref() == Some(&nbrs) {
            return Ok(start.elapsed());
        }
        last = Some(nbrs);
        std::thread::sleep(Duration::from_secs(2));
    }
    bail!("the overlay did not form within {limit:?}")
}

/// One round on one lane: (messages/s per receiver, share delivered).
fn round(
    f: &Fleet,
    lane: u8,
    round: u32,
    sender: usize,
    r: &ServicesRun,
    rx: &mpsc::Receiver<Arrival>,
) -> anyhow::Result<Round> {
    let receivers = f.socks.len() - 1;
    let expected = r.messages * receivers;
    // Late deliveries of earlier rounds are dropped here.
    while rx.try_recv().is_ok() {}
    let t0 = Instant::now();
    for k in 0..r.messages {
        let mut m = vec![0u8; r.size.max(9)];
        m[..4].copy_from_slice(&round.to_be_bytes());
        m[4] = lane;
        m[5..9].copy_from_slice(&(k as u32).to_be_bytes());
        f.socks[sender].send(Delivery::Multicast, f.service, m)?;
    }
    let sent = t0.elapsed();
    let mut got = 0;
    let mut last = t0;
    let mut times = Vec::with_capacity(expected);
    while got < expected {
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok((l, rd, at)) if l == lane && rd == round => {
                got += 1;
                last = last.max(at);
                times.push((at - t0).as_secs_f64() * 1e3);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let secs = (last - t0).as_secs_f64().max(1e-6);
    let per_receiver = got as f64 / receivers as f64;
    times.sort_by(f64::total_cmp);
    let at_share = |q: f64| {
        let k = ((expected as f64 * q).ceil() as usize).max(1);
        times.get(k - 1).copied().unwrap_or(f64::NAN)
    };
    Ok(Round {
        rate: per_receiver / secs,
        share: got as f64 / expected as f64,
        send_ms: sent.as_secs_f64() * 1e3,
        p50_ms: at_share(0.5),
        p99_ms: at_share(0.99),
    })
}

/// What one round measured.
struct Round {
    /// Messages per second per receiver.
    rate: f64,
    /// Share of the expected deliveries made.
    share: f64,
    /// Milliseconds the sender took to hand every message over.
    send_ms: f64,
    /// Milliseconds from the first send until half (99 %) of the deliveries were made.
    p50_ms: f64,
    p99_ms: f64,
}

/// Runs the services figure; the JSON fields to report.
pub fn run(r: &ServicesRun) -> anyhow::Result<Vec<(String, Value)>> {
    if !std::path::Path::new(&r.spec).exists() {
        bail!(
            "{}: no such file (run from the repository root, or give --spec)",
            r.spec
        );
    }
    if r.nodes < 2 {
        bail!("the overlay needs at least 2 nodes");
    }
    // Both overlays' nodes are threads of this one process: 4 KiB pages, as each node's own
    // process would touch them, not 2 MiB regions zeroed whole on first touch (see
    // `disable_transparent_huge_pages`).
    let thp_disabled = disable_transparent_huge_pages();
    let (tx, rx) = mpsc::channel();
    let base = fleet(BASE, r.nodes, &tx).context("base overlay")?;
    let h2 = fleet(&H2HACK.replace("SPEC", &r.spec), r.nodes, &tx).context("h2hack overlay")?;
    drop(tx);
    let form_base = formed(&base, Duration::from_secs(90))?;
    let form_h2 = formed(&h2, Duration::from_secs(90))?;
    let fleets = [&base, &h2];
    // Warm-up: one round each, not counted.
    for (lane, f) in fleets.iter().enumerate() {
        round(f, lane as u8, u32::MAX, 0, r, &rx)?;
    }
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut shares: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut sends: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut p50s: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut p99s: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for k in 0..r.rounds {
        let sender = k % r.nodes as usize;
        let order: [usize; 2] = if k % 2 == 0 { [0, 1] } else { [1, 0] };
        for lane in order {
            let x = round(fleets[lane], lane as u8, k as u32, sender, r, &rx)?;
            rates[lane].push(x.rate);
            shares[lane].push(x.share);
            sends[lane].push(x.send_ms);
            p50s[lane].push(x.p50_ms);
            p99s[lane].push(x.p99_ms);
        }
    }
    let pairs: Vec<(f64, f64)> = rates[1]
        .iter()
        .copied()
        .zip(rates[0].iter().copied())
        .collect();
    let (mb, mh) = (median(&rates[0]), median(&rates[1]));
    let ratio = mh / mb;
    let ci = ratio_of_medians_ci95(&pairs);
    let mbit = |x: f64| x * r.size as f64 * 8.0 / 1e6;
    // Every layer counter and the transport's, summed over each overlay's nodes.
    let counters = |f: &Fleet| -> Value {
        let mut sum: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &f.socks {
            if let Ok(m) = s.node().metrics() {
                for (k, v) in m.counters {
                    *sum.entry(k).or_default() += v;
                }
                *sum.entry("transport.sent".into()).or_default() += m.transport.sent;
                *sum.entry("transport.received".into()).or_default() += m.transport.received;
                *sum.entry("transport.send_failed".into()).or_default() += m.transport.send_failed;
            }
        }
        json!(sum)
    };
    let (counters_base, counters_h2) = (counters(&base), counters(&h2));
    let mut instances = BTreeSet::new();
    for s in &h2.socks {
        if let Ok(st) = s.status() {
            for sv in st.services {
                instances.insert(sv.instances);
            }
        }
    }
    let out = vec![
        ("services_vs_base".to_string(), json!(ratio)),
        ("services_vs_base_ci95".to_string(), json!(ci)),
        ("services_target_ge_0_8".to_string(), json!(ratio >= 0.8)),
        ("base_msgs_s".to_string(), json!(mb)),
        ("h2hack_msgs_s".to_string(), json!(mh)),
        ("base_mbit_s".to_string(), json!(mbit(mb))),
        ("h2hack_mbit_s".to_string(), json!(mbit(mh))),
        (
            "base_delivered_share".to_string(),
            json!(median(&shares[0])),
        ),
        (
            "h2hack_delivered_share".to_string(),
            json!(median(&shares[1])),
        ),
        ("base_send_ms".to_string(), json!(median(&sends[0]))),
        ("h2hack_send_ms".to_string(), json!(median(&sends[1]))),
        ("base_p50_delivered_ms".to_string(), json!(median(&p50s[0]))),
        (
            "h2hack_p50_delivered_ms".to_string(),
            json!(median(&p50s[1])),
        ),
        ("base_p99_delivered_ms".to_string(), json!(median(&p99s[0]))),
        (
            "h2hack_p99_delivered_ms".to_string(),
            json!(median(&p99s[1])),
        ),
        ("base_rounds_msgs_s".to_string(), json!(rates[0])),
        ("h2hack_rounds_msgs_s".to_string(), json!(rates[1])),
        ("base_counters".to_string(), counters_base),
        ("h2hack_counters".to_string(), counters_h2),
        (
            "services_setup".to_string(),
            json!({
                "nodes": r.nodes, "rounds": r.rounds, "messages": r.messages, "size": r.size,
                "formed_base_s": form_base.as_secs_f64(), "formed_h2hack_s": form_h2.as_secs_f64(),
                "h2hack_instances_at_end": instances.into_iter().collect::<Vec<_>>(),
                "transparent_huge_pages": if thp_disabled { "off" } else { "as the host sets them" },
            }),
        ),
    ];
    for f in [base, h2] {
        for s in f.socks {
            let _ = s.leave();
        }
        for t in f.readers {
            let _ = t.join();
        }
    }
    Ok(out)
}

/// Turns transparent huge pages off for the rest of this process's life
/// (`prctl(PR_SET_THP_DISABLE)`); whether it took. For a process that runs many nodes as
/// threads (`bench overlay`'s services figure: 32 nodes and their 32 readers): mimalloc asks for
/// huge pages on its arenas (the host's THP setting is `madvise`), so the first touch of each
/// 2 MiB region zeroes all of it, and many threads each touching a little of many regions
/// made the kernel zero memory nobody used yet — measured: 600 MB RSS and 25–37 % of the
/// samples in `clear_page_erms` for what takes 263 MB with 4 KiB pages.
fn disable_transparent_huge_pages() -> bool {
    nix::sys::prctl::set_thp_disable(true).is_ok()
}
