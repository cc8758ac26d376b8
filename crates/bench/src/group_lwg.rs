//! `viastack bench group`'s light-weight-group figure (issue 18 "Figures", seed 001 §2.1,
//! Rodrigues et al.'s light-weight groups): the cost of 10 user groups as 10 light-weight
//! groups over one heavy `vsync` group (one `lwg` session bound into the 10 channels) against
//! 10 separate heavy groups (plain `vsync` channels, default binding: one `vsync` and failure
//! detector per channel, no `lwg`).
//!
//! **Simulator-based** (the discrete-event simulator, 5 nodes, 1 ms links, no faults but the
//! ones below), so the datagram and control counts are exact and deterministic:
//!
//! - **Busy run**: every node multicasts `messages` 100-byte messages on each of the 10
//!   groups (one every 20 ms), node 4 crashes at 2 s (one view change). Figures: multicast
//!   messages delivered (each to every member) per second of *wall-clock* simulation time
//!   (the CPU cost of the whole 5-node system on one core — noisy on a loaded machine, hence
//!   min/max over the runs and the load average in the report), and datagrams per delivered
//!   message (exact).
//! - **Quiet run** (no traffic, the same crash): control datagrams caused by the one view
//!   change — the flush (`vsync.view_control`: `Flush`, `FlushOk`, `FlushNo`, `NewView`) plus
//!   the light views' `Joined` announcements (`lwg.announce_datagrams`) — counted from just
//!   before the crash to the end of the run, and the background datagrams per second
//!   (heartbeats, status gossip) before the crash.

#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use viastack_kernel::NodeId;
use viastack_scenario::RunOptions;

use super::stats::median;

const NODES: u32 = 5;
const GROUPS: u32 = 10;
const CRASH_MS: u64 = 2000;
const END_MS: u64 = 4000;

/// The stack file: 10 groups over one heavy group (`shared`) or 10 heavy groups, `messages`
/// per node and group.
fn stack(shared: bool, messages: u64) -> String {
    // Light: one `lwg` session bound into every channel (automatic binding shares the rest);
    // heavy: plain `vsync` groups, one per channel (default binding), no `lwg` layer.
    let (bind, layers, session) = if shared {
        (
            "bind = { lwg = \"the-lwg\" }\n",
            r#"["dev", "sum", "hb", "vs", "lwg"]"#,
            "[sessions.the-lwg]\nlayer = \"lwg\"\n",
        )
    } else {
        ("", r#"["dev", "sum", "hb", "vs"]"#, "")
    };
    let mut src = format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.hb]
kind = "heartbeat"
interval = "20ms"
timeout = "100ms"
[layers.vs]
kind = "vsync"
[layers.lwg]
kind = "lwg"
[qos.light]
layers = {layers}
{session}[scenario]
nodes = {NODES}
seed = 3
duration = "{END_MS}ms"
expect = "virtual-synchrony"
[scenario.link]
latency = "1ms"
[[scenario.crash]]
node = {}
at = "{CRASH_MS}ms"
"#,
        NODES - 1
    );
    for g in 0..GROUPS {
        let _ = write!(src, "[channels.g{g}]\nqos = \"light\"\n{bind}");
        if messages > 0 {
            let _ = write!(
                src,
                "[[scenario.workload]]\nchannel = \"g{g}\"\npattern = \"multicast\"\n\
                 messages = {messages}\ninterval = \"20ms\"\nstart = \"500ms\"\nsize = 100\n"
            );
        }
    }
    src
}

fn parse(src: &str) -> anyhow::Result<viastack_stack::StackFile> {
    let catalog = viastack_stack::standard_catalog();
    viastack_stack::parse("bench-group-lwg.toml", src, &catalog)
        .map_err(|d| anyhow::anyhow!("bench group lwg: invalid stack file:\n{d}"))
}

/// Whether counter `k` counts view-change control datagrams.
fn is_control(k: &str) -> bool {
    k.ends_with(".view_control") || k.ends_with(".announce_datagrams")
}

