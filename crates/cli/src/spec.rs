//! `viastack spec …`: executable specifications (SCXML state charts, issue 5).
//!
//! - `spec check FILE [--explain]` reads, validates, verifies and compiles a chart; prints
//!   warnings and errors as `file:line:col: severity: message` on stderr; exits 1 on errors;
//!   `--explain` prints each composite event's expression (an `<XQuery>` with its translation
//!   into the first-order-logic language);
//! - `spec dot FILE` prints the chart as Graphviz DOT;
//! - `spec conformance DIR [--json] [--datamodel viastack|ecmascript]` runs the W3C SCXML
//!   test suite in DIR (a folder with `manifest.json` and `txml/`) and prints one line per
//!   test, then `N passed, N failed, N skipped, N excluded`; exits 1 if a test failed; with
//!   `--datamodel ecmascript` the placeholders become ECMAScript (confEcma.xsl) and the tests
//!   run on the ECMAScript datamodel;
//! - `spec run FILE… --trace TRACE.jsonl` runs services on a trace ([`crate::spec_run`]);
//! - `spec explore FILE --topology tree:7 --loss 1` explores a service exhaustively
//!   ([`crate::spec_explore`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use viastack_spec::chart::host::Datamodel;
use viastack_spec::chart::{self, conformance, Chart, CustomElement, OpaqueActions};
use viastack_spec::service::Service;

/// The `spec` subcommands.
#[derive(Subcommand)]
pub enum SpecCommand {
    /// Validate and verify an SCXML specification; exits 1 on errors.
    Check {
        /// The SCXML file.
        file: PathBuf,
        /// Also print each composite event's expression in the first-order-logic language;
        /// for one written in the seed's XQuery, the query and its translation.
        #[arg(long)]
        explain: bool,
    },
    /// Print an SCXML specification as Graphviz DOT (transitions labelled `event / actions`).
    Dot {
        /// The SCXML file.
        file: PathBuf,
    },
    /// Run services (SCXML with service data) on a JSONL trace; print every action as JSONL.
    Run(crate::spec_run::RunArgs),
    /// Explore every interleaving of a service over a small overlay (losses, duplicates,
    /// timers), breadth first; exits 1 with the shortest trace on a violation.
    Explore(crate::spec_explore::ExploreArgs),
    /// Compile a delivery service to Rust (a `Runner` named `Compiled`, to `include!` in a
    /// crate depending on viastack-spec and viastack-kernel); exits 1 if it cannot be.
    Compile {
        /// The SCXML file.
        file: PathBuf,
    },
    /// Run the W3C SCXML conformance tests of a folder (manifest.json + txml/).
    Conformance {
        /// The suite folder.
        dir: PathBuf,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Rewrite the `conf:` placeholders into this datamodel's language and run the tests
        /// on it: `viastack` (the default: viastack's expression language) or `ecmascript`
        /// (the W3C's confEcma.xsl, run on the embedded ECMAScript engine).
        #[arg(long, default_value = "viastack", value_parser = ["viastack", "ecmascript"])]
        datamodel: String,
    },
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))
}

/// States (without the root), transitions and event names of a compiled chart.
fn summary<A>(c: &Chart<A>) -> (usize, usize, usize) {
    (
        c.state_count() - 1,
        c.transitions().len(),
        c.symbols().count(),
    )
}

/// `spec check --explain`: per composite event, where it is declared, its XQuery (if written
/// so) and its expression in the first-order-logic language.
fn explain_composites(file: &str, svc: &Service) -> String {
    let mut o = String::new();
    for c in &svc.data.composite {
        let at = format!("{file}:{}:{}", c.expr_pos.line, c.expr_pos.col);
        match &c.xquery {
            Some(q) => {
                o.push_str(&format!("{at}: composite `{}`: XQuery\n", c.name));
                for l in q.trim().lines().filter(|l| !l.trim().is_empty()) {
                    o.push_str(&format!("    {}\n", l.trim()));
                }
                o.push_str(&format!("  translates to\n    {}\n", c.expr.trim()));
            }
            None => o.push_str(&format!(
                "{at}: composite `{}`: {}\n",
                c.name,
                c.expr.split_whitespace().collect::<Vec<_>>().join(" ")
            )),
        }
    }
    o
}

