//! The optional SCXML datamodels, behind one trait: ECMAScript (`datamodel="ecmascript"`,
//! W3C SCXML §B.2, through an embedded QuickJS) and XPath (`datamodel="xpath"`, the XPath
//! profile of the SCXML working drafts, XPath 1.0 over an XML DOM). viastack's own expression
//! language ([`expr`](super::expr)) stays the default and does not go through this trait.
//!
//! Issue 15 §1 (the whole W3C suite): a chart whose `<scxml datamodel=…>` names one of these
//! keeps every expression, location and script as text ([`Expr::Host`](super::expr::Expr),
//! [`Location::Host`](super::expr::Location)); each instance owns a [`HostModel`] that holds
//! the variables and evaluates the text. The engine stays sans-IO and deterministic: no
//! clock, no randomness the model does not seed, no IO (`src` documents come through the
//! [`Host`](super::Host) loader); a script is stopped after a budget of interpreter ticks
//! ([`STEP_BUDGET`]) and a memory limit, and every failure is an `Err` the engine raises as
//! `error.execution`.
//!
//! Values cross between sessions and events as [`Value`]s; XML content travels as a map with
//! the single key `"$xml"` holding the markup ([`xml_value`]), which each model turns back
//! into its own DOM.

use std::sync::{Arc, Mutex};

use super::value::Value;

pub mod ecma;
pub mod xpath;

/// Interpreter ticks one call may take (QuickJS calls its interrupt handler about every
/// 10 000 bytecode operations): a `while(true){}` is stopped after ~20 M operations.
pub const STEP_BUDGET: u32 = 2_000;

/// Bytes of heap one ECMAScript datamodel may use.
pub const MEMORY_LIMIT: usize = 32 << 20;

/// Which datamodel a chart uses (`<scxml datamodel=…>`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Datamodel {
    /// viastack's own expression language (any other value of the attribute, or none).
    #[default]
    Native,
    /// `datamodel="ecmascript"`.
    Ecmascript,
    /// `datamodel="xpath"`.
    Xpath,
}

impl Datamodel {
    /// The datamodel named by the attribute value.
    pub fn from_attr(v: Option<&str>) -> Datamodel {
        match v.map(str::trim) {
            Some("ecmascript") => Datamodel::Ecmascript,
            Some("xpath") => Datamodel::Xpath,
            _ => Datamodel::Native,
        }
    }

    /// Whether expressions go to a [`HostModel`].
    pub fn is_host(self) -> bool {
        self != Datamodel::Native
    }
}

