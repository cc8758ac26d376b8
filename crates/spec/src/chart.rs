//! The SCXML state-chart language: reader, validator, verifier, compiler and engine.
//!
//! Pipeline (each stage a module):
//! 1. [`xml`] reads a document with roxmltree into an owned element tree that keeps
//!    `line:col` positions of every element and attribute value;
//! 2. [`model`] turns that tree into a [`Document`] (states, transitions, executable content,
//!    datamodel), reporting unknown elements and attributes;
//! 3. [`validate`] checks references and expressions ([`expr`] is the datamodel's expression
//!    language), [`verify`] looks for design mistakes (unreachable states, dead ends, …);
//! 4. [`compile`] builds the immutable, shareable [`Chart`]: states indexed in document order,
//!    event names interned to [`Symbol`]s, a (state × symbol) table of candidate transitions,
//!    executable content as small op lists, variables as slots;
//! 5. [`engine`] runs an [`Instance`] — a small per-session record — with the W3C SCXML
//!    algorithm (macrostep/microstep, internal and external queues), sans-IO: time is an
//!    argument, delayed `<send>`s are deadlines polled with [`Instance::poll_timeout`].
//!
//! [`dot`] renders a chart as Graphviz, [`conformance`] runs the W3C SCXML test suite.
//! The language is documented in `docs/spec-format.md`.
//!
//! Custom executable content (the seed's `<action:…>` elements) is delegated to an
//! [`Extension`] at compile time and to a [`Host`] at run time.

pub mod compile;
pub mod conformance;
pub mod dot;
pub mod engine;
pub mod expr;
pub mod host;
pub mod model;
pub mod validate;
pub mod value;
pub mod verify;
pub mod xml;

use std::fmt;

pub use compile::{Chart, StateId, Symbol};
pub use engine::{EventName, ExternalEvent, Host, Instance, NoHost, RunError, Status, Vars};
pub use model::{CustomElement, Document};
pub use value::Value;

/// A position in a source file, 1-based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column (in characters), from 1.
    pub col: u32,
}

impl Pos {
    /// A position.
    pub const fn new(line: u32, col: u32) -> Pos {
        Pos { line, col }
    }

    /// The position `n` characters to the right on the same line.
    pub fn right(self, n: usize) -> Pos {
        Pos {
            line: self.line,
            col: self
                .col
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX)),
        }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// How bad a [`Diagnostic`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The document is rejected.
    Error,
    /// The document runs, but probably not as intended.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding about a document, at a position.
///
/// Displays as `file:line:col: error: message` — the message says what was found and, where
/// it helps, what was expected in parentheses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file name given to [`parse`].
    pub file: String,
    /// Where.
    pub pos: Pos,
    /// Error or warning.
    pub severity: Severity,
    /// What, and what was expected.
    pub message: String,
}

impl Diagnostic {
    /// An error.
    pub fn error(file: &str, pos: Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: file.to_string(),
            pos,
            severity: Severity::Error,
            message: message.into(),
        }
    }

    /// A warning.
    pub fn warning(file: &str, pos: Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, pos, message)
        }
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.pos, self.severity, self.message
        )
    }
}

/// A list of diagnostics; displays one per line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Sorts by position (errors first at equal positions).
    pub fn sort(&mut self) {
        self.0.sort_by_key(|d| (d.pos, d.severity));
    }

    /// Whether any is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Reads an SCXML document: XML well-formedness, the SCXML vocabulary (unknown elements and
/// attributes are errors), and the document's own consistency ([`validate`]: targets, ids,
/// initial states, expressions). Accepts both `initial` and the older `initialstate` on
/// `<scxml>`.
///
/// # Errors
/// Every error found, with `file:line:col`; warnings are not reported here (see
/// [`Chart::compile`], which also runs [`verify`]).
pub fn parse(file: &str, src: &str) -> Result<Document, Diagnostics> {
    let tree = xml::read(file, src)?;
    let doc = model::build(file, &tree)?;
    let diags = validate::validate(&doc);
    if diags.iter().any(Diagnostic::is_error) {
        let mut d = Diagnostics(diags.into_iter().filter(Diagnostic::is_error).collect());
        d.sort();
        return Err(d);
    }
    Ok(doc)
}

/// Compile-time plug-in for custom executable content (elements outside the SCXML namespace,
/// such as the seed's `<action:…>`), and a hook into verification.
pub trait Extension {
    /// The compiled form of one custom element, run by a [`Host`].
    type Action: Send + Sync + 'static;

    /// Called once per custom element at compile time; `Err(message)` becomes an error
    /// [`Diagnostic`] at `el.pos`.
    fn compile_action(&self, el: &CustomElement) -> Result<Self::Action, String>;

    /// Names of events this custom element may cause to be delivered to the machine later
    /// (e.g. the timer event a `setTimer` arms). Used by [`verify`] for reachability and
    /// "events handled nowhere". Default: none.
    fn action_events(&self, _el: &CustomElement) -> Vec<String> {
        Vec::new()
    }

    /// Whether this custom element ends the instance (the seed's `terminate`): the verifier
    /// counts a state or transition running it as reaching the end. Default: no.
    fn terminates(&self, _el: &CustomElement) -> bool {
        false
    }

    /// Names of the events the environment can deliver (e.g. the seed's declared basic and
    /// composite events). `None` (the default) means "unknown": every event a transition
    /// names is assumed deliverable, and "undefined event" is not checked.
    fn external_events(&self) -> Option<Vec<String>> {
        None
    }

    /// Extra verification by the layer above (basic events that can never match, timers set
    /// but never handled, …): push diagnostics into `out`.
    fn verify(&self, _view: &verify::View<'_>, _out: &mut Vec<Diagnostic>) {}
}

/// An [`Extension`] that accepts no custom elements (plain SCXML).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExtension;

impl Extension for NoExtension {
    type Action = ();
    fn compile_action(&self, el: &CustomElement) -> Result<(), String> {
        Err(format!(
            "unknown element <{}> in namespace {:?} (expected SCXML executable content)",
            el.name, el.namespace
        ))
    }
}

/// An [`Extension`] that accepts every custom element as is (the element itself is the
/// action): for checking and drawing a document whose custom actions are run elsewhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpaqueActions;

impl Extension for OpaqueActions {
    type Action = CustomElement;
    fn compile_action(&self, el: &CustomElement) -> Result<CustomElement, String> {
        Ok(el.clone())
    }
    fn terminates(&self, el: &CustomElement) -> bool {
        // The seed's terminate primitive, in either spelling.
        el.name == "terminate" || el.attr("name") == Some("terminate")
    }
}
