//! `viastack run FILE` and `viastack demo`: run a scenario in the deterministic simulator with a
//! progress bar, print the report (or JSON), and fail when the declared property is violated.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use viastack_scenario::{Report, RunOptions};
use viastack_stack::{Catalog, StackFile};

/// Exit status when the run completed but the declared property did not hold.
pub const EXIT_VIOLATED: u8 = 2;

/// What runs the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The deterministic simulator, in virtual time.
    Simulator,
    /// Real loopback UDP sockets, every node a thread of this process.
    Threads,
    /// Real loopback UDP sockets, every node a process.
    Processes,
}

/// Runs `file`'s scenario and prints the report.
pub fn run_and_report(
    file: &StackFile,
    catalog: &Catalog,
    options: &RunOptions,
    driver: Driver,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if driver != Driver::Simulator {
        for ignored in viastack_net::ignored_settings(file) {
            eprintln!(
                "{}: on real sockets the scenario's {ignored} are not applied",
                file.path
            );
        }
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(100);
        bar.set_style(
            ProgressStyle::with_template("{spinner} simulating [{bar:40}] {percent:>3}% {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(file.path.clone());
        Some(bar)
    } else {
        None
    };
    let report = match driver {
        Driver::Simulator => viastack_scenario::run(file, catalog, options, |f| {
            if let Some(b) = &bar {
                b.set_position((f * 100.0) as u64);
            }
        })
        .map_err(anyhow::Error::from),
        Driver::Threads => {
            viastack_net::run_threads(file, catalog, options).map_err(anyhow::Error::from)
        }
        Driver::Processes if file.topology.is_some() => {
            eprintln!(
                "{}: a [topology] runs on loopback with every node a thread (one socket per \
                 interface); `viastack testbed up` runs a process per node in network namespaces",
                file.path
            );
            viastack_net::run_threads(file, catalog, options).map_err(anyhow::Error::from)
        }
        Driver::Processes => crate::node::run_processes(file, catalog, options),
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let report: Report = report.with_context(|| format!("running {}", file.path))?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        outln!("{report}")?;
    }
    Ok(if report.verdict.holds {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "{}: property `{}` violated (seed {}): {}",
            file.path,
            report.verdict.expect,
            report.seed,
            report.verdict.violations.join("; ")
        );
        ExitCode::from(EXIT_VIOLATED)
    })
}
