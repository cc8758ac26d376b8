//! The W3C SCXML conformance suite, run on viastack's datamodel and a virtual clock.
//!
//! A suite folder holds `manifest.json` (one entry per test: `id`, `start` documents, `deps`)
//! and the `.txml` templates. [`rewrite`] turns each template's `conf:` placeholders into
//! viastack's expression language (the table is in `docs/spec-format.md` and in
//! [`rewrite`]'s match arms); [`run_document`] runs the result from time zero, jumping the
//! virtual clock to each pending delayed `<send>`, until the machine reaches a top-level
//! final state: `pass` passes, anything else fails, and so does a machine left with nothing
//! to do.
//!
//! A test with several `start` documents passes when each does. Documents a test fetches
//! (`<invoke src>`, `<data src>`, `<script src>`; `file:` URIs relative to the suite's
//! `txml/`) come through the runner's [`Host::load`], rewritten the same
//! way when they are `.txml`.
//!
//! A test listed in [`EXCLUDED`] (the HTTP Event I/O Processor, which a sans-IO engine has no
//! server for) is reported as [`Outcome::Excluded`] with the reason; a placeholder without a
//! rewriting makes a test [`Outcome::Skipped`], naming it — never passed. Tests written for the
//! ECMAScript or XPath datamodel run on it ([`host`](super::host)); [`run_dir_as`] with
//! [`Datamodel::Ecmascript`] rewrites the placeholders into ECMAScript instead
//! ([`rewrite_ecma`], the W3C's `confEcma.xsl`), issue 15 §1.

use std::collections::BTreeSet;
use std::path::Path;

use viastack_kernel::time::Instant;

pub use super::host::Datamodel;
use super::xml::{self, Element, CONF_NS};
use super::{model, Chart, Host, Instance, NoExtension, Pos, Status, Vars};

/// The result of one test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Reached `pass`.
    Pass,
    /// Anything else, with the reason.
    Fail(String),
    /// Needs a construct that is not supported (named).
    Skipped(String),
    /// Listed in [`EXCLUDED`], with the reason.
    Excluded(String),
}

/// Tests not run, with the reason: those that need the HTTP Event I/O Processor
/// (`http://www.w3.org/TR/scxml/#BasicHTTPEventProcessor`, W3C SCXML §D.2: an HTTP server
/// receiving events, which a sans-IO engine on a virtual clock does not have).
pub const EXCLUDED: &[(&str, &str)] = &[
    ("201", HTTP),
    ("509", HTTP),
    ("510", HTTP),
    ("518", HTTP),
    ("519", HTTP),
    ("520", HTTP),
    ("522", HTTP),
    ("531", HTTP),
    ("532", HTTP),
    ("534", HTTP),
    ("567", HTTP),
    ("577", HTTP),
];

const HTTP: &str = "needs the Basic HTTP Event I/O Processor (an HTTP server; W3C SCXML §D.2)";

impl Outcome {
    /// `pass`, `fail` or `skipped`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail(_) => "fail",
            Outcome::Skipped(_) => "skipped",
            Outcome::Excluded(_) => "excluded",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Pass => f.write_str("pass"),
            Outcome::Fail(why) => write!(f, "fail: {why}"),
            Outcome::Skipped(what) => write!(f, "skipped: needs {what}"),
            Outcome::Excluded(why) => write!(f, "excluded: {why}"),
        }
    }
}

/// One test's id, conformance level and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestResult {
    /// Manifest id.
    pub id: String,
    /// `mandatory` or `optional`.
    pub conformance: String,
    /// Result.
    pub outcome: Outcome,
}

/// Totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
    /// Excluded (see [`EXCLUDED`]).
    pub excluded: usize,
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped, {} excluded",
            self.passed, self.failed, self.skipped, self.excluded
        )
    }
}

/// Counts outcomes.
pub fn totals(results: &[TestResult]) -> Totals {
    let mut t = Totals::default();
    for r in results {
        match r.outcome {
            Outcome::Pass => t.passed += 1,
            Outcome::Fail(_) => t.failed += 1,
            Outcome::Skipped(_) => t.skipped += 1,
            Outcome::Excluded(_) => t.excluded += 1,
        }
    }
    t
}

/// Runs every test of the suite in `dir` (manifest order).
///
/// # Errors
/// The manifest cannot be read or parsed.
pub fn run_dir(dir: &Path) -> Result<Vec<TestResult>, String> {
    run_dir_as(dir, Datamodel::Native)
}

