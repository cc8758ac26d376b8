//! `viastack`: compose, check, simulate and measure communication stacks.
//!
//! Subcommands map onto the crates: `bench kernel` measures the kernel's dispatch (seed 001
//! Table 3).

use clap::{Parser, Subcommand};

mod bench;

#[derive(Parser)]
#[command(
    name = "viastack",
    version,
    about = "Compose, check, simulate and measure communication stacks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure viastack against its references and print the ratios.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VIASTACK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Bench { what } => bench::run(what),
    }
}
