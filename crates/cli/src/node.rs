//! `viastack run --net` with one process per node: the parent starts `viastack node` children
//! (a hidden subcommand), gives them the peer table and a common start time, and merges what
//! they observed into one report.
//!
//! Protocol between parent and child, one line each over the child's stdin/stdout:
//! child → `READY <socket address>`; parent → `START <epoch, ns since 1970> <addr0> <addr1> …`;
//! child → `RESULT <json of its observations>` at the end of the run.

use anyhow::bail;
use viastack_scenario::{Report, RunOptions};
use viastack_stack::{Catalog, StackFile};

/// Runs every node of `file`'s scenario as a child process on loopback.
pub fn run_processes(
    _file: &StackFile,
    _catalog: &Catalog,
    _options: &RunOptions,
) -> anyhow::Result<Report> {
    bail!("one process per node is not built yet; use --net --threads")
}