/// One configuration's figures.
fn lane(shared: bool, messages: u64, repeat: usize) -> anyhow::Result<Value> {
    let catalog = viastack_stack::standard_catalog();
    // Busy runs: wall-clock cost of the simulation, exact datagram counts.
    let busy = parse(&stack(shared, messages))?;
    let mut rates = Vec::new();
    let mut datagrams_per_msg = f64::NAN;
    let mut delivered = 0;
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        let r = viastack_scenario::run(&busy, &catalog, &RunOptions::default(), |_| {})?;
        let wall = t.elapsed().as_secs_f64();
        if !r.verdict.holds {
            bail!("bench group lwg: the run broke a group property:\n{r}");
        }
        delivered = r.delivered;
        rates.push(r.delivered as f64 / wall);
        datagrams_per_msg = r.network.sent as f64 / r.delivered.max(1) as f64;
    }
    // Quiet run: control datagrams of the crash's view change, background before it.
    let quiet = parse(&stack(shared, 0))?;
    let slices = (END_MS / 50) as u32; // 50 ms slices
    let crash_slice = (CRASH_MS / 50) as u32;
    let (mut before, mut after, mut sent_before) = (0u64, 0u64, 0u64);
    let (r, _) = viastack_scenario::run_observed(
        &quiet,
        &catalog,
        &RunOptions::default(),
        slices,
        |i, _, sim| {
            if i != crash_slice && i != slices {
                return;
            }
            let mut control = 0;
            for id in 0..NODES {
                if let Some(node) = sim.node(NodeId(id)) {
                    for (k, v) in node.kernel().counters() {
                        if is_control(&k) {
                            control += v;
                        }
                    }
                }
            }
            if i == crash_slice {
                before = control;
                sent_before = sim.stats().sent;
            } else {
                after = control;
            }
        },
    )
    .context("bench group lwg: quiet run")?;
    let views = r.notices.get("View").copied().unwrap_or(0);
    Ok(json!({
        "messages_per_node_per_group": messages,
        "delivered": delivered,
        "msgs_delivered_per_wall_s": median(&rates),
        "msgs_delivered_per_wall_s_min": rates.iter().copied().fold(f64::INFINITY, f64::min),
        "msgs_delivered_per_wall_s_max": rates.iter().copied().fold(0.0, f64::max),
        "msgs_delivered_per_wall_s_runs": rates,
        "datagrams_per_delivered_msg": datagrams_per_msg,
        "control_datagrams_per_view_change": after.saturating_sub(before),
        "background_datagrams_per_s": sent_before as f64 / (CRASH_MS as f64 / 1000.0),
        "view_notices_quiet_run": views,
    }))
}

/// The LWG figure: `{ "light": …, "heavy": …, ratios }` (simulator-based).
pub fn figure(quick: bool) -> anyhow::Result<Value> {
    let (messages, repeat) = if quick { (20, 1) } else { (50, 3) };
    let light = lane(true, messages, repeat)?;
    let heavy = lane(false, messages, repeat)?;
    let ratio = |k: &str| {
        let (l, h) = (light[k].as_f64(), heavy[k].as_f64());
        match (l, h) {
            (Some(l), Some(h)) if l > 0.0 => json!(h / l),
            _ => Value::Null,
        }
    };
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string));
    Ok(json!({
        "simulated": true,
        "load_avg_1min_after": load,
        "how": "discrete-event simulator, 5 nodes, 1 ms links; 10 user groups as 10 \
                light-weight groups over one vsync group (light) or 10 vsync groups (heavy); \
                busy run: 100-byte multicasts every 20 ms per node and group, node 4 crashes \
                at 2 s; quiet run: no traffic, same crash",
        "light_10_over_1_heavy": light,
        "heavy_10": heavy,
        "throughput_light_vs_heavy": ratio("msgs_delivered_per_wall_s").as_f64().map(|x| 1.0 / x),
        "control_per_view_change_heavy_vs_light": ratio("control_datagrams_per_view_change"),
        "datagrams_per_msg_heavy_vs_light": ratio("datagrams_per_delivered_msg"),
    }))
}
