//! `viastack bench`: each benchmark runs viastack and its reference in one run and prints the
//! ratios (DESIGN.md §4.8, §7). Benchmarks read the real clock; protocol code never does.
//!
//! This crate holds the benchmark machinery so the `viastack` binary (`crates/cli`) stays a
//! thin shell: the binary parses `viastack bench …` into a [`BenchCommand`] and calls [`run`].
//! Lanes that need separate processes (bus tools, group members, the multicast peers, the
//! testbed) start the running `viastack` binary again (`std::env::current_exe`), so they
//! run only from inside it, not from a test binary of this crate.

/// `println!` that returns the write error instead of panicking: `viastack bench … | head`
/// closes the pipe, which `main` treats as a normal end.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use clap::Subcommand;
use std::time::Duration;

mod all;
mod bus;
mod charts;
mod cpu;
mod group;
mod group_lwg;
mod kernel;
mod machine;
mod mcast_testbed;
mod multicast;
mod overlay;
mod pause;
mod plot;
mod sp;
mod spec;
mod stats;
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
    /// Compiled SCXML h2hack service vs the same service hand-written in Rust (seed 000 §6).
    Spec(spec::SpecArgs),
    /// Overlays: DT convergence of 10,000 simulated nodes, steady-state control traffic, and
    /// multicast throughput with h2hack vs without a service on a 16-node loopback overlay.
    Overlay(overlay::OverlayArgs),
    /// The coordination bus: by reference vs by value (1 KB–50 MB), the bus's peak memory,
    /// evaluate/value round trips vs a TCP echo (seed 003 "Results").
    Bus(bus::BusArgs),
    /// Total-order group multicast, 3 members on loopback, vs JGroups with SEQUENCER; view
    /// change latency after a crash (seed 001 §2.1).
    Group(group::GroupArgs),
    /// Multicast composed from components (issue 17, seed 004): stack latency per component
    /// and per stack, basic multicast throughput on the 15-node network, reliable multicast
    /// against error rate, join/leave latency, and JGroups NAKACK2 beside it.
    Multicast(multicast::MulticastArgs),
    /// Every benchmark, recorded with the machine and commit in bench/results/ (and charts
    /// with `--plot DIR`).
    All(all::AllArgs),
}

/// The machine's cores as the process found them, before any thread was pinned: a thread
/// inherits its creator's affinity, so asking again from a pinned thread would list one core.
fn cores() -> &'static [core_affinity::CoreId] {
    static CORES: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// Whether [`pin`] puts every thread on core 0.
static SAME_CORE: AtomicBool = AtomicBool::new(false);

/// Makes [`pin`] put both sides on core 0 (`--same-core`).
pub fn set_same_core(same: bool) {
    SAME_CORE.store(same, Ordering::Relaxed);
}

/// Pins the calling thread to `core` (no-op where the platform does not allow it). The sides
/// of every benchmark run on cores 0 and 1, like two hosts (both on 0 after
/// [`set_same_core`]).
pub fn pin(core: usize) {
    let core = if SAME_CORE.load(Ordering::Relaxed) {
        0
    } else {
        core
    };
    if let Some(id) = cores().get(core).copied() {
        core_affinity::set_for_current(id);
    }
}

/// Runs one benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    cores(); // before anything is pinned
    match cmd {
        BenchCommand::Kernel(args) => kernel::run(&args),
        BenchCommand::Unicast(args) => unicast::run(&args),
        BenchCommand::Sp(args) => sp::run(&args),
        BenchCommand::Spec(args) => spec::run(&args),
        BenchCommand::Overlay(args) => overlay::run(&args),
        BenchCommand::Bus(args) => bus::run(&args),
        BenchCommand::Group(args) => group::run(&args),
        BenchCommand::Multicast(args) => multicast::run(&args),
        BenchCommand::All(args) => all::run(&args),
    }
}

/// Parses a `--flag 50ms`-style duration argument (the stack files' units).
fn duration_arg(s: &str) -> Result<Duration, String> {
    viastack_stack::units::parse_duration(s).map_err(|e| e.to_string())
}
