//! `viastack bench overlay` (issue 16 "Figures"; seed 000 §3.1.1 and §6: HyperCast's
//! 10,000-node overlay in just over 30 s, and the throughput its SCXML services cost).
//!
//! - **DT convergence** ([`dt`]): `dt_N_converge_s` (virtual seconds until N simulated DT
//!   nodes joining within the first 10 s form the Delaunay triangulation; target ≤ 30 s at
//!   N = 10,000), `dt_N_wall_s` (wall time of that simulation; target ≤ 120 s on the 2-core
//!   machine), `converged`, and `control_bytes_per_node_s` (steady state at the default
//!   heartbeats).
//! - **Services vs base** ([`services`]): 1 KiB multicasts per second delivered to every node
//!   of a 16-node overlay on loopback UDP (nodes as threads of this process, `viastack::overlay`
//!   sockets), with h2hack run by the MessageStore divided by the same overlay without a
//!   service (`services_vs_base`, target ≥ 0.8), with absolute messages/s and Mbit/s. The two
//!   overlays run side by side and take turns round by round; each lane's figure is the median
//!   of its rounds, the ratio comes with a 95 % paired-bootstrap interval
//!   ([`super::stats`]).

use clap::Args;
use serde_json::{json, Value};
use viastack_kernel::Duration;

pub mod dt;
mod services;

/// Options of `viastack bench overlay`.
#[derive(Args)]
pub struct OverlayArgs {
    /// Simulated DT nodes.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Seed of the DT simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Probability that a DT control message is lost (default 0).
    #[arg(long, default_value_t = 0.0)]
    dt_loss: f64,
    /// Virtual seconds of steady state measured after convergence.
    #[arg(long, default_value_t = 20)]
    steady_s: u64,
    /// Nodes of the loopback overlay of the services figure.
    #[arg(long, default_value_t = 16)]
    overlay_nodes: u32,
    /// Rounds per lane of the services figure (lanes alternate, the first lane alternates).
    #[arg(long, default_value_t = 20)]
    repeat: usize,
    /// Multicast messages per round.
    #[arg(long, default_value_t = 200)]
    messages: usize,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// The h2hack specification (relative to the working directory).
    #[arg(long, default_value = "specs/h2hack.scxml")]
    spec: String,
    /// Only the DT figure.
    #[arg(long, conflicts_with = "only_services")]
    only_dt: bool,
    /// Only the services figure.
    #[arg(long)]
    only_services: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs the benchmark.
pub fn run(args: &OverlayArgs) -> anyhow::Result<()> {
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), json!("overlay"));
    if !args.only_services {
        let r = dt::run(&dt::DtRun {
            nodes: args.nodes,
            seed: args.seed,
            join_within: Duration::from_secs(10),
            limit: Duration::from_secs(300),
            steady: Duration::from_secs(args.steady_s),
            check_every: Duration::from_millis(250),
            loss: args.dt_loss,
        })?;
        let n = args.nodes;
        out.insert(format!("dt_{n}_converge_s"), json!(r.converge_s));
        out.insert(format!("dt_{n}_wall_s"), json!(r.wall_s));
        out.insert("dt_nodes".into(), json!(n));
        out.insert("dt_loss".into(), json!(args.dt_loss));
        out.insert("dt_last_start_s".into(), json!(r.last_start_s));
        out.insert(
            "dt_after_last_start_s".into(),
            json!(r.converge_s.map(|c| c - r.last_start_s)),
        );
        out.insert("converged".into(), json!(r.converged));
        out.insert("dt_wrong_nodes".into(), json!(r.wrong_nodes));
        out.insert("dt_leaders".into(), json!(r.leaders));
        out.insert("dt_messages".into(), json!(r.messages));
        out.insert(
            "control_bytes_per_node_s".into(),
            num(r.control_bytes_per_node_s),
        );
        out.insert(
            "control_msgs_per_node_s".into(),
            num(r.control_msgs_per_node_s),
        );
        let mut targets = serde_json::Map::new();
        if n == 10_000 {
            targets.insert(
                "dt_10000_converge_s_le_30".into(),
                json!(r.converge_s.is_some_and(|s| s <= 30.0)),
            );
            targets.insert("dt_10000_wall_s_le_120".into(), json!(r.wall_s <= 120.0));
        }
        out.insert("dt_targets".into(), Value::Object(targets));
        if !args.json {
            eprintln!(
                "dt: {n} nodes, converged {} at {:?} s virtual, {:.1} s wall; steady state {:.0} control bytes/node/s",
                r.converged, r.converge_s, r.wall_s, r.control_bytes_per_node_s
            );
        }
    }
    if !args.only_dt {
        let s = services::run(&services::ServicesRun {
            nodes: args.overlay_nodes,
            rounds: args.repeat,
            messages: args.messages,
            size: args.size,
            spec: args.spec.clone(),
        })?;
        for (k, v) in s {
            out.insert(k, v);
        }
    }
    let v = Value::Object(out);
    if args.json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

/// A JSON number, or null for NaN.
fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}
