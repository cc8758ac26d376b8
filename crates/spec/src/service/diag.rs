//! Diagnostics: the chart's (`file:line:col: error: message`), so a service's errors and its
//! chart's come out as one list.

pub use crate::chart::{Diagnostic, Diagnostics, Pos, Severity};

/// An error diagnostic.
pub(crate) fn error(file: &str, pos: Pos, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(file, pos, message)
}
