//! `viastack`: compose, check, simulate and measure communication stacks.
//!
//! - `check FILE` validates a stack file and prints its route tables;
//! - `run FILE` runs its scenario in the deterministic simulator and judges its property;
//! - `demo` runs the embedded default scenario (no files needed);
//! - `node FILE --id N --deployment D` runs one node of a stack on real sockets;
//! - `testbed up|down FILE` builds a stack file's topology from network namespaces and runs it;
//! - `layers` lists the layer kinds a stack file may use, with their parameters;
//! - `keygen [--out FILE]` makes a group key for `encrypt` (to stdout, or a new 0600 file);
//! - `overlay join|status` runs one overlay node on real UDP and shows its status;
//! - `bench kernel` measures the kernel's dispatch (seed 001 Table 3);
//! - `spec check|dot|conformance` reads, draws and tests SCXML specifications (issue 5);
//! - `services hash|sign|pubkey|serve|fetch` handles spec bundles deployed at run time;
//! - `bus serve|check|decode` runs the coordination bus on a T-script (seed 003).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use viastack_kernel::Duration;
use viastack_scenario::RunOptions;
use viastack_stack::units::parse_duration;

/// `println!` that returns the write error instead of panicking: `viastack … | head` closes
/// the pipe, which `main` treats as a normal end.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!` that returns the write error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod alloc;
mod bus;
mod check;
mod group_cmd;
mod keygen;
mod member;
mod node;
mod overlay_cmd;
mod run;
mod services;
mod sp;
mod spec;
mod spec_explore;
mod spec_run;
mod testbed;

