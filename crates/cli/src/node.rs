//! `viastack run --net` with one process per node, and the hidden `viastack node` subcommand
//! each of those processes runs (see `viastack_net::procs` for the conversation).

use std::io::{BufReader, Write};
use std::path::Path;

use anyhow::Context as _;
use viastack_kernel::Duration;
use viastack_scenario::{Report, RunOptions};
use viastack_stack::{Catalog, StackFile};

/// Runs every node of `file`'s scenario as a child process of this binary, on loopback.
pub fn run_processes(
    file: &StackFile,
    _catalog: &Catalog,
    options: &RunOptions,
) -> anyhow::Result<Report> {
    let exe = std::env::current_exe().context("finding the viastack binary to start nodes")?;
    Ok(viastack_net::run_processes(file, options, &exe)?)
}

/// The child: one node of a `run --net` run.
pub fn child(
    path: &Path,
    catalog: &Catalog,
    node: u32,
    seed: u64,
    duration_ns: u64,
) -> anyhow::Result<()> {
    let src = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let file = viastack_stack::parse(&path.display().to_string(), &src, catalog)
        .map_err(|d| anyhow::anyhow!("{d}"))?;
    let stdin = std::io::stdin();
    let mut input = BufReader::new(stdin.lock());
    let mut output = std::io::stdout().lock();
    viastack_net::run_child(
        &file,
        catalog,
        node,
        seed,
        Duration::from_nanos(duration_ns),
        &mut input,
        &mut output,
    )
    .with_context(|| format!("node {node}"))?;
    output.flush()?;
    Ok(())
}
