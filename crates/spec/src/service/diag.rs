//! Diagnostics shaped like the chart's (`file:line:col: error: message`).
//! Local stand-in until the chart's type lands; then this re-exports it.

use std::fmt;

/// A position in a source file, 1-based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The service is rejected.
    Error,
    /// The service loads, but something is probably wrong.
    Warning,
}

/// One problem in a specification, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// File name as given to the reader.
    pub file: String,
    /// Where.
    pub pos: Pos,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}:{}:{}: {sev}: {}", self.file, self.pos.line, self.pos.col, self.message)
    }
}

/// Several diagnostics; displayed one per line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

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

/// An error diagnostic.
pub(crate) fn error(file: &str, pos: Pos, message: impl Into<String>) -> Diagnostic {
    Diagnostic { file: file.to_string(), pos, severity: Severity::Error, message: message.into() }
}
