//! `viastack bench`: each benchmark runs viastack and its reference in one run and prints the
//! ratios (DESIGN.md §4.8, §7). Benchmarks read the real clock; protocol code never does.

use clap::Subcommand;

mod kernel;

/// What to measure.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Kernel dispatch: events through transparent and ghost layers vs direct calls (seed 001
    /// Table 3).
    Kernel(kernel::KernelArgs),
}

/// Runs one benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Kernel(args) => kernel::run(&args),
    }
}