/// The embedded default scenario of `viastack demo`.
const DEMO: &str = include_str!("../../../stacks/demo.toml");

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
    /// Validate a stack file and print each QoS's route table.
    Check {
        /// The stack file (TOML).
        file: PathBuf,
    },
    /// Run a stack file's scenario in the simulator and report; exits 2 if its property fails.
    Run {
        /// The stack file (TOML).
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override the scenario's duration (e.g. "10s", "500ms").
        #[arg(long, value_parser = duration_arg)]
        duration: Option<Duration>,
        /// Run the nodes on real loopback UDP sockets in real time instead of the simulator.
        #[arg(long)]
        net: bool,
        /// With --net: run every node as a thread of this process.
        #[arg(long, requires = "net")]
        threads: bool,
    },
    /// Run the embedded default scenario: a lossy, reordering network, FIFO delivery.
    Demo {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Print the embedded stack file instead of running it.
        #[arg(long)]
        show: bool,
    },
    /// Build a stack file from properties (e.g. `compose reliable ordered multicast`): the
    /// components are chosen by what the catalog declares they provide, require and exclude,
    /// ordered by their place; the file is checked and printed, or the combination refused
    /// with the reason (seed 004: properties-in, protocol-out).
    Compose {
        /// The properties wanted (see `viastack layers`).
        #[arg(required = true)]
        properties: Vec<String>,
    },
    /// List the layer kinds a stack file may use and their parameters.
    Layers {
        /// Print the Markdown parameter reference (as in docs/LAYERS.md).
        #[arg(long)]
        markdown: bool,
    },
    /// Make a group key for the `encrypt` layer: 64 hex digits from the OS's random source.
    Keygen {
        /// Write the key to this new file, mode 0600 (an existing file is never overwritten),
        /// instead of standard output; name it in stack files with `key_file`.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run one node of a stack on real sockets, across machines: a member of the deployment,
    /// or its share of the scenario's workloads.
    Node(member::NodeArgs),
    /// One node of `run --net` (started by it; not for direct use).
    #[command(hide = true)]
    NetChild {
        /// The stack file.
        file: PathBuf,
        /// This node's id.
        #[arg(long)]
        node: u32,
        /// The run's seed.
        #[arg(long)]
        seed: u64,
        /// How long the run lasts, in nanoseconds.
        #[arg(long)]
        duration_ns: u64,
    },
    /// SP, the Simple Protocol transport: listen, send a file, decode a packet.
    Sp {
        #[command(subcommand)]
        what: sp::SpCommand,
    },
    /// Executable specifications (SCXML): check, draw, run the W3C conformance suite.
    Spec {
        #[command(subcommand)]
        what: spec::SpecCommand,
    },
    /// Spec bundles of services deployed at run time: hash, sign, serve, fetch (issue 16 §4).
    Services {
        #[command(subcommand)]
        what: services::ServicesCommand,
    },
    /// Overlay networks on real sockets: join one as a node, show a node's status.
    Overlay {
        #[command(subcommand)]
        what: overlay_cmd::OverlayCommand,
    },
    /// Group communication on real sockets: a chat in a virtual-synchrony group with total
    /// order.
    Group {
        #[command(subcommand)]
        what: group_cmd::GroupCommand,
    },
    /// The real multi-hop testbed (root): a stack file's topology as network namespaces.
    Testbed {
        #[command(subcommand)]
        what: testbed::TestbedCommand,
    },
    /// The coordination bus: run a T-script that coordinates tools, check one, decode a frame.
    Bus {
        #[command(subcommand)]
        what: bus::BusCommand,
    },
    /// Measure viastack against its references and print the ratios.
    Bench {
        #[command(subcommand)]
        what: viastack_bench::BenchCommand,
    },
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn load(
    path: &Path,
    catalog: &viastack_stack::Catalog,
) -> anyhow::Result<Result<viastack_stack::StackFile, viastack_stack::Diagnostics>> {
    let src = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(viastack_stack::parse(
        &path.display().to_string(),
        &src,
        catalog,
    ))
}

fn main() -> ExitCode {
    alloc::configure();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VIASTACK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match real_main(Cli::parse()) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> anyhow::Result<ExitCode> {
    let catalog = viastack_stack::standard_catalog();
    match cli.command {
        Command::Check { file } => match load(&file, &catalog)? {
            Ok(parsed) => match check::render(&parsed, &catalog) {
                Ok(out) => {
                    out!("{out}")?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(diags) => {
                    eprintln!("{diags}");
                    Ok(ExitCode::FAILURE)
                }
            },
            Err(diags) => {
                eprintln!("{diags}");
                Ok(ExitCode::FAILURE)
            }
        },
        Command::Run {
            file,
            json,
            seed,
            duration,
            net,
            threads,
        } => match load(&file, &catalog)? {
            Ok(parsed) => {
                let options = RunOptions { seed, duration };
                let driver = match (net, threads) {
                    (false, _) => run::Driver::Simulator,
                    (true, true) => run::Driver::Threads,
                    (true, false) => run::Driver::Processes,
                };
                run::run_and_report(&parsed, &catalog, &options, driver, json)
            }
            Err(diags) => {
                eprintln!("{diags}");
                Ok(ExitCode::FAILURE)
            }
        },
        Command::Demo { json, show } => {
            if show {
                out!("{DEMO}")?;
                return Ok(ExitCode::SUCCESS);
            }
            let parsed = viastack_stack::parse("demo.toml (embedded)", DEMO, &catalog)
                .map_err(|d| anyhow::anyhow!("the embedded demo is invalid:\n{d}"))?;
            if !json {
                outln!(
                    "viastack demo: {} (see `viastack demo --show`)\n",
                    first_comment(DEMO)
                )?;
            }
            run::run_and_report(
                &parsed,
                &catalog,
                &RunOptions::default(),
                run::Driver::Simulator,
                json,
            )
        }
        Command::Compose { properties } => {
            match viastack_stack::compose::compose(&properties, &catalog) {
                Ok(c) => {
                    // Checked as any stack file is before it is printed.
                    if let Err(d) = viastack_stack::parse("composed.toml", &c.text, &catalog) {
                        anyhow::bail!("the composed stack does not check: {d}");
                    }
                    for r in &c.reasons {
                        eprintln!("compose: {r}");
                    }
                    out!("{}", c.text)?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("compose: refused: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Layers { markdown } => {
            if markdown {
                out!("{}", catalog.params_markdown())?;
                out!("\n{}", viastack_stack::compose::markdown())?;
            } else {
                for kind in catalog.kinds() {
                    let params: Vec<&str> = kind.params.iter().map(|p| p.name).collect();
                    outln!(
                        "{:<14} {}",
                        kind.name,
                        kind.doc.lines().next().unwrap_or("")
                    )?;
                    if !params.is_empty() {
                        outln!("{:<14} params: {}", "", params.join(", "))?;
                    }
                    for group in kind.one_of {
                        outln!("{:<14} exactly one of: {}", "", group.join(", "))?;
                    }
                    if let Some(c) = viastack_stack::compose::composition(kind.name) {
                        let list = |v: &[&str]| {
                            if v.is_empty() {
                                "-".to_string()
                            } else {
                                v.join(", ")
                            }
                        };
                        outln!(
                            "{:<14} compose: {}, slot {}; provides {}; requires {}; excludes {}",
                            "",
                            c.orientation,
                            c.slot,
                            list(c.provides),
                            list(c.requires),
                            list(c.excludes)
                        )?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Keygen { out } => {
            keygen::run(out.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Node(args) => member::run(&args, &catalog),
        Command::Testbed { what } => testbed::run(&what, &catalog),
        Command::NetChild {
            file,
            node: id,
            seed,
            duration_ns,
        } => {
            node::child(&file, &catalog, id, seed, duration_ns)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sp { what } => sp::run(what),
        Command::Spec { what } => spec::run(what),
        Command::Services { what } => services::run(what),
        Command::Overlay { what } => overlay_cmd::run(what),
        Command::Group { what } => group_cmd::run(what),
        Command::Bus { what } => bus::run(what),
        Command::Bench { what } => {
            viastack_bench::run(what)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Whether `e` is stdout closing under us (`viastack … | head`): not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The first comment line of a stack file (its title).
fn first_comment(src: &str) -> &str {
    src.lines()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or("embedded scenario")
}