/// How a value is given to [`HostModel::declare`] / [`HostModel::assign`].
#[derive(Clone, Copy, Debug)]
pub enum Init<'a> {
    /// Declared without a value.
    None,
    /// An expression in the model's language.
    Expr(&'a str),
    /// A value (literal content, a fetched document, an invoke parameter, an id).
    Value(&'a Value),
}

/// What the engine needs from a datamodel. Every method reports a failure as `Err(message)`;
/// the engine raises `error.execution` with it. No method may panic on any input.
pub trait HostModel: Send {
    /// Declares (binds) the variable `name` with an initial value.
    ///
    /// # Errors
    /// The expression fails; the name is not a legal variable name.
    fn declare(&mut self, name: &str, init: Init<'_>) -> Result<(), String>;
    /// Evaluates an expression.
    ///
    /// # Errors
    /// Syntax or run-time error, or the step budget ran out.
    fn eval(&mut self, expr: &str) -> Result<Value, String>;
    /// Evaluates a condition (the language's conversion to a boolean).
    ///
    /// # Errors
    /// As [`HostModel::eval`].
    fn cond(&mut self, expr: &str) -> Result<bool, String>;
    /// `<assign location=… expr=…>` (or inline content); `kind`/`attr` are the XPath
    /// profile's `type=` and `attr=` (`None`: replace).
    ///
    /// # Errors
    /// The location is not assignable, the value fails.
    fn assign(
        &mut self,
        location: &str,
        value: Init<'_>,
        kind: Option<&str>,
        attr: Option<&str>,
    ) -> Result<(), String>;
    /// Runs a `<script>`.
    ///
    /// # Errors
    /// Syntax or run-time error, or the step budget ran out.
    fn script(&mut self, src: &str) -> Result<(), String>;
    /// Binds `_event` (a map of the W3C fields).
    ///
    /// # Errors
    /// The value cannot be represented.
    fn set_event(&mut self, event: &Value) -> Result<(), String>;
    /// The active states' ids, for `In()`.
    fn set_active(&mut self, active: &[&str]);
    /// Starts a `<foreach>` over `array` (a shallow copy is iterated); returns its length.
    ///
    /// # Errors
    /// The expression fails or is not an array.
    fn foreach_start(&mut self, array: &str) -> Result<usize, String>;
    /// Binds `item` (and `index`) to element `i` of the innermost `<foreach>`.
    ///
    /// # Errors
    /// `item`/`index` are not legal locations.
    fn foreach_bind(&mut self, item: &str, index: Option<&str>, i: usize) -> Result<(), String>;
    /// Ends the innermost `<foreach>`.
    fn foreach_end(&mut self);
    /// The value of variable `name` (a `namelist` entry).
    ///
    /// # Errors
    /// Not declared.
    fn read(&mut self, name: &str) -> Result<Value, String>;
}

/// Creates the datamodel of a new session: `_sessionid`, `_name` and `_ioprocessors` bound.
///
/// # Errors
/// The engine cannot be created (out of memory).
pub fn create(kind: Datamodel, session: u64, name: &str) -> Result<Box<dyn HostModel>, String> {
    match kind {
        Datamodel::Ecmascript => Ok(Box::new(ecma::Ecma::new(session, name)?)),
        Datamodel::Xpath => Ok(Box::new(xpath::XPathModel::new(session, name))),
        Datamodel::Native => Err("viastack's datamodel is not a host datamodel".into()),
    }
}

/// A datamodel shared by an instance and its clones (a JavaScript heap cannot be copied), with
/// what was last synchronised into it (the event, the active states).
#[derive(Clone)]
pub(crate) struct ModelCell(pub(crate) Arc<Mutex<ModelState>>);

pub(crate) struct ModelState {
    pub(crate) model: Box<dyn HostModel>,
    pub(crate) event_seq: u64,
    pub(crate) active: Vec<u32>,
}

impl std::fmt::Debug for ModelCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelCell")
    }
}

impl ModelCell {
    pub(crate) fn new(model: Box<dyn HostModel>) -> ModelCell {
        ModelCell(Arc::new(Mutex::new(ModelState {
            model,
            event_seq: 0,
            active: Vec::new(),
        })))
    }
}

/// XML content as a value: `{"$xml": markup}`.
pub fn xml_value(markup: &str) -> Value {
    Value::map(std::collections::BTreeMap::from([(
        "$xml".to_string(),
        Value::str(markup),
    )]))
}

/// The markup of an XML value made by [`xml_value`].
pub fn as_xml(v: &Value) -> Option<&str> {
    match v {
        Value::Map(m) if m.len() == 1 => m.get("$xml").and_then(Value::as_str),
        _ => None,
    }
}

/// Inline or fetched content (`<data>`, `<content>`, `<assign>` children or text, a `src`
/// document) as a value (W3C SCXML §5.3, §B.2.2): well-formed XML becomes an XML value, JSON
/// (ECMAScript only) its value, anything else a string with white space normalised.
pub fn text_value(kind: Datamodel, text: &str) -> Value {
    let t = text.trim();
    if t.starts_with('<') && roxmltree::Document::parse(t).is_ok() {
        return xml_value(t);
    }
    if kind == Datamodel::Ecmascript {
        if let Ok(j) = serde_json::from_str::<serde_json::Value>(t) {
            return Value::from_json(&j);
        }
    }
    Value::str(&t.split_whitespace().collect::<Vec<_>>().join(" "))
}