/// [`run_dir`], with the placeholders rewritten for `dm`: [`Datamodel::Native`] into
/// viastack's language ([`rewrite`]), [`Datamodel::Ecmascript`] into ECMAScript with the
/// W3C's `confEcma.xsl` ([`rewrite_ecma`]), run on the ECMAScript datamodel.
///
/// # Errors
/// The manifest cannot be read or parsed.
pub fn run_dir_as(dir: &Path, dm: Datamodel) -> Result<Vec<TestResult>, String> {
    let manifest_path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest_path)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let manifest: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let entries = manifest
        .as_array()
        .ok_or_else(|| format!("{}: expected a JSON array", manifest_path.display()))?;
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let id = entry["id"].as_str().unwrap_or("?").to_string();
        let conformance = entry["conformance"].as_str().unwrap_or("").to_string();
        let start: Vec<&str> = entry["start"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
            .unwrap_or_default();
        let outcome = if let Some((_, why)) = EXCLUDED.iter().find(|(x, _)| *x == id) {
            Outcome::Excluded((*why).to_string())
        } else if start.is_empty() {
            Outcome::Fail("no start document".into())
        } else {
            let mut outcome = Outcome::Pass;
            for &file in &start {
                let path = dir.join("txml").join(file);
                let o = match std::fs::read_to_string(&path) {
                    Ok(src) => run_with(Some(&dir.join("txml")), file, &src, dm),
                    Err(e) => Outcome::Fail(format!("{}: {e}", path.display())),
                };
                if o != Outcome::Pass {
                    outcome = match o {
                        Outcome::Fail(why) if start.len() > 1 => {
                            Outcome::Fail(format!("{file}: {why}"))
                        }
                        other => other,
                    };
                    break;
                }
            }
            outcome
        };
        out.push(TestResult {
            id,
            conformance,
            outcome,
        });
    }
    Ok(out)
}

/// Most virtual-clock jumps one test may take.
const MAX_TIMEOUTS: usize = 1_000;

/// Placeholders of `confEcma.xsl` that have no rewriting, because only the tests of the HTTP
/// Event I/O Processor use them (all in [`EXCLUDED`]): they name its URI
/// (`_ioprocessors['basichttp']`), read the raw HTTP message (`_event.raw` searched with
/// ECMAScript regular expressions) or set up the HTTP test server.
pub const HTTP_ONLY_PLACEHOLDERS: &[&str] = &[
    "testOnServer",
    "setUpHTTPTest",
    "basicHTTPAccessURI",
    "basicHTTPAccessURITarget",
    "methodIsPost",
    "eventIdParamHasValue",
    "eventNamedParamHasValue",
    "messageBodyEquals",
    "getNamedParamVal",
    "getIDParamVal",
    "getNthParamName",
    "getNthParamVal",
    "scxmlEventExpr",
    "msgContent",
    "msgIsBody",
];

/// The `_sessionid` of every test's top-level session: runs are a function of their inputs.
pub const SESSION_SEED: u64 = 1;

/// The runner's host: fetches `file:` URIs from the suite's `txml/` folder, rewriting
/// `.txml` documents like the test itself.
struct SuiteHost<'d> {
    dir: Option<&'d Path>,
    dm: Datamodel,
}

impl Host<()> for SuiteHost<'_> {
    fn execute(&mut self, _action: &(), _vars: &mut Vars<'_>) -> Result<(), String> {
        Err("the conformance suite has no custom actions".into())
    }

    fn load(&mut self, _base: &str, uri: &str) -> Result<String, String> {
        let Some(dir) = self.dir else {
            return Err(format!("cannot fetch \"{uri}\": no suite folder"));
        };
        let name = uri.strip_prefix("file:").unwrap_or(uri);
        if name.contains("..") || name.starts_with('/') {
            return Err(format!("cannot fetch \"{uri}\": outside the suite folder"));
        }
        // The W3C transformation turns test.txml into test.scxml; the suite keeps the .txml.
        let txml = name.strip_suffix(".scxml").map(|n| format!("{n}.txml"));
        let name = match txml {
            Some(t) if !dir.join(name).exists() => t,
            _ => name.to_string(),
        };
        let path = dir.join(&name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if !name.ends_with(".txml") {
            return Ok(text);
        }
        let mut root = xml::read(&name, &text).map_err(|e| e.to_string())?;
        let mut needs = BTreeSet::new();
        rewrite_as(&mut root, &mut needs, self.dm);
        if let Some(first) = needs.into_iter().next() {
            return Err(format!("{name}: no rewriting for {first}"));
        }
        Ok(xml::write(&root))
    }
}

