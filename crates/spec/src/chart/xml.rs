//! Reading XML into an owned element tree with positions.
//!
//! roxmltree parses (and rejects DTDs, so no entity expansion attacks); this module copies the
//! parts the chart needs — element names with their namespace URI and prefix, attributes with
//! the position of their value, direct text, children — into an owned [`Element`] tree, so
//! later stages (and the conformance rewriter, which edits the tree) do not borrow the source.
//! Comments and processing instructions are dropped.
//!
//! # Errors
//! A document that is not well-formed XML gives one [`Diagnostic`] at the position roxmltree
//! reports. Nesting deeper than [`MAX_DEPTH`] is rejected (a spec can never crash a node).

use super::{Diagnostic, Diagnostics, Pos};

/// Deepest element nesting accepted.
pub const MAX_DEPTH: usize = 256;

/// The SCXML namespace (W3C recommendation).
pub const SCXML_NS: &str = "http://www.w3.org/2005/07/scxml";
/// The namespace of the W3C conformance-test placeholders (`conf:`).
pub const CONF_NS: &str = "http://www.w3.org/2005/scxml-conformance";

/// An attribute: name (with namespace URI if prefixed), value, and where the value starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Namespace URI of a prefixed attribute, `None` for plain ones.
    pub ns: Option<String>,
    /// Local name.
    pub name: String,
    /// Value, entity references resolved.
    pub value: String,
    /// Position of the first character of the value.
    pub pos: Pos,
}

/// An element with its attributes, direct text and child elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// Namespace URI (empty when none).
    pub ns: String,
    /// Prefix as written, if any.
    pub prefix: Option<String>,
    /// Local name.
    pub name: String,
    /// Attributes in document order.
    pub attrs: Vec<Attr>,
    /// Child elements in document order.
    pub children: Vec<Element>,
    /// Concatenated direct text (including CDATA), untrimmed.
    pub text: String,
    /// Position of the `<`.
    pub pos: Pos,
}

impl Element {
    /// A new element with no attributes or children (used by the conformance rewriter).
    pub fn new(ns: &str, name: &str, pos: Pos) -> Element {
        Element {
            ns: ns.to_string(),
            prefix: None,
            name: name.to_string(),
            attrs: Vec::new(),
            children: Vec::new(),
            text: String::new(),
            pos,
        }
    }

    /// The plain (unprefixed) attribute `name`.
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|a| a.ns.is_none() && a.name == name)
    }

    /// The value of the plain attribute `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.attr(name).map(|a| a.value.as_str())
    }

    /// Sets (or adds) the plain attribute `name`.
    pub fn set(&mut self, name: &str, value: String, pos: Pos) {
        if let Some(a) = self
            .attrs
            .iter_mut()
            .find(|a| a.ns.is_none() && a.name == name)
        {
            a.value = value;
            a.pos = pos;
        } else {
            self.attrs.push(Attr {
                ns: None,
                name: name.to_string(),
                value,
                pos,
            });
        }
    }

    /// Whether the element is in the SCXML namespace (or in none, which is accepted too).
    pub fn is_scxml(&self) -> bool {
        self.ns == SCXML_NS || self.ns.is_empty()
    }
}

/// Byte offsets to `line:col` (columns in characters), in amortised linear time: the tree is
/// walked in document order, so each lookup continues from the previous one
/// (`roxmltree::Document::text_pos_at` rescans from the start, quadratic on large documents).
struct Locator<'s> {
    src: &'s str,
    offset: usize,
    line: u32,
    col: u32,
}

impl<'s> Locator<'s> {
    fn new(src: &'s str) -> Self {
        Locator {
            src,
            offset: 0,
            line: 1,
            col: 1,
        }
    }

    fn pos(&mut self, offset: usize) -> Pos {
        let offset = offset.min(self.src.len());
        if offset < self.offset {
            *self = Locator::new(self.src);
        }
        let chunk = self.src.get(self.offset..offset).unwrap_or("");
        for c in chunk.chars() {
            if c == '\n' {
                self.line = self.line.saturating_add(1);
                self.col = 1;
            } else {
                self.col = self.col.saturating_add(1);
            }
        }
        self.offset = offset;
        Pos::new(self.line, self.col)
    }
}