/// Runs a `spec` subcommand.
///
/// # Errors
/// A file that cannot be read, or stdout closing.
pub fn run(cmd: SpecCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SpecCommand::Check { file, explain } => {
            let name = file.display().to_string();
            let src = read(&file)?;
            let doc = match chart::parse(&name, &src) {
                Ok(d) => d,
                Err(diags) => {
                    eprintln!("{diags}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            // A delivery service (the seed's `<data name="service">`) is checked as it will
            // run: service data, events, composite expressions and action parameters too.
            let is_service = doc
                .root
                .data
                .iter()
                .any(|d| d.name.as_deref() == Some("service"));
            let mut explained = String::new();
            let mut path = String::new();
            let compiled = if is_service {
                Service::load(&name, &src).map(|(svc, w)| {
                    if explain {
                        explained = explain_composites(&name, &svc);
                    }
                    path = match svc.path() {
                        (p, Some(why)) => format!("\n{name}: runs on the general chart {p}, the interpreter (the flat machine refuses it: {why})"),
                        (p, None) => format!("\n{name}: runs on the {p} machine (pre-resolved at load time; the interpreter is the fallback)"),
                    };
                    (summary(&svc.chart), w)
                })
            } else {
                Chart::<CustomElement>::compile(&doc, &OpaqueActions).map(|(c, w)| (summary(&c), w))
            };
            match compiled {
                Ok(((states, transitions, events), warnings)) => {
                    for w in &warnings {
                        eprintln!("{w}");
                    }
                    out!("{explained}")?;
                    match doc.datamodel {
                        Datamodel::Native => {}
                        Datamodel::Ecmascript => {
                            path.push_str(&format!(
                                "\n{name}: datamodel ecmascript (embedded QuickJS)"
                            ));
                        }
                        Datamodel::Xpath => {
                            path.push_str(&format!("\n{name}: datamodel xpath (sxd-xpath)"));
                        }
                    }
                    outln!(
                        "{name}: ok: {}{states} states, {transitions} transitions, {events} event names, {} warning(s){path}",
                        if is_service { "service, " } else { "" },
                        warnings.len()
                    )?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(diags) => {
                    eprintln!("{diags}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        SpecCommand::Dot { file } => {
            let name = file.display().to_string();
            let src = read(&file)?;
            match chart::parse(&name, &src) {
                Ok(doc) => {
                    out!("{}", chart::dot::to_dot(&doc))?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(diags) => {
                    eprintln!("{diags}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        SpecCommand::Run(args) => crate::spec_run::run(&args),
        SpecCommand::Explore(args) => crate::spec_explore::run(&args),
        SpecCommand::Compile { file } => {
            let name = file.display().to_string();
            let src = read(&file)?;
            let svc = match Service::load(&name, &src) {
                Ok((svc, _warnings)) => svc,
                Err(diags) => {
                    eprintln!("{diags}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            match viastack_spec::service::codegen::rust(&svc, &name) {
                Ok(code) => {
                    out!("{code}")?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(why) => {
                    eprintln!("{name}: cannot be compiled to Rust: {why}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        SpecCommand::Conformance {
            dir,
            json,
            datamodel,
        } => {
            let dm = if datamodel == "ecmascript" {
                conformance::Datamodel::Ecmascript
            } else {
                conformance::Datamodel::Native
            };
            let results = conformance::run_dir_as(&dir, dm).map_err(anyhow::Error::msg)?;
            let t = conformance::totals(&results);
            if json {
                let tests: Vec<serde_json::Value> = results
                    .iter()
                    .map(|r| {
                        let detail = match &r.outcome {
                            conformance::Outcome::Pass => String::new(),
                            conformance::Outcome::Fail(why) => why.clone(),
                            conformance::Outcome::Skipped(what) => format!("needs {what}"),
                            conformance::Outcome::Excluded(why) => why.clone(),
                        };
                        serde_json::json!({
                            "id": r.id,
                            "conformance": r.conformance,
                            "result": r.outcome.label(),
                            "detail": detail,
                        })
                    })
                    .collect();
                let v = serde_json::json!({
                    "tests": tests,
                    "passed": t.passed,
                    "failed": t.failed,
                    "skipped": t.skipped,
                    "excluded": t.excluded,
                });
                outln!("{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                for r in &results {
                    outln!("{} {}", r.id, r.outcome)?;
                }
                outln!("{t}")?;
            }
            Ok(if t.failed > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
