//! `viastack spec explore FILE --topology tree:7 --loss 1 --dup 1`: exhaustive bounded
//! exploration of one delivery service over a small overlay (issue 15 §5;
//! `viastack_spec::service::explore`). Prints the figures (states, transitions, depth,
//! states/s, whether the space was exhausted within the bounds), or the first violation with
//! its shortest trace as `spec run` JSONL (exit 1).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use viastack_spec::service::explore::{self, Declaration, Options, TimerMode, Topology};
use viastack_spec::service::Service;

/// When timers fire.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Timers {
    /// Only when no message is in flight, earliest deadline first.
    Deadline,
    /// Any armed timer at any point.
    Any,
}

/// Options of `viastack spec explore`.
#[derive(Args)]
pub struct ExploreArgs {
    /// The service specification (SCXML with `<data name="explore">`).
    file: PathBuf,
    /// The overlay: tree:N (complete binary tree rooted at node 0), line:N or star:N.
    #[arg(long, default_value = "tree:7")]
    topology: String,
    /// Most messages lost in one run.
    #[arg(long, default_value_t = 0)]
    loss: u32,
    /// Most messages duplicated in one run.
    #[arg(long, default_value_t = 0)]
    dup: u32,
    /// Most distinct states visited.
    #[arg(long, default_value_t = 1_000_000)]
    bound: usize,
    /// Most events in one run.
    #[arg(long, default_value_t = 10_000)]
    depth: usize,
    /// More messages in flight than this is a violation (unbounded growth).
    #[arg(long, default_value_t = 64)]
    max_inflight: usize,
    /// When timers fire.
    #[arg(long, value_enum, default_value = "deadline")]
    timers: Timers,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
    /// Write a violation's trace (JSONL for `spec run`) to this file.
    #[arg(long)]
    trace_out: Option<PathBuf>,
}

/// Runs `spec explore`: exit 1 on a violation or a service that does not load.
///
/// # Errors
/// A file that cannot be read or written, or stdout closing.
pub fn run(args: &ExploreArgs) -> anyhow::Result<ExitCode> {
    let name = args.file.display().to_string();
    let src =
        std::fs::read_to_string(&args.file).with_context(|| format!("{name}: cannot read"))?;
    let svc = match Service::load(&name, &src) {
        Ok((svc, warnings)) => {
            for w in &warnings {
                eprintln!("{w}");
            }
            Arc::new(svc)
        }
        Err(d) => {
            eprintln!("{d}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let decl = match Declaration::read(&name, &src) {
        Ok(Some(d)) => d,
        Ok(None) => {
            eprintln!(
                "{name}: no <data name=\"explore\"> declaration (what to inject, which properties)"
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let topo = match Topology::parse(&args.topology) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let opts = Options {
        loss: args.loss,
        dup: args.dup,
        max_states: args.bound,
        max_depth: args.depth,
        max_inflight: args.max_inflight,
        timers: match args.timers {
            Timers::Deadline => TimerMode::Deadline,
            Timers::Any => TimerMode::Any,
        },
    };
    // Wall time for the states/s figure only (the explorer itself has no clock).
    #[allow(clippy::disallowed_methods)] // a driver: it reports states per second
    let t0 = std::time::Instant::now();
    let report = explore::explore(&svc, &decl, &topo, opts);
    let secs = t0.elapsed().as_secs_f64();
    if let (Some(v), Some(path)) = (&report.violation, &args.trace_out) {
        let mut text = v.trace.join("\n");
        text.push_str(&format!(
            "\n# violation of `{}`: {}\n",
            v.property, v.message
        ));
        std::fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    if args.json {
        let mut j = report.to_json(secs);
        j["service"] = serde_json::json!(svc.data.name);
        j["topology"] = serde_json::json!(topo.name);
        j["loss"] = serde_json::json!(args.loss);
        j["dup"] = serde_json::json!(args.dup);
        outln!("{j}")?;
    } else {
        let rate = if secs > 0.0 {
            report.states as f64 / secs
        } else {
            0.0
        };
        outln!(
            "{}: {} on {} (loss {}, dup {}): {} states, {} transitions, depth {}, {} terminal, {:.3} s, {:.0} states/s, {}",
            name,
            svc.data.name,
            topo.name,
            args.loss,
            args.dup,
            report.states,
            report.transitions,
            report.depth,
            report.terminal,
            secs,
            rate,
            if report.violation.is_some() {
                "stopped at the first violation".to_string()
            } else if report.exhausted {
                "exhausted within the bound".to_string()
            } else {
                format!("NOT exhausted (bound {} states, depth {})", args.bound, args.depth)
            }
        )?;
    }
    match &report.violation {
        None => Ok(ExitCode::SUCCESS),
        Some(v) => {
            eprintln!(
                "violation of `{}`: {} (after {} events); trace:",
                v.property, v.message, v.events
            );
            if !args.json {
                for l in &v.trace {
                    outln!("{l}")?;
                }
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
