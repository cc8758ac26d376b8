//! `viastack bench`: each benchmark runs viastack and its reference in one run and prints the
//! ratios (DESIGN.md §4.8, §7). Benchmarks read the real clock; protocol code never does.

use clap::Subcommand;

mod kernel;
mod spec;
mod unicast;

/// What to measure.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Kernel dispatch: events through transparent and ghost layers vs direct calls (seed 001
    /// Table 3).
    Kernel(kernel::KernelArgs),
    /// Reliable FIFO unicast on loopback vs kernel TCP, raw UDP and quinn; ping-pong latency.
    Unicast(unicast::UnicastArgs),
    /// Compiled SCXML h2hack service vs the same service hand-written in Rust (seed 000 §6).
    Spec(spec::SpecArgs),
}

/// Runs one benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Kernel(args) => kernel::run(&args),
        BenchCommand::Unicast(args) => unicast::run(&args),
        BenchCommand::Spec(args) => spec::run(&args),
    }
}