/// Rewrites and runs one test document (documents it fetches are not found).
pub fn run_document(file: &str, src: &str) -> Outcome {
    run_with(None, file, src, Datamodel::Native)
}

/// Rewrites and runs one test document of the suite folder `dir` (its `txml/`).
pub fn run_document_in(dir: &Path, file: &str, src: &str) -> Outcome {
    run_with(Some(dir), file, src, Datamodel::Native)
}

/// [`run_document_in`] with the placeholders rewritten for `dm` (see [`run_dir_as`]).
pub fn run_document_as(dir: Option<&Path>, file: &str, src: &str, dm: Datamodel) -> Outcome {
    run_with(dir, file, src, dm)
}

fn rewrite_as(root: &mut Element, needs: &mut BTreeSet<String>, dm: Datamodel) {
    if dm == Datamodel::Ecmascript {
        rewrite_ecma(root, needs);
    } else {
        rewrite(root, needs);
    }
}

fn run_with(dir: Option<&Path>, file: &str, src: &str, dm: Datamodel) -> Outcome {
    let mut root = match xml::read(file, src) {
        Ok(r) => r,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let mut needs = BTreeSet::new();
    rewrite_as(&mut root, &mut needs, dm);
    if let Some(first) = needs.into_iter().next() {
        return Outcome::Skipped(first);
    }
    let doc = match model::build(file, &root) {
        Ok(d) => d,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let chart: Chart<()> = match Chart::compile(&doc, &NoExtension) {
        Ok((c, _)) => c,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let mut host = SuiteHost { dir, dm };
    let mut inst = Instance::with_session(&chart, SESSION_SEED);
    let mut now = Instant::ZERO;
    let mut status = match inst.start(&chart, now, &mut host) {
        Ok(s) => s,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let mut jumps = 0;
    while status == Status::Running {
        let Some(t) = inst.poll_timeout() else {
            let states: Vec<&str> = inst.active_states().map(|s| chart.state_name(s)).collect();
            return Outcome::Fail(format!(
                "stuck in [{}] with nothing pending",
                states.join(", ")
            ));
        };
        jumps += 1;
        if jumps > MAX_TIMEOUTS {
            return Outcome::Fail("too many timeouts".into());
        }
        now = now.max(t);
        status = match inst.handle_timeout(&chart, now, &mut host) {
            Ok(s) => s,
            Err(e) => return Outcome::Fail(e.to_string()),
        };
    }
    let top: Vec<&str> = inst
        .active_states()
        .filter(|s| chart.states()[s.0 as usize].parent == 0)
        .map(|s| chart.state_name(s))
        .collect();
    if top == ["pass"] {
        Outcome::Pass
    } else {
        Outcome::Fail(format!("ended in [{}]", top.join(", ")))
    }
}

fn var(n: &str) -> String {
    format!("Var{}", n.trim())
}

/// A literal as an expression: numbers and quoted strings stay, anything else is quoted.
fn literal(v: &str) -> String {
    let v = v.trim();
    if v.parse::<f64>().is_ok() || v.starts_with('\'') || v == "true" || v == "false" {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', "\\'"))
    }
}

/// `N op V` as in `conf:idVal="1=0"` / `"1!=0"` / `"1<2"`.
fn comparison(spec: &str, rhs: impl Fn(&str) -> String) -> Option<String> {
    for (op, to) in [
        ("!=", "!="),
        ("<=", "<="),
        (">=", ">="),
        ("=", "=="),
        ("<", "<"),
        (">", ">"),
    ] {
        if let Some((l, r)) = spec.split_once(op) {
            return Some(format!("{} {to} {}", var(l), rhs(r)));
        }
    }
    None
}

fn scxml_el(name: &str, pos: Pos) -> Element {
    Element::new(xml::SCXML_NS, name, pos)
}

fn assign_el(location: String, expr: String, pos: Pos) -> Element {
    let mut a = scxml_el("assign", pos);
    a.set("location", location, pos);
    a.set("expr", expr, pos);
    a
}

/// Rewrites the `conf:` placeholders of `e` (recursively) into viastack's datamodel; what
/// cannot be rewritten or run is added to `needs`.
pub fn rewrite(e: &mut Element, needs: &mut BTreeSet<String>) {
    let attrs = std::mem::take(&mut e.attrs);
    for a in attrs {
        if a.ns.as_deref() != Some(CONF_NS) {
            e.attrs.push(a);
            continue;
        }
        let v = a.value.clone();
        let p = a.pos;
        let (name, value): (&str, String) = match a.name.as_str() {
            "datamodel" => continue,
            "targetpass" => ("target", "pass".into()),
            "targetfail" => ("target", "fail".into()),
            "id" => ("id", var(&v)),
            "expr" => ("expr", literal(&v)),
            "quoteExpr" => ("expr", format!("'{}'", v.replace('\'', "\\'"))),
            "location" => ("location", var(&v)),
            "idlocation" => ("idlocation", var(&v)),
            "varExpr" | "varChildExpr" => ("expr", var(&v)),
            "varNonexistentStruct" => ("expr", format!("{}.bar", var(&v))),
            "srcExpr" => ("srcexpr", var(&v)),
            "invalidNamelist" => ("namelist", "\"foo".into()),
            "multipleNamelist" => (
                "namelist",
                v.split(|c: char| !c.is_ascii_digit())
                    .filter(|n| !n.is_empty())
                    .map(var)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            "varPrefix" => {
                // "A B": VarB starts with VarA.
                let mut it = v.split(|c: char| !c.is_alphanumeric() && c != '_');
                let (p, st) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                (
                    "cond",
                    format!("startsWith(str({}), str({}))", var(st), var(p)),
                )
            }
            "systemVarIsBound" => ("cond", format!("isBound({})", v.trim())),
            "eventFieldsAreBound" => (
                "cond",
                [
                    "name",
                    "type",
                    "sendid",
                    "origin",
                    "origintype",
                    "invokeid",
                    "data",
                ]
                .iter()
                .map(|f| format!("contains(_event, '{f}')"))
                .collect::<Vec<_>>()
                .join(" && "),
            ),
            "eventDataHasField" => ("cond", format!("contains(_event.data, '{}')", v.trim())),
            // One datamodel, viastack's: an event's language always matches it.
            "eventLanguageMatchesDatamodel" => ("cond", "true".into()),
            "eventIsExternal" => ("cond", "_event.type == 'external'".into()),
            "eventSendid" => ("expr", "_event.sendid".into()),
            "eventRaw" => ("expr", "_event.raw".into()),
            "invalidSendType" => ("type", "27".into()),
            "scriptGoodSrc" => ("src", "file:test300.js".into()),
            "scriptBadSrc" => ("src", "file:no-such-script.js".into()),
            "arrayExpr123" => ("expr", "[1, 2, 3]".into()),
            "multiDimensionalArrayExpr" => {
                let x = literal(&v);
                ("expr", format!("[[{x}, {x}], [{x}, {x}]]"))
            }
            "arrayVal" => {
                let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
                let value = v[digits.len()..]
                    .trim_start_matches(|c: char| !c.is_alphanumeric() && c != '\'');
                let (a, x) = (var(&digits), literal(value));
                (
                    "cond",
                    format!("{a}[0][0] == {x} && {a}[0][1] == {x} && {a}[1][0] == {x} && {a}[1][1] == {x}"),
                )
            }
            "idVal" => match comparison(&v, literal) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:idVal=\"{v}\""));
                    continue;
                }
            },
            "idQuoteVal" => match comparison(&v, |r| format!("'{r}'")) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:idQuoteVal=\"{v}\""));
                    continue;
                }
            },
            "compareIDVal" => match comparison(&v, var) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:compareIDVal=\"{v}\""));
                    continue;
                }
            },
            "idSystemVarVal" => match comparison(&v, |r| r.trim().to_string()) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:idSystemVarVal=\"{v}\""));
                    continue;
                }
            },
            "VarEqVar" | "VarEqVarStruct" => {
                let mut it = v.split_whitespace();
                let (l, r) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                ("cond", format!("{} == {}", var(l), var(r)))
            }
            "isBound" => ("cond", format!("isBound({})", var(&v))),
            "idSomeVal" => ("cond", format!("{} == 123", var(&v))),
            "unboundVar" => ("cond", format!("!isBound({})", var(&v))),
            "noValue" => ("cond", format!("{} == null", var(&v))),
            "true" => ("cond", "true".into()),
            "false" => ("cond", "false".into()),
            "inState" => ("cond", format!("In('{v}')")),
            "delay" => ("delay", format!("{v}s")),
            "delayFromVar" => ("delayexpr", var(&v)),
            "eventField" => ("expr", format!("_event.{v}")),
            "eventName" => ("expr", "_event.name".into()),
            "eventType" => ("expr", "_event.type".into()),
            "eventNameVal" => ("cond", format!("_event.name == '{v}'")),
            "eventdataVal" => ("cond", format!("_event.data == {}", literal(&v))),
            "eventdataSomeVal" => ("cond", "_event.data == 123".into()),
            "emptyEventData" => ("cond", "_event.data == null".into()),
            "eventDataFieldValue" | "eventDataParamValue" => {
                ("expr", format!("_event.data['{v}']"))
            }
            "eventDataNamelistValue" => ("expr", format!("_event.data['{}']", var(&v))),
            "namelistIdVal" => match comparison(&v, literal) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "varIdVal" => match comparison(&v, var) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "eventvarVal" => match comparison(&v, literal) {
                Some(c) => ("cond", format!("_event.data.{c}")),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "eventFieldHasNoValue" => ("cond", format!("_event.{v} == null")),
            "originTypeEq" => ("cond", format!("_event.origintype == '{v}'")),
            "nameVarVal" => ("cond", format!("_name == '{v}'")),
            // Deliberately bad input, failing at run time (→ error.execution).
            "illegalExpr" => ("expr", "null.illegal".into()),
            "invalidLocation" => {
                let target = if e.name == "param" {
                    "expr"
                } else {
                    "location"
                };
                (target, "undeclaredVariable.field".into())
            }
            "nonBoolean" => ("cond", "'not a boolean'".into()),
            "illegalArray" => ("expr", "7".into()),
            "illegalItem" => ("item", "_name".into()),
            "illegalTarget" => ("target", "baz".into()),
            "unreachableTarget" => ("target", "#_unreachable".into()),
            // Values: a target / send type that is invalid where it is used.
            "invalidSessionID" if e.name == "send" => ("target", "#_scxml_no_such_session".into()),
            "invalidSessionID" => ("expr", "'#_scxml_no_such_session'".into()),
            "invalidSendTypeExpr" if e.name == "send" => ("typeexpr", "27".into()),
            "invalidSendTypeExpr" => ("expr", "27".into()),
            "systemVarExpr" => ("expr", v.trim().to_string()),
            "systemVarLocation" => ("location", v.trim().to_string()),
            "scxmlEventIOLocation" => (
                "expr",
                "_ioprocessors['http://www.w3.org/TR/scxml/#SCXMLEventProcessor'].location".into(),
            ),
            "arrayVar" | "arrayTextVar" => ("array", var(&v)),
            "item" => ("item", var(&v)),
            "index" => ("index", var(&v)),
            "namelist" => ("namelist", var(&v)),
            "name" => ("name", var(&v)),
            "targetExpr" | "targetVar" => ("targetexpr", var(&v)),
            "typeExpr" => ("typeexpr", var(&v)),
            "sendIDExpr" => ("sendidexpr", var(&v)),
            "eventExpr" => ("eventexpr", var(&v)),
            other => {
                needs.insert(format!("conf:{other}"));
                continue;
            }
        };
        e.set(name, value, p);
    }
    let children = std::mem::take(&mut e.children);
    for mut c in children {
        if c.ns != CONF_NS {
            rewrite(&mut c, needs);
            e.children.push(c);
            continue;
        }
        let p = c.pos;
        let id = |k: &str| var(c.get(k).unwrap_or(""));
        match c.name.as_str() {
            "pass" | "fail" => {
                let mut f = scxml_el("final", p);
                f.set("id", c.name.clone(), p);
                e.children.push(f);
            }
            "incrementID" => {
                let v = id("id");
                e.children.push(assign_el(v.clone(), format!("{v} + 1"), p));
            }
            "sumVars" | "concatVars" => {
                let (a, b) = (id("id1"), id("id2"));
                e.children
                    .push(assign_el(a.clone(), format!("{a} + {b}"), p));
            }
            "extendArray" => {
                let v = id("id");
                e.children
                    .push(assign_el(v.clone(), format!("{v} + [4]"), p));
            }
            "array123" => e.text = "[1,2,3]".into(),
            "someInlineVal" => e.text = "123".into(),
            "contentFoo" => {
                let mut content = scxml_el("content", p);
                content.set("expr", "'foo'".into(), p);
                e.children.push(content);
            }
            "sendToSender" => {
                let mut send = scxml_el("send", p);
                send.set("event", c.get("name").unwrap_or("").to_string(), p);
                send.set("targetexpr", "_event.origin".into(), p);
                send.set(
                    "type",
                    "http://www.w3.org/TR/scxml/#SCXMLEventProcessor".into(),
                    p,
                );
                e.children.push(send);
            }
            "script" => {
                let mut script = scxml_el("script", p);
                script.text = "var Var1 = 1".into();
                e.children.push(script);
            }
            "illegalContent" => {
                let mut content = scxml_el("content", p);
                content.text = " xyz ".into();
                e.children.push(content);
            }
            "incrementArray" => {
                let a = id("id");
                let mut each = scxml_el("foreach", p);
                each.set("item", "item".into(), p);
                each.set("index", "index".into(), p);
                each.set("array", a.clone(), p);
                let mut script = scxml_el("script", p);
                script.text =
                    format!("{a}[index][0] = {a}[index][0] + 1\n{a}[index][1] = {a}[index][1] + 1");
                each.children.push(script);
                e.children.push(each);
            }
            other => {
                needs.insert(format!("<conf:{other}>"));
            }
        }
    }
}

