//! `viastack spec run FILE… --trace TRACE.jsonl`: runs seed-000 services (SCXML with service
//! data and `<action:…>` elements) on a trace of basic inputs and prints every action, one JSON
//! object a line (the formats: `viastack_spec::service::trace`, docs/spec-format.md, Part II).
//! A trace whose lines name nodes (`"at": N`, as `spec explore` writes counterexamples) runs
//! one store per node and tags every output line with its node.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use viastack_spec::service::{trace, Service, Store, StoreConfig};

/// Options of `viastack spec run`.
#[derive(Args)]
pub struct RunArgs {
    /// The service specifications (SCXML), distinct ServiceIDs.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The trace: JSON Lines of message arrivals, timer expiries and node information.
    #[arg(long)]
    trace: PathBuf,
    /// Armed timers expire by themselves (besides the trace's timer lines).
    #[arg(long)]
    auto_timers: bool,
    /// With --auto-timers, no timer fires after this time (ms).
    #[arg(long)]
    end_ms: Option<u64>,
    /// Most steps one event may take in one instance (a transition loop is stopped).
    #[arg(long)]
    step_limit: Option<u32>,
}

/// Runs `spec run`: exit 1 if a specification does not load or the trace is unreadable.
///
/// # Errors
/// A file that cannot be read, or stdout closing.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let mut services = Vec::new();
    for f in &args.files {
        let name = f.display().to_string();
        let src = std::fs::read_to_string(f).with_context(|| format!("{name}: cannot read"))?;
        match Service::load(&name, &src) {
            Ok((mut svc, warnings)) => {
                for w in &warnings {
                    eprintln!("{w}");
                }
                if let Some(n) = args.step_limit {
                    svc.set_step_limit(n);
                }
                services.push(Arc::new(svc));
            }
            Err(diags) => {
                eprintln!("{diags}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let tname = args.trace.display().to_string();
    let tsrc =
        std::fs::read_to_string(&args.trace).with_context(|| format!("{tname}: cannot read"))?;
    if trace::is_multi_node(&tsrc) {
        // A multi-node trace (`"at"` on its lines, as `spec explore` writes them): one store
        // per node.
        if args.auto_timers {
            eprintln!("{tname}: --auto-timers does not apply to a multi-node trace (\"at\")");
            return Ok(ExitCode::FAILURE);
        }
        let inputs = match trace::parse_nodes(&tsrc) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("{tname}:{e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let make = || Store::new(services.clone(), StoreConfig::default());
        for line in trace::run_nodes(make, &inputs) {
            outln!("{line}")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let inputs = match trace::parse(&tsrc) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{tname}:{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut store = Store::new(services, StoreConfig::default());
    let opts = trace::Options {
        auto_timers: args.auto_timers,
        end_ms: args.end_ms,
    };
    for line in trace::run(&mut store, &inputs, opts) {
        outln!("{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}
