//! Diagnostics for user files: `file:line: message`, collected and sorted by line
//! (DESIGN.md §4.6: bad input never crashes, it produces a message with file, line and what was
//! expected). Also the "did you mean" helper shared by every unknown-name error. Part of
//! issue 2 §3 / DESIGN.md §6.10.

use std::fmt;

/// One problem in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as the caller named it.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// Every problem found in a file, sorted by line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Whether no problem was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sorts by line (stable: problems on one line keep the order they were found in).
    pub fn sort(&mut self) {
        self.0.sort_by_key(|d| d.line);
    }

    /// Whether any message contains `needle` (for tests and tools).
    pub fn mentions(&self, needle: &str) -> bool {
        self.0.iter().any(|d| d.message.contains(needle))
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            d.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

/// Maps byte offsets of one source text to 1-based lines.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(src: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(
            src.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { starts }
    }

    /// The 1-based line holding byte `offset` (offsets past the end give the last line).
    pub fn line(&self, offset: usize) -> usize {
        match self.starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i.max(1),
        }
    }
}

/// Up to three of `candidates` close to `name`, best first.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| *c != name)
        .filter_map(|c| {
            let d = strsim::damerau_levenshtein(name, c);
            let limit = (c.chars().count().max(name.chars().count()) / 3).max(1);
            let similar = d <= limit
                || strsim::jaro_winkler(name, c) >= 0.88
                || (name.len() >= 3 && c.contains(name));
            similar.then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

/// "; did you mean `a` or `b`?" when there are suggestions, else "".
pub(crate) fn did_you_mean(suggestions: &[&str]) -> String {
    match suggestions {
        [] => String::new(),
        [one] => format!("; did you mean `{one}`?"),
        many => {
            let (last, rest) = many.split_last().unwrap_or((&"", &[]));
            let rest: Vec<String> = rest.iter().map(|s| format!("`{s}`")).collect();
            format!("; did you mean {} or `{last}`?", rest.join(", "))
        }
    }
}

/// `a`, `b`, `c` (or "none").
pub(crate) fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let v: Vec<String> = names
        .into_iter()
        .map(|n| format!("`{}`", n.as_ref()))
        .collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_one_based() {
        let idx = LineIndex::new("a\nbc\n\nd");
        assert_eq!(idx.line(0), 1);
        assert_eq!(idx.line(1), 1);
        assert_eq!(idx.line(2), 2);
        assert_eq!(idx.line(5), 3);
        assert_eq!(idx.line(6), 4);
        assert_eq!(idx.line(1000), 4);
    }

    #[test]
    fn suggestions() {
        let kinds = ["ghost", "transparent", "frag", "sim-device"];
        assert_eq!(closest("ghots", kinds), vec!["ghost"]);
        assert_eq!(closest("transparnt", kinds), vec!["transparent"]);
        assert!(closest("zzzzzz", kinds).is_empty());
        assert_eq!(did_you_mean(&["a"]), "; did you mean `a`?");
        assert_eq!(
            did_you_mean(&["a", "b", "c"]),
            "; did you mean `a`, `b` or `c`?"
        );
    }
}