/// `N op V` with confEcma.xsl's operators (`=` becomes `eq`; `<`, `<=`, `>`, `>=` stay).
fn ecma_comparison(spec: &str, eq: &str, rhs: impl Fn(&str) -> String) -> Option<String> {
    let digits: String = spec
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if digits.is_empty() {
        return None;
    }
    let rest = &spec.trim_start()[digits.len()..];
    let (op, value) = if let Some(v) = rest.strip_prefix("<=") {
        ("<=", v)
    } else if let Some(v) = rest.strip_prefix(">=") {
        (">=", v)
    } else if let Some(v) = rest.strip_prefix('=') {
        (eq, v)
    } else if let Some(v) = rest.strip_prefix('<') {
        ("<", v)
    } else if let Some(v) = rest.strip_prefix('>') {
        (">", v)
    } else {
        return None;
    };
    Some(format!("Var{digits}{op}{}", rhs(value)))
}

/// Rewrites the `conf:` placeholders of `e` (recursively) into ECMAScript, as the W3C's
/// `confEcma.xsl` does, for a run on the ECMAScript datamodel (`conf:datamodel` becomes
/// `datamodel="ecmascript"`). Where the stylesheet is wrong the rewriting follows what the
/// template means, and says so: `arrayExpr123` (`1, 2, 3]` → `[1, 2, 3]`), `compareIDVal`
/// (`=` → `==`), `scriptGoodSrc`/`scriptBadSrc` (a site's `D:\` paths → the suite's
/// `test300.js` and a missing file), `eventLanguageMatchesDatamodel` (`_event` has no
/// `language` field in SCXML 1.0: `true`). What has no rewriting is added to `needs`.
pub fn rewrite_ecma(e: &mut Element, needs: &mut BTreeSet<String>) {
    let attrs = std::mem::take(&mut e.attrs);
    for a in attrs {
        if a.ns.as_deref() != Some(CONF_NS) {
            e.attrs.push(a);
            continue;
        }
        let v = a.value.clone();
        let t = v.trim();
        let p = a.pos;
        let vn = |x: &str| format!("Var{}", x.trim());
        let (name, value): (&str, String) = match a.name.as_str() {
            "datamodel" => ("datamodel", "ecmascript".into()),
            "targetpass" => ("target", "pass".into()),
            "targetfail" => ("target", "fail".into()),
            "id" => ("id", vn(t)),
            "name" => ("name", vn(t)),
            "location" => ("location", vn(t)),
            "invalidLocation" => ("location", "foo.bar.baz ".into()),
            "systemVarLocation" => ("location", t.into()),
            "expr" => ("expr", v.clone()),
            "targetVar" | "targetExpr" => ("targetexpr", vn(t)),
            "quoteExpr" => ("expr", format!("'{v}'")),
            "varExpr" | "varChildExpr" => ("expr", vn(t)),
            "systemVarExpr" => ("expr", t.into()),
            "varNonexistentStruct" => ("expr", format!("Var{t}.bar")),
            "illegalExpr" => ("expr", "return".into()),
            "illegalTarget" => ("target", "baz".into()),
            "unreachableTarget" => ("target", "#_scxml_foo".into()),
            "invalidSessionID" => ("expr", "27".into()),
            "invalidSendType" => ("type", "27".into()),
            "invalidSendTypeExpr" => ("expr", "27".into()),
            "eventName" => ("expr", "_event.name".into()),
            "eventType" => ("expr", "_event.type".into()),
            "eventSendid" => ("expr", "_event.sendid".into()),
            "eventField" => ("expr", format!("_event.{t}")),
            "eventRaw" => ("expr", "_event.raw".into()),
            "eventDataFieldValue" | "eventDataParamValue" => ("expr", format!("_event.data.{t}")),
            "eventDataNamelistValue" => ("expr", format!("_event.data.Var{t}")),
            "scxmlEventIOLocation" => (
                "expr",
                "_ioprocessors['http://www.w3.org/TR/scxml/#SCXMLEventProcessor'].location".into(),
            ),
            "eventExpr" => ("eventexpr", vn(t)),
            "typeExpr" => ("typeexpr", vn(t)),
            "delayFromVar" => ("delayexpr", vn(t)),
            "delay" => ("delayexpr", format!("'{t}s'")),
            "idlocation" => ("idlocation", vn(t)),
            "sendIDExpr" => ("sendidexpr", vn(t)),
            "srcExpr" => ("srcexpr", vn(t)),
            "namelist" => ("namelist", vn(t)),
            "invalidNamelist" => ("namelist", "\"foo".into()),
            "multipleNamelist" => (
                "namelist",
                t.split(|c: char| !c.is_ascii_digit())
                    .filter(|n| !n.is_empty())
                    .map(vn)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            "idVal" | "idSystemVarVal" => match ecma_comparison(t, "==", |r| r.to_string()) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "namelistIdVal" => match ecma_comparison(t, "===", |r| r.to_string()) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "varIdVal" | "compareIDVal" => match ecma_comparison(t, "==", vn) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "idQuoteVal" => match ecma_comparison(t, "==", |r| format!("'{r}'")) {
                Some(c) => ("cond", c),
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "eventvarVal" => match ecma_comparison(t, "==", |r| r.to_string()) {
                // VarN==x → _event.data['VarN']==x
                Some(c) => {
                    let end = c[3..]
                        .find(|ch: char| !ch.is_ascii_digit())
                        .map_or(c.len(), |k| k + 3);
                    ("cond", format!("_event.data['{}']{}", &c[..end], &c[end..]))
                }
                None => {
                    needs.insert(format!("conf:{}=\"{v}\"", a.name));
                    continue;
                }
            },
            "VarEqVar" | "VarEqVarStruct" => {
                let nums: Vec<&str> = t
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|n| !n.is_empty())
                    .collect();
                let op = if a.name == "VarEqVar" { "===" } else { "==" };
                match nums.as_slice() {
                    [l, r, ..] => ("cond", format!("Var{l}{op}Var{r}")),
                    _ => {
                        needs.insert(format!("conf:{}=\"{v}\"", a.name));
                        continue;
                    }
                }
            }
            "idSomeVal" => ("cond", format!("Var{t} == 123")),
            "eventNameVal" => ("cond", format!("_event.name == '{t}'")),
            "eventdataVal" => ("cond", format!("_event.data == {t}")),
            "eventdataSomeVal" => ("cond", "_event.data == 123".into()),
            "emptyEventData" => ("cond", "typeof _event.data === 'undefined'".into()),
            "nameVarVal" => ("cond", format!("_name  === '{t}'")),
            "varPrefix" => {
                let mut it = t
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .filter(|w| !w.is_empty());
                let (pre, st) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                (
                    "cond",
                    format!(
                        "(function(str, starts){{if (starts === '') return true;if (str == null || starts == null) return false;str = String(str); starts = String(starts);return str.length >= starts.length && str.slice(0, starts.length) === starts;}})(Var{st}, Var{pre})"
                    ),
                )
            }
            "inState" => ("cond", format!("In('{t}')")),
            "nonBoolean" => ("cond", "return".into()),
            "isBound" => ("cond", format!("Var{t}")),
            "unboundVar" => ("cond", format!("typeof Var{t} === 'undefined' ")),
            "systemVarIsBound" => ("cond", t.into()),
            "noValue" => ("cond", format!("!Var{t}")),
            "true" => ("cond", "true".into()),
            "false" => ("cond", "false".into()),
            "eventFieldsAreBound" => (
                "cond",
                "'name' in _event && 'type' in _event && 'sendid' in _event && 'origin' in _event && 'origintype' in _event && 'invokeid' in _event && 'data' in _event".into(),
            ),
            "eventDataHasField" => ("cond", format!("{t} in _event.data")),
            "eventFieldHasNoValue" => ("cond", format!("typeof _event.{t} === 'undefined' ")),
            "eventLanguageMatchesDatamodel" => ("cond", "true".into()),
            "originTypeEq" => ("cond", format!(" _event.origintype == '{t}'")),
            "eventIsExternal" => ("cond", "_event.type === 'external'".into()),
            "scriptGoodSrc" => ("src", "file:test300.js".into()),
            "scriptBadSrc" => ("src", "file:no-such-script.js".into()),
            "arrayVar" | "arrayTextVar" => ("array", vn(t)),
            "arrayExpr123" => ("expr", "[1, 2, 3]".into()),
            "illegalArray" => ("expr", "7".into()),
            "item" => ("item", vn(t)),
            "illegalItem" => ("item", "'continue'".into()),
            "index" => ("index", vn(t)),
            "multiDimensionalArrayExpr" => ("expr", format!("[[{t},{t}],[{t},{t}]]")),
            "arrayVal" => {
                let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
                let value = t[digits.len()..].trim_start_matches(|c: char| !c.is_alphanumeric() && c != '\'');
                let a = format!("Var{digits}");
                (
                    "cond",
                    format!("{a}[0][0]== {value} && {a}[0][1] == {value}  && {a}[1][0] == {value} && {a}[1][1] == {value}"),
                )
            }
            other => {
                needs.insert(format!("conf:{other}"));
                continue;
            }
        };
        e.set(name, value, p);
    }
    let children = std::mem::take(&mut e.children);
    for c in children {
        if c.ns != CONF_NS {
            let mut c = c;
            rewrite_ecma(&mut c, needs);
            e.children.push(c);
            continue;
        }
        let p = c.pos;
        let id = |k: &str| format!("Var{}", c.get(k).unwrap_or("").trim());
        match c.name.as_str() {
            "pass" | "fail" => {
                let mut f = scxml_el("final", p);
                f.set("id", c.name.clone(), p);
                let mut on = scxml_el("onentry", p);
                let mut log = scxml_el("log", p);
                log.set("label", "Outcome".into(), p);
                log.set("expr", format!("'{}'", c.name), p);
                on.children.push(log);
                f.children.push(on);
                e.children.push(f);
            }
            "incrementID" => {
                let v = id("id");
                e.children.push(assign_el(v.clone(), format!("{v} + 1"), p));
            }
            "sumVars" | "concatVars" => {
                let (a, b) = (id("id1"), id("id2"));
                e.children
                    .push(assign_el(a.clone(), format!("{a} + {b}"), p));
            }
            "extendArray" => {
                let v = id("id");
                e.children
                    .push(assign_el(v.clone(), format!("[].concat({v}, [4])"), p));
            }
            "illegalContent" => {
                let mut content = scxml_el("content", p);
                content.text = " xyz ".into();
                e.children.push(content);
            }
            "contentFoo" => {
                let mut content = scxml_el("content", p);
                content.text = "foo".into();
                e.children.push(content);
            }
            "someInlineVal" => e.text = "123".into(),
            "array123" => e.text = "[1,2,3]".into(),
            "script" => {
                let mut script = scxml_el("script", p);
                script.text = "var Var1 = 1".into();
                e.children.push(script);
            }
            "sendToSender" => {
                let mut send = scxml_el("send", p);
                send.set("event", c.get("name").unwrap_or("").to_string(), p);
                send.set("targetexpr", "_event.origin".into(), p);
                send.set("typeexpr", "_event.origintype".into(), p);
                e.children.push(send);
            }
            "incrementArray" => {
                let a = id("id");
                let mut each = scxml_el("foreach", p);
                each.set("item", "item".into(), p);
                each.set("index", "index".into(), p);
                each.set("array", a.clone(), p);
                let mut script = scxml_el("script", p);
                script.text =
                    format!("{a}[index][0] = {a}[index][0] + 1\n{a}[index][1] = {a}[index][1] + 1");
                each.children.push(script);
                e.children.push(each);
            }
            other => {
                needs.insert(format!("<conf:{other}>"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passing_and_a_failing_document() {
        let ok = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:conf="http://www.w3.org/2005/scxml-conformance" initial="s0" conf:datamodel="">
            <datamodel><data conf:id="1" conf:expr="0"/></datamodel>
            <state id="s0"><onentry><conf:incrementID id="1"/></onentry>
              <transition conf:idVal="1=1" conf:targetpass=""/><transition conf:targetfail=""/></state>
            <conf:pass/><conf:fail/></scxml>"#;
        assert_eq!(run_document("t", ok), Outcome::Pass);
        let bad = ok.replace("1=1", "1=2");
        assert!(matches!(run_document("t", &bad), Outcome::Fail(_)));
        // An invoked child that ends at once: its done.invoke comes after the eventless pass.
        let inv = ok.replace(
            "<onentry>",
            r#"<invoke><content><scxml initial="f"><final id="f"/></scxml></content></invoke><onentry>"#,
        );
        assert_eq!(run_document("t", &inv), Outcome::Pass);
        let unknown = ok.replace("conf:idVal=\"1=1\"", "conf:mystery=\"1\"");
        assert_eq!(
            run_document("t", &unknown),
            Outcome::Skipped("conf:mystery".into())
        );
    }
}
