//! The testbed lane of `viastack bench multicast --testbed` (seed 004's basic multicast
//! service measured on a real multi-hop network; the issue's "how close basic multicast comes
//! to the links' capacity"): seed 004's 15-node network (`stacks/mcast-net15.toml`) built from
//! network namespaces by `viastack testbed up`, every link rate-limited to the same rate with
//! `tc tbf`, no loss; H1–H4 join G1, routing converges, then source A multicasts 1000-byte
//! messages at an offered rate, stepped from below to above the links' rate (one testbed run
//! per step). Each receiver's link-layer bytes are read from its interface's kernel counters
//! (`testbed up --sample-counters`) at two instants inside the send window, once the sender's
//! tbf queue has filled: received bits/s per receiver over that span, against the configured
//! link rate (`basic_multicast_vs_link_capacity`, the ratio at the highest offered rate).
//! Needs root; without it the lane says so and is skipped.

#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use super::stats::median;

/// The configured rate of every link.
pub const LINK_BPS: u64 = 10_000_000;
/// Message size (payload bytes).
const SIZE: u64 = 1000;
/// The receivers, four hops from A.
const RECEIVERS: [&str; 4] = ["H1", "H2", "H3", "H4"];
/// Joins at 1 s; routing (DVMRP × 0.1) has converged and the tree grafted by 3 s.
const START_MS: u64 = 3000;
/// Counters are read this long after the send window opens (the tbf queues have filled).
const SETTLE_MS: u64 = 500;

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .is_some_and(|u| u == "0")
}

/// `stacks/mcast-net15.toml` for one step: no crash, no link failure, no loss, every link at
/// `link_bps`, H1–H4 joined at 1 s, A sending `messages` of [`SIZE`] bytes every
/// `interval_ns` from [`START_MS`].
pub fn variant(
    net15: &str,
    link_bps: u64,
    messages: u64,
    interval_ns: u64,
    window_ms: u64,
) -> anyhow::Result<String> {
    let mut doc: toml::Table = toml::from_str(net15).context("mcast-net15.toml")?;
    let rate = toml::Value::String(format!("{link_bps}bit"));
    if let Some(links) = doc
        .get_mut("topology")
        .and_then(|t| t.get_mut("link"))
        .and_then(toml::Value::as_array_mut)
    {
        for l in links.iter_mut().filter_map(toml::Value::as_table_mut) {
            l.insert("bandwidth".into(), rate.clone());
            l.remove("loss");
        }
    }
    let sc = doc
        .get_mut("scenario")
        .and_then(toml::Value::as_table_mut)
        .context("mcast-net15.toml: no [scenario]")?;
    for k in ["crash", "link_failure", "group", "workload"] {
        sc.remove(k);
    }
    sc.insert(
        "duration".into(),
        format!("{}ms", START_MS + window_ms + 500).into(),
    );
    if let Some(link) = sc.get_mut("link").and_then(toml::Value::as_table_mut) {
        link.insert("loss".into(), toml::Value::Float(0.0));
        link.insert("bandwidth".into(), rate);
    }
    let mut groups = toml::value::Array::new();
    let nodes = doc
        .get("topology")
        .and_then(|t| t.get("node"))
        .and_then(toml::Value::as_array)
        .context("mcast-net15.toml: no [[topology.node]]")?;
    let index = |name: &str| {
        nodes
            .iter()
            .position(|n| n.get("name").and_then(toml::Value::as_str) == Some(name))
            .map(|i| i as i64)
            .with_context(|| format!("mcast-net15.toml: no node {name}"))
    };
    for h in RECEIVERS {
        let mut g = toml::Table::new();
        g.insert("node".into(), index(h)?.into());
        g.insert("action".into(), "join".into());
        g.insert("group".into(), "239.1.1.1".into());
        g.insert("at".into(), "1s".into());
        groups.push(g.into());
    }
    let mut w = toml::Table::new();
    w.insert("channel".into(), "if0".into());
    w.insert("pattern".into(), "multicast".into());
    w.insert(
        "senders".into(),
        vec![toml::Value::from(index("A")?)].into(),
    );
    w.insert("messages".into(), (messages as i64).into());
    w.insert("size".into(), (SIZE as i64).into());
    w.insert(
        "interval".into(),
        format!("{}us", interval_ns / 1000).into(),
    );
    w.insert("start".into(), format!("{START_MS}ms").into());
    let sc = doc
        .get_mut("scenario")
        .and_then(toml::Value::as_table_mut)
        .context("no [scenario]")?;
    sc.insert("group".into(), groups.into());
    sc.insert("workload".into(), vec![toml::Value::from(w)].into());
    Ok(toml::to_string(&doc)?)
}

/// One receiver's figures from a `testbed up --json` report: (received link-layer bits/s,
/// payload bits/s, fraction of A's messages it delivered).
pub fn receiver_rates(report: &Value, name: &str, messages: u64) -> anyhow::Result<[f64; 3]> {
    let node = &report["testbed"]["per_node"][name];
    let samples = node["samples"]
        .as_array()
        .with_context(|| format!("{name}: no counter samples in the testbed report"))?;
    // A host has one interface: port 0.
    let on0: Vec<&Value> = samples.iter().filter(|s| s["port"] == 0).collect();
    let (Some(a), Some(b)) = (on0.first(), on0.last()) else {
        bail!("{name}: fewer than two counter samples");
    };
    let g = |s: &Value, k: &str| s[k].as_f64().unwrap_or(0.0);
    let dt = (g(b, "at_ns") - g(a, "at_ns")) / 1e9;
    if dt <= 0.0 {
        bail!("{name}: counter samples not apart in time");
    }
    let wire = (g(b, "rx_bytes") - g(a, "rx_bytes")) * 8.0 / dt;
    let payload = (g(b, "rx_packets") - g(a, "rx_packets")) * (SIZE * 8) as f64 / dt;
    let delivered = node["counters"]
        .as_object()
        .map(|c| {
            c.iter()
                .filter(|(k, _)| k.ends_with(".data_delivered"))
                .filter_map(|(_, v)| v.as_u64())
                .sum::<u64>()
        })
        .unwrap_or(0);
    Ok([wire, payload, delivered as f64 / messages.max(1) as f64])
}

