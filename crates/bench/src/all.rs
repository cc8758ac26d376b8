//! `viastack bench all` (issue 13 §6): every benchmark in one go (kernel, unicast, sp, spec,
//! overlay, bus, group, multicast), each in a fresh process of this binary (`bench NAME --json`),
//! recorded with the machine and the commit in `bench/results/<date>-<host>.json`, and with
//! `--plot DIR` one chart per benchmark that has one (`kernel.png`, `unicast.png`, `sp.png`,
//! `spec.png`, `multicast-*.png`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use clap::Args;
use serde_json::{json, Map, Value};

use super::charts;
use super::machine::Machine;

/// Options of `viastack bench all`.
#[derive(Args)]
pub struct AllArgs {
    /// Print the whole results document instead of a summary.
    #[arg(long)]
    json: bool,
    /// Draw one PNG per benchmark into this directory (created if missing).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the results here instead of `bench/results/<date>-<host>.json` of the source tree.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Fewer rounds and transfers: a quick look, not figures to record.
    #[arg(long)]
    quick: bool,
}

/// The benchmarks, with the arguments of a full and of a quick run.
const BENCHMARKS: [(&str, &[&str], &[&str]); 8] = [
    ("kernel", &[], &["--events", "500000", "--repeat", "2"]),
    (
        "unicast",
        &[],
        &["--repeat", "2", "--volume", "67108864", "--rounds", "1000"],
    ),
    ("sp", &[], &["--transfers", "20", "--repeat", "1"]),
    ("spec", &[], &["--messages", "50000", "--repeat", "2"]),
    ("overlay", &[], &["--nodes", "1000", "--repeat", "1"]),
    (
        "bus",
        &[],
        &[
            "--size",
            "1000,1000000,10000000",
            "--repeat",
            "1",
            "--roundtrips",
            "1000",
            "--rounds",
            "3",
            "--one-receiver",
        ],
    ),
    ("group", &[], &["--quick"]),
    ("multicast", &[], &["--quick"]),
];

/// Runs `bench NAME --json` in a fresh process; its document.
fn run_one(name: &str, extra: &[&str]) -> anyhow::Result<Value> {
    let exe = std::env::current_exe().context("this binary")?;
    let out = Command::new(exe)
        .args(["bench", name, "--json"])
        .args(extra)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("bench {name}"))?;
    if !out.status.success() {
        anyhow::bail!("bench {name} exited with {}", out.status);
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("bench {name}: not JSON"))
}

fn default_out(m: &Machine) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize()
        .unwrap_or(root)
        .join("bench/results")
        .join(format!("{}-{}.json", m.date, m.host))
}

/// Runs every benchmark, records and prints the results.
pub fn run(args: &AllArgs) -> anyhow::Result<()> {
    let machine = Machine::current();
    let mut results = Map::new();
    let mut failed = Map::new();
    for (name, full, quick) in BENCHMARKS {
        eprintln!("bench all: {name} …");
        match run_one(name, if args.quick { quick } else { full }) {
            Ok(doc) => {
                results.insert(name.into(), doc);
            }
            Err(e) => {
                eprintln!("bench all: {name} failed: {e:#}");
                failed.insert(name.into(), json!(format!("{e:#}")));
            }
        }
    }
    let doc = json!({
        "machine": machine.json(),
        "quick": args.quick,
        "benchmarks": results,
        "failed": failed,
    });
    let path = args.out.clone().unwrap_or_else(|| default_out(&machine));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("{}: cannot write", path.display()))?;
    if let Some(dir) = &args.plot {
        plot_all(&doc, dir)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    outln!("results: {}", path.display())?;
    outln!("machine: {}", machine.footnote())?;
    for (name, doc) in &results {
        outln!("{name}: {}", headline(name, doc))?;
    }
    for (name, why) in &failed {
        outln!("{name}: FAILED: {}", why.as_str().unwrap_or(""))?;
    }
    Ok(())
}

/// Draws each benchmark of a results document into `dir`.
///
/// # Errors
/// The directory or a file cannot be written.
pub fn plot_all(doc: &Value, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let footnote = Machine::from_json(&doc["machine"]).footnote();
    let b = &doc["benchmarks"];
    for (name, chart) in [
        ("kernel", charts::kernel as fn(&Value, &str) -> _),
        ("unicast", charts::unicast),
        ("sp", charts::sp),
        ("spec", charts::spec),
    ] {
        if b[name].is_null() {
            continue;
        }
        let path = dir.join(format!("{name}.png"));
        chart(&b[name], &footnote)
            .save_png(&path)
            .with_context(|| format!("{}: cannot plot", path.display()))?;
        eprintln!("bench all: drew {}", path.display());
    }
    if !b["multicast"].is_null() {
        for (name, chart) in super::multicast::charts(&b["multicast"], &footnote) {
            let path = dir.join(format!("multicast-{name}.png"));
            chart
                .save_png(&path)
                .with_context(|| format!("{}: cannot plot", path.display()))?;
            eprintln!("bench all: drew {}", path.display());
        }
    }
    Ok(())
}

/// The ratios a reader looks for first.
fn headline(name: &str, doc: &Value) -> String {
    let r = |v: &Value| v.as_f64().map_or("n/a".to_string(), |x| format!("{x:.3}"));
    match name {
        "unicast" => format!(
            "reliable_vs_jgroups {} at 1 KiB, {} at 64 KiB; reliable_vs_tcp {} at 64 KiB; \
             ping-pong reliable_vs_udp_p50 {}",
            r(&doc["1024"]["reliable_vs_jgroups"]),
            r(&doc["65536"]["reliable_vs_jgroups"]),
            r(&doc["65536"]["reliable_vs_tcp"]),
            r(&doc["pingpong_64"]["reliable_vs_udp_p50"]),
        ),
        "spec" => format!(
            "compiled_vs_handwritten {}, runtime_vs_handwritten {}",
            r(&doc["compiled_vs_handwritten"]),
            r(&doc["runtime_vs_handwritten"])
        ),
        "multicast" => format!(
            "reliable_multicast_vs_jgroups {}; JGroups NAKACK2 {} msg/s per receiver; join {} ms, \
             leave {} ms",
            r(&doc["reliable_multicast_vs_jgroups"]),
            r(&doc["peer"]["jgroups_nakack2"]["msgs_per_s_per_receiver"]),
            r(&doc["join_leave"]["join"]["p50_ms"]),
            r(&doc["join_leave"]["leave"]["p50_ms"]),
        ),
        "sp" => {
            let rows = doc["sizes"].as_array().cloned().unwrap_or_default();
            let worst = rows
                .iter()
                .filter_map(|row| row["sp_reliable_vs_udp_p50"].as_f64())
                .fold(f64::NAN, f64::max);
            format!("sp_reliable_vs_udp_p50 at worst {worst:.3}")
        }
        _ => doc
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| k.contains("_vs_") || (k.contains("per_layer") && v.is_number()))
            .map(|(k, v)| format!("{k} {}", r(v)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
