//! `viastack bench`: each benchmark runs viastack and its reference in one run and prints the
//! ratios (DESIGN.md §4.8, §7). Benchmarks read the real clock; protocol code never does.

use clap::Subcommand;

mod kernel;
mod sp;
mod unicast;

/// What to measure.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Kernel dispatch: events through transparent and ghost layers vs direct calls (seed 001
    /// Table 3).
    Kernel(kernel::KernelArgs),
    /// Reliable FIFO unicast on loopback vs kernel TCP, raw UDP and quinn; ping-pong latency.
    Unicast(unicast::UnicastArgs),
    /// SP transfer time, 1 KiB–256 KiB, vs kernel TCP and UDP (seed 002 §5).
    Sp(sp::SpArgs),
}

/// Runs one benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Kernel(args) => kernel::run(&args),
        BenchCommand::Unicast(args) => unicast::run(&args),
        BenchCommand::Sp(args) => sp::run(&args),
    }
}