/// Parses `src` into the root element.
///
/// # Errors
/// Malformed XML, or nesting deeper than [`MAX_DEPTH`].
pub fn read(file: &str, src: &str) -> Result<Element, Diagnostics> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: false,
        nodes_limit: 1_000_000,
    };
    let doc = roxmltree::Document::parse_with_options(src, opts).map_err(|e| {
        let p = e.pos();
        Diagnostics(vec![Diagnostic::error(
            file,
            Pos::new(p.row, p.col),
            format!("malformed XML: {e}"),
        )])
    })?;
    let root = doc.root_element();
    convert(file, &mut Locator::new(src), root, 0)
}

fn convert(
    file: &str,
    loc: &mut Locator<'_>,
    node: roxmltree::Node<'_, '_>,
    depth: usize,
) -> Result<Element, Diagnostics> {
    let pos = loc.pos(node.range().start);
    if depth > MAX_DEPTH {
        return Err(Diagnostics(vec![Diagnostic::error(
            file,
            pos,
            format!("elements nested too deeply (expected at most {MAX_DEPTH} levels)"),
        )]));
    }
    let tag = node.tag_name();
    let ns = tag.namespace().unwrap_or("").to_string();
    let prefix = tag
        .namespace()
        .and_then(|uri| node.lookup_prefix(uri))
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let attrs = node
        .attributes()
        .map(|a| Attr {
            ns: a.namespace().map(str::to_string),
            name: a.name().to_string(),
            value: a.value().to_string(),
            pos: loc.pos(a.range_value().start),
        })
        .collect();
    let mut children = Vec::new();
    let mut text = String::new();
    for c in node.children() {
        if c.is_element() {
            children.push(convert(file, loc, c, depth + 1)?);
        } else if c.is_text() {
            text.push_str(c.text().unwrap_or(""));
        }
    }
    Ok(Element {
        ns,
        prefix,
        name: tag.name().to_string(),
        attrs,
        children,
        text,
        pos,
    })
}

fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

fn write_el(e: &Element, parent_ns: &str, out: &mut String) {
    out.push('<');
    out.push_str(&e.name);
    if e.ns != parent_ns {
        out.push_str(" xmlns=\"");
        escape(&e.ns, out);
        out.push('"');
    }
    for a in &e.attrs {
        if a.ns.is_some() {
            continue;
        }
        out.push(' ');
        out.push_str(&a.name);
        out.push_str("=\"");
        escape(&a.value, out);
        out.push('"');
    }
    if e.children.is_empty() && e.text.is_empty() {
        out.push_str("/>");
        return;
    }
    out.push('>');
    escape(&e.text, out);
    for c in &e.children {
        write_el(c, &e.ns, out);
    }
    out.push_str("</");
    out.push_str(&e.name);
    out.push('>');
}

/// Writes an element tree back as XML text: each element in its namespace (as the default
/// namespace), plain attributes only (prefixed ones are dropped), the element's text before
/// its children (the tree keeps no interleaving). Used to hand a rewritten conformance
/// document to the engine's loader.
pub fn write(root: &Element) -> String {
    let mut out = String::new();
    write_el(root, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_elements_and_attributes() {
        let src =
            "<scxml xmlns=\"http://www.w3.org/2005/07/scxml\">\n  <state id=\"a\"/>\n</scxml>";
        let e = read("t.scxml", src).unwrap();
        assert_eq!(e.ns, SCXML_NS);
        assert_eq!(e.children[0].pos, Pos::new(2, 3));
        assert_eq!(e.children[0].attr("id").unwrap().pos, Pos::new(2, 14));
    }

    #[test]
    fn positions_match_roxmltree_on_multibyte_text() {
        let src = "<a>\n  <b x='é€'/><c\n   y=\"1\"/>\n</a>";
        let e = read("t", src).unwrap();
        let doc = roxmltree::Document::parse(src).unwrap();
        let mut it = doc
            .descendants()
            .filter(roxmltree::Node::is_element)
            .skip(1);
        for (child, node) in e.children.iter().zip(&mut it) {
            let p = doc.text_pos_at(node.range().start);
            assert_eq!(child.pos, Pos::new(p.row, p.col));
            for (a, ra) in child.attrs.iter().zip(node.attributes()) {
                let p = doc.text_pos_at(ra.range_value().start);
                assert_eq!(a.pos, Pos::new(p.row, p.col));
            }
        }
    }

    #[test]
    fn malformed_is_a_diagnostic() {
        let err = read("t.scxml", "<scxml><state></scxml>").unwrap_err();
        assert!(err.to_string().starts_with("t.scxml:1:"), "{err}");
    }
}
