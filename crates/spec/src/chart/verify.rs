//! Verification: design mistakes in a valid chart (see the rules in `docs/spec-format.md`).

use super::model::Document;
use super::{Chart, Diagnostic, Extension};

/// What the verifier knows about a compiled chart, for an [`Extension`]'s own checks.
pub struct View<'a> {
    /// The document.
    pub doc: &'a Document,
    /// Event names handled by some transition.
    pub handled: Vec<String>,
}

/// Runs the verification rules.
pub fn verify<A, E: Extension<Action = A>>(
    doc: &Document,
    _chart: &Chart<A>,
    ext: &E,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let view = View {
        doc,
        handled: Vec::new(),
    };
    ext.verify(&view, &mut out);
    out
}