/// Runs `viastack testbed up FILE --json --sample-counters …` and returns its report.
fn testbed_run(exe: &Path, file: &Path, samples_ms: [u64; 2]) -> anyhow::Result<Value> {
    let out = Command::new(exe)
        .args(["testbed", "up"])
        .arg(file)
        .args([
            "--json",
            "--sample-counters",
            &format!("{}ms,{}ms", samples_ms[0], samples_ms[1]),
        ])
        .stdin(Stdio::null())
        .output()
        .context("running `viastack testbed up`")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect();
        bail!(
            "`viastack testbed up` failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    serde_json::from_slice(&out.stdout).context("`testbed up --json`: not JSON")
}

/// The lane: `fractions` of the link rate offered (payload bits/s), `rounds` testbed runs each.
pub fn lane(quick: bool, rounds: u32) -> Value {
    if !is_root() {
        return json!({"skipped": "the netns testbed needs root (run `sudo viastack bench multicast --testbed`)"});
    }
    match measure(quick, rounds) {
        Ok(v) => v,
        Err(e) => json!({"skipped": format!("the testbed failed: {e:#}")}),
    }
}

fn measure(quick: bool, rounds: u32) -> anyhow::Result<Value> {
    let fractions: &[f64] = if quick {
        &[1.5]
    } else {
        &[0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    };
    let window_ms: u64 = if quick { 1500 } else { 3000 };
    let rounds = if quick { 1 } else { rounds.clamp(1, 3) };
    let net15 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../stacks/mcast-net15.toml"),
    )
    .context("stacks/mcast-net15.toml")?;
    let exe = std::env::current_exe().context("finding the viastack binary")?;
    let dir = std::env::temp_dir().join(format!("viastack-bench-tb-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let samples_ms = [START_MS + SETTLE_MS, START_MS + window_ms];
    let mut rows = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for &fr in fractions {
            let interval_ns = ((SIZE * 8) as f64 * 1e9 / (fr * LINK_BPS as f64)) as u64;
            let messages = window_ms * 1_000_000 / interval_ns.max(1);
            let text = variant(&net15, LINK_BPS, messages, interval_ns, window_ms)?;
            let path: PathBuf = dir.join(format!("net15-{}.toml", (fr * 100.0) as u32));
            std::fs::write(&path, text)?;
            let mut per: Vec<Vec<[f64; 3]>> = vec![Vec::new(); RECEIVERS.len()];
            for round in 0..rounds {
                eprintln!(
                    "bench multicast: testbed, offered {:.0} % of {} Mbit/s, round {} …",
                    fr * 100.0,
                    LINK_BPS / 1_000_000,
                    round + 1
                );
                let report = testbed_run(&exe, &path, samples_ms)?;
                for (i, h) in RECEIVERS.iter().enumerate() {
                    per[i].push(receiver_rates(&report, h, messages)?);
                }
            }
            let col = |i: usize, k: usize| -> Vec<f64> { per[i].iter().map(|r| r[k]).collect() };
            let receivers: serde_json::Map<String, Value> = RECEIVERS
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let wire = median(&col(i, 0));
                    (
                        (*h).to_string(),
                        json!({
                            "received_bits_per_s": wire,
                            "payload_bits_per_s": median(&col(i, 1)),
                            "vs_link_rate": wire / LINK_BPS as f64,
                            "delivered_fraction": median(&col(i, 2)),
                        }),
                    )
                })
                .collect();
            let all: Vec<f64> = (0..RECEIVERS.len())
                .flat_map(|i| col(i, 0))
                .map(|w| w / LINK_BPS as f64)
                .collect();
            rows.push(json!({
                "offered_fraction": fr,
                "offered_payload_bits_per_s": fr * LINK_BPS as f64,
                "messages": messages,
                "receivers": receivers,
                "vs_link_rate_median": median(&all),
                "vs_link_rate_range": [
                    all.iter().copied().fold(f64::INFINITY, f64::min),
                    all.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ],
            }));
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    let headline = rows
        .last()
        .and_then(|r| r["vs_link_rate_median"].as_f64())
        .unwrap_or(f64::NAN);
    Ok(json!({
        "what": "seed 004's 15-node network on the netns testbed (one `viastack node` per \
                 namespace, veth links, every link `tc tbf` at link_bits_per_s, no loss); A \
                 multicasts 1000-byte messages to H1-H4 (four hops) at each offered rate; \
                 received link-layer bits/s per receiver from its interface counters, read \
                 500 ms into the send window and at its end",
        "link_bits_per_s": LINK_BPS,
        "size": SIZE,
        "window_ms": window_ms,
        "rounds": rounds,
        "rates": rows,
        "basic_multicast_vs_link_capacity": headline,
    }))
}
