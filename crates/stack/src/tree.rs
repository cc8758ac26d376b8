//! A TOML document as a tree of values that remember where they were written.
//!
//! `toml` reports positions through [`toml::Spanned`], but a table that is only implied by a
//! header (`layers` in `[layers.dev]`) has no position, and `Spanned<T>` then fails to
//! deserialize. [`Located`] asks for a span the same way `Spanned` does (the `serde_spanned`
//! protocol) and falls back to "no span" instead of failing, so every value of the document can
//! be read with its position when it has one. Part of issue 2 §3 / DESIGN.md §6.10: the
//! stack-file parser reads this tree by hand so that every error carries a line.

use std::fmt;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

// The `serde_spanned` 0.6 protocol (what `toml::Spanned` uses): a struct with this name and
// these fields is answered by the TOML deserializer with its byte span.
const SPANNED_NAME: &str = "$__serde_spanned_private_Spanned";
const START_FIELD: &str = "$__serde_spanned_private_start";
const END_FIELD: &str = "$__serde_spanned_private_end";
const VALUE_FIELD: &str = "$__serde_spanned_private_value";
const SPANNED_FIELDS: &[&str] = &[START_FIELD, END_FIELD, VALUE_FIELD];
// How `toml` hands a datetime to `deserialize_any`.
const DATETIME_FIELD: &str = "$__toml_private_datetime";

/// A value with the byte span it was written at, when known.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Located {
    pub span: Option<Range<usize>>,
    pub node: Node,
}

/// A TOML value whose children are [`Located`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Datetime(String),
    Array(Vec<Located>),
    /// Entries in the order the deserializer gave them (not necessarily file order).
    Table(Vec<(String, Located)>),
}

impl Node {
    /// The TOML type name, for "expected …, found …" messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Node::Bool(_) => "boolean",
            Node::Int(_) => "integer",
            Node::Float(_) => "float",
            Node::Str(_) => "string",
            Node::Datetime(_) => "datetime",
            Node::Array(_) => "array",
            Node::Table(_) => "table",
        }
    }
}

impl Located {
    fn bare(node: Node) -> Self {
        Located { span: None, node }
    }

    /// The first known byte offset of this value or, failing that, of its first child that has
    /// one (an implied table is located by its first entry).
    pub fn offset(&self) -> Option<usize> {
        if let Some(s) = &self.span {
            return Some(s.start);
        }
        match &self.node {
            Node::Array(items) => items.iter().find_map(Located::offset),
            Node::Table(entries) => entries.iter().filter_map(|(_, v)| v.offset()).min(),
            _ => None,
        }
    }

    /// Parses a whole document.
    pub fn parse_document(src: &str) -> Result<Located, toml::de::Error> {
        let node: Node = toml::from_str(src)?;
        Ok(Located::bare(node))
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Node, E> {
        i64::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Located>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        table_entries(&mut map, Vec::new())
    }
}

/// Reads the remaining entries of a table (after `entries`).
fn table_entries<'de, A: MapAccess<'de>>(
    map: &mut A,
    mut entries: Vec<(String, Located)>,
) -> Result<Node, A::Error> {
    while let Some(key) = map.next_key::<String>()? {
        if key == DATETIME_FIELD && entries.is_empty() {
            let text: Located = map.next_value()?;
            let text = match text.node {
                Node::Str(s) => s,
                other => format!("{other:?}"),
            };
            return Ok(Node::Datetime(text));
        }
        let value = map.next_value::<Located>()?;
        entries.push((key, value));
    }
    Ok(Node::Table(entries))
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct LocatedVisitor;

impl<'de> Visitor<'de> for LocatedVisitor {
    type Value = Located;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Located, E> {
        Ok(Located::bare(Node::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Located, E> {
        Ok(Located::bare(Node::Int(v)))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Located, E> {
        NodeVisitor.visit_u64(v).map(Located::bare)
    }
    fn visit_f64<E>(self, v: f64) -> Result<Located, E> {
        Ok(Located::bare(Node::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Located, E> {
        Ok(Located::bare(Node::Str(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Located, E> {
        Ok(Located::bare(Node::Str(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Located, A::Error> {
        NodeVisitor.visit_seq(seq).map(Located::bare)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Located, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Ok(Located::bare(Node::Table(Vec::new())));
        };
        if first != START_FIELD {
            // No span offered: an ordinary (implied) table.
            if first == DATETIME_FIELD {
                return table_entries(&mut map, Vec::new()).map(Located::bare);
            }
            let value = map.next_value::<Located>()?;
            return table_entries(&mut map, vec![(first, value)]).map(Located::bare);
        }
        let start: usize = map.next_value()?;
        let mut end = start;
        let mut node = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == END_FIELD {
                end = map.next_value()?;
            } else if key == VALUE_FIELD {
                node = Some(map.next_value::<Node>()?);
            } else {
                return Err(serde::de::Error::custom("malformed spanned value"));
            }
        }
        let node = node.ok_or_else(|| serde::de::Error::custom("spanned value without value"))?;
        Ok(Located {
            span: Some(start..end.max(start)),
            node,
        })
    }
}

impl<'de> Deserialize<'de> for Located {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Located, D::Error> {
        d.deserialize_struct(SPANNED_NAME, SPANNED_FIELDS, LocatedVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(t: &'a Located, key: &str) -> &'a Located {
        match &t.node {
            Node::Table(e) => &e.iter().find(|(k, _)| k == key).unwrap().1,
            other => panic!("not a table: {other:?}"),
        }
    }

    #[test]
    fn values_keep_spans_and_implied_tables_fall_back_to_their_children() {
        let src = "a = 1\n[layers.dev]\nkind = \"x\"\nd = 1979-05-27\n";
        let doc = Located::parse_document(src).unwrap();
        assert_eq!(entry(&doc, "a").span, Some(4..5));
        let layers = entry(&doc, "layers");
        assert_eq!(layers.span, None);
        assert_eq!(layers.offset(), Some(6), "located by `[layers.dev]`");
        let dev = entry(layers, "dev");
        assert_eq!(entry(dev, "kind").node, Node::Str("x".into()));
        assert!(matches!(entry(dev, "d").node, Node::Datetime(_)));
    }
}
