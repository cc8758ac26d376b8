//! The XPath datamodel (the XPath profile of the SCXML working drafts, the W3C IRP's
//! `datamodel="xpath"` tests): every variable is a `<data id=…>` element under one
//! `<datamodel>` element and `$name` is that element; `_event`, `_sessionid`, `_name` and
//! `_ioprocessors` are such elements too. `<assign>` takes the profile's `type=`
//! (`replacechildren`, `firstchild`, `lastchild`, `previoussibling`, `nextsibling`, `replace`,
//! `delete`, `addattribute` with `attr=`). Issue 15 §1.
//!
//! The tree is owned here (an arena of nodes: `Send`, cloneable); each evaluation builds an
//! `sxd-document` DOM of it, evaluates XPath 1.0 with `sxd-xpath` and maps the nodes of the
//! result back to the arena. Slow on large trees, exact on the profile's semantics. One
//! leniency: `/[` (test 568's `$_ioprocessors/[@name=…]`, not XPath 1.0) is read as `/*[`.

use std::collections::{BTreeMap, HashMap};

use sxd_document::{dom, Package};
use sxd_xpath::nodeset::Node as XNode;
use sxd_xpath::{Context, Factory, Value as XValue};

use super::{as_xml, xml_value, HostModel, Init};
use crate::chart::value::Value;

/// Most nodes the tree may hold.
pub const MAX_NODES: usize = 1 << 18;

#[derive(Clone, Debug)]
enum Kind {
    Element {
        name: String,
        attrs: Vec<(String, String)>,
    },
    Text(String),
}

#[derive(Clone, Debug)]
struct N {
    kind: Kind,
    parent: Option<usize>,
    children: Vec<usize>,
}

/// A node of a result.
#[derive(Clone, Debug, PartialEq)]
enum Ref {
    Node(usize),
    Attr(usize, String),
}

/// An evaluation's result, owned.
#[derive(Clone, Debug)]
enum Res {
    Nodes(Vec<Ref>),
    Str(String),
    Num(f64),
    Bool(bool),
}

const SYSTEM: &[&str] = &["_event", "_sessionid", "_name", "_ioprocessors"];

/// An XPath datamodel.
#[derive(Clone, Debug)]
pub struct XPathModel {
    nodes: Vec<N>,
    root: usize,
    vars: BTreeMap<String, usize>,
    stack: Vec<Vec<Ref>>,
    active: Vec<String>,
}

fn num_str(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

struct InFn(Vec<String>);

impl sxd_xpath::function::Function for InFn {
    fn evaluate<'c, 'd>(
        &self,
        _context: &sxd_xpath::context::Evaluation<'c, 'd>,
        args: Vec<XValue<'d>>,
    ) -> Result<XValue<'d>, sxd_xpath::function::Error> {
        let id = args.first().map(XValue::string).unwrap_or_default();
        Ok(XValue::Boolean(self.0.contains(&id)))
    }
}

impl XPathModel {
    /// A model with the system variables bound.
    pub fn new(session: u64, name: &str) -> XPathModel {
        let mut m = XPathModel {
            nodes: vec![N {
                kind: Kind::Element {
                    name: "datamodel".into(),
                    attrs: Vec::new(),
                },
                parent: None,
                children: Vec::new(),
            }],
            root: 0,
            vars: BTreeMap::new(),
            stack: Vec::new(),
            active: Vec::new(),
        };
        let _ = m.bind("_sessionid", &Value::str(&session.to_string()));
        let _ = m.bind("_name", &Value::str(name));
        let loc = format!("#_scxml_{session}");
        let mut io = String::new();
        for p in ["http://www.w3.org/TR/scxml/#SCXMLEventProcessor", "scxml"] {
            io.push_str(&format!(
                "<processor name=\"{p}\"><location>{loc}</location></processor>"
            ));
        }
        let _ = m.bind("_ioprocessors", &xml_value(&io));
        m
    }

    fn add(&mut self, kind: Kind, parent: Option<usize>) -> Result<usize, String> {
        if self.nodes.len() >= MAX_NODES {
            return Err(format!(
                "the XPath datamodel holds {MAX_NODES} nodes (its limit)"
            ));
        }
        self.nodes.push(N {
            kind,
            parent,
            children: Vec::new(),
        });
        Ok(self.nodes.len() - 1)
    }

    fn element(&mut self, name: &str, attrs: Vec<(String, String)>) -> Result<usize, String> {
        self.add(
            Kind::Element {
                name: name.into(),
                attrs,
            },
            None,
        )
    }

    fn append(&mut self, parent: usize, child: usize) {
        self.nodes[child].parent = Some(parent);
        self.nodes[parent].children.push(child);
    }

    fn detach(&mut self, n: usize) {
        if let Some(p) = self.nodes[n].parent.take() {
            self.nodes[p].children.retain(|&c| c != n);
        }
    }

    /// Binds variable `name` to a fresh `<data id=name>` holding `v`.
    fn bind(&mut self, name: &str, v: &Value) -> Result<(), String> {
        let nodes = self.value_nodes(v)?;
        self.bind_nodes(name, nodes)
    }

    fn bind_nodes(&mut self, name: &str, content: Vec<usize>) -> Result<(), String> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(format!("illegal variable name \"{name}\""));
        }
        let d = match self.vars.get(name) {
            Some(&d) if self.nodes[d].parent == Some(self.root) => {
                for c in std::mem::take(&mut self.nodes[d].children) {
                    self.nodes[c].parent = None;
                }
                d
            }
            _ => {
                let d = self.element("data", vec![("id".into(), name.into())])?;
                self.append(self.root, d);
                self.vars.insert(name.to_string(), d);
                d
            }
        };
        for c in content {
            self.append(d, c);
        }
        Ok(())
    }

    /// Detached nodes representing `v`.
    fn value_nodes(&mut self, v: &Value) -> Result<Vec<usize>, String> {
        if let Some(markup) = as_xml(v) {
            return self.parse_markup(markup);
        }
        Ok(match v {
            Value::Null => Vec::new(),
            Value::Bool(b) => vec![self.add(Kind::Text(b.to_string()), None)?],
            Value::Number(n) => vec![self.add(Kind::Text(num_str(*n)), None)?],
            Value::String(s) => vec![self.add(Kind::Text(s.to_string()), None)?],
            Value::List(l) => {
                let mut out = Vec::new();
                for x in l.iter() {
                    let e = self.element("item", Vec::new())?;
                    for c in self.value_nodes(x)? {
                        self.append(e, c);
                    }
                    out.push(e);
                }
                out
            }
            Value::Map(m) => {
                let mut out = Vec::new();
                for (k, x) in m.iter() {
                    let e = self.element("data", vec![("id".into(), k.clone())])?;
                    for c in self.value_nodes(x)? {
                        self.append(e, c);
                    }
                    out.push(e);
                }
                out
            }
        })
    }

    fn parse_markup(&mut self, markup: &str) -> Result<Vec<usize>, String> {
        let wrapped = format!("<r>{markup}</r>");
        let doc = roxmltree::Document::parse(&wrapped).map_err(|e| format!("XML content: {e}"))?;
        let mut out = Vec::new();
        for c in doc.root_element().children() {
            if let Some(n) = self.import(c)? {
                out.push(n);
            }
        }
        Ok(out)
    }

    fn import(&mut self, n: roxmltree::Node<'_, '_>) -> Result<Option<usize>, String> {
        if n.is_text() {
            let t = n.text().unwrap_or("");
            return Ok(Some(self.add(Kind::Text(t.to_string()), None)?));
        }
        if !n.is_element() {
            return Ok(None);
        }
        let attrs = n
            .attributes()
            .map(|a| (a.name().to_string(), a.value().to_string()))
            .collect();
        let e = self.element(n.tag_name().name(), attrs)?;
        for c in n.children() {
            if let Some(x) = self.import(c)? {
                self.append(e, x);
            }
        }
        Ok(Some(e))
    }

    fn deep_copy(&mut self, n: usize) -> Result<usize, String> {
        let kind = self.nodes[n].kind.clone();
        let c = self.add(kind, None)?;
        for ch in self.nodes[n].children.clone() {
            let x = self.deep_copy(ch)?;
            self.append(c, x);
        }
        Ok(c)
    }

    fn string_value(&self, n: usize) -> String {
        match &self.nodes[n].kind {
            Kind::Text(t) => t.clone(),
            Kind::Element { .. } => self.nodes[n]
                .children
                .iter()
                .map(|&c| self.string_value(c))
                .collect(),
        }
    }

    fn ref_string(&self, r: &Ref) -> String {
        match r {
            Ref::Node(n) => self.string_value(*n),
            Ref::Attr(n, a) => match &self.nodes[*n].kind {
                Kind::Element { attrs, .. } => attrs
                    .iter()
                    .find(|(k, _)| k == a)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default(),
                Kind::Text(_) => String::new(),
            },
        }
    }

    fn res_string(&self, r: &Res) -> String {
        match r {
            Res::Nodes(ns) => ns.first().map(|n| self.ref_string(n)).unwrap_or_default(),
            Res::Str(s) => s.clone(),
            Res::Num(n) => num_str(*n),
            Res::Bool(b) => b.to_string(),
        }
    }

    fn markup(&self, n: usize, out: &mut String) {
        match &self.nodes[n].kind {
            Kind::Text(t) => escape(t, out),
            Kind::Element { name, attrs } => {
                out.push('<');
                out.push_str(name);
                for (k, v) in attrs {
                    out.push(' ');
                    out.push_str(k);
                    out.push_str("=\"");
                    escape(v, out);
                    out.push('"');
                }
                out.push('>');
                for &c in &self.nodes[n].children {
                    self.markup(c, out);
                }
                out.push_str("</");
                out.push_str(name);
                out.push('>');
            }
        }
    }

    // sxd's nodes hash and compare by their node pointer, which never changes.
    #[allow(clippy::mutable_key_type)]
    fn build_el<'d>(
        &self,
        doc: &dom::Document<'d>,
        n: usize,
        map: &mut HashMap<dom::Element<'d>, usize>,
        texts: &mut HashMap<dom::Text<'d>, usize>,
    ) -> Option<dom::Element<'d>> {
        let Kind::Element { name, attrs } = &self.nodes[n].kind else {
            return None;
        };
        let e = doc.create_element(name.as_str());
        for (k, v) in attrs {
            e.set_attribute_value(k.as_str(), v);
        }
        for &c in &self.nodes[n].children {
            match &self.nodes[c].kind {
                Kind::Text(t) => {
                    let tx = doc.create_text(t);
                    e.append_child(tx);
                    texts.insert(tx, c);
                }
                Kind::Element { .. } => {
                    if let Some(ce) = self.build_el(doc, c, map, texts) {
                        e.append_child(ce);
                    }
                }
            }
        }
        map.insert(e, n);
        Some(e)
    }

    /// Evaluates `src` over the tree, with the variables bound.
    #[allow(clippy::mutable_key_type)]
    fn run(&self, src: &str) -> Result<Res, String> {
        let src = src.replace("/[", "/*[");
        let factory = Factory::new();
        let xp = factory
            .build(&src)
            .map_err(|e| format!("bad XPath \"{src}\": {e}"))?
            .ok_or_else(|| "empty XPath expression".to_string())?;
        let package = Package::new();
        let doc = package.as_document();
        let mut map = HashMap::new();
        let mut texts = HashMap::new();
        let root = self
            .build_el(&doc, self.root, &mut map, &mut texts)
            .ok_or("no datamodel root")?;
        doc.root().append_child(root);
        let back: HashMap<usize, dom::Element<'_>> = map.iter().map(|(e, n)| (*n, *e)).collect();
        let mut ctx = Context::new();
        for (name, &n) in &self.vars {
            let mut ns = sxd_xpath::nodeset::Nodeset::new();
            if let Some(e) = back.get(&n) {
                ns.add(*e);
            } else if let Some((t, _)) = texts.iter().find(|(_, &x)| x == n) {
                ns.add(*t);
            }
            ctx.set_variable(name.as_str(), XValue::Nodeset(ns));
        }
        ctx.set_function("In", InFn(self.active.clone()));
        let v = xp
            .evaluate(&ctx, doc.root())
            .map_err(|e| format!("XPath \"{src}\": {e}"))?;
        Ok(match v {
            XValue::Boolean(b) => Res::Bool(b),
            XValue::Number(n) => Res::Num(n),
            XValue::String(s) => Res::Str(s),
            XValue::Nodeset(ns) => {
                let mut out = Vec::new();
                for node in ns.document_order() {
                    match node {
                        XNode::Element(e) => {
                            if let Some(&n) = map.get(&e) {
                                out.push(Ref::Node(n));
                            }
                        }
                        XNode::Text(t) => {
                            if let Some(&n) = texts.get(&t) {
                                out.push(Ref::Node(n));
                            }
                        }
                        XNode::Attribute(a) => {
                            if let Some(&n) = a.parent().and_then(|p| map.get(&p)) {
                                out.push(Ref::Attr(n, a.name().local_part().to_string()));
                            }
                        }
                        XNode::Root(_) => out.push(Ref::Node(self.root)),
                        _ => {}
                    }
                }
                Res::Nodes(out)
            }
        })
    }

    fn to_value(&self, r: &Res) -> Value {
        match r {
            Res::Bool(b) => Value::Bool(*b),
            Res::Num(n) => Value::Number(*n),
            Res::Str(s) => Value::str(s),
            Res::Nodes(ns) => {
                if ns.iter().all(|n| matches!(n, Ref::Attr(..)))
                    || ns
                        .iter()
                        .all(|n| matches!(n, Ref::Node(x) if matches!(self.nodes[*x].kind, Kind::Text(_))))
                {
                    return Value::str(&self.res_string(r));
                }
                let mut m = String::new();
                for n in ns {
                    match n {
                        Ref::Node(x) => self.markup(*x, &mut m),
                        Ref::Attr(..) => escape(&self.ref_string(n), &mut m),
                    }
                }
                xml_value(&m)
            }
        }
    }

    /// Detached copies of a value given as an expression or a value.
    fn content(&mut self, value: Init<'_>) -> Result<(Vec<usize>, Res), String> {
        let r = match value {
            Init::None => return Ok((Vec::new(), Res::Str(String::new()))),
            Init::Expr(src) => self.run(src)?,
            Init::Value(v) => {
                let nodes = self.value_nodes(v)?;
                let s: String = nodes.iter().map(|&n| self.string_value(n)).collect();
                let r = if nodes
                    .iter()
                    .any(|&n| matches!(self.nodes[n].kind, Kind::Element { .. }))
                {
                    Res::Nodes(nodes.iter().map(|&n| Ref::Node(n)).collect())
                } else {
                    Res::Str(s)
                };
                return Ok((nodes, r));
            }
        };
        let nodes = match &r {
            Res::Nodes(ns) => {
                let mut out = Vec::new();
                for n in ns {
                    match n {
                        Ref::Node(x) if *x == self.root => {
                            for c in self.nodes[*x].children.clone() {
                                out.push(self.deep_copy(c)?);
                            }
                        }
                        Ref::Node(x) => out.push(self.deep_copy(*x)?),
                        Ref::Attr(..) => {
                            let s = self.ref_string(n);
                            out.push(self.add(Kind::Text(s), None)?);
                        }
                    }
                }
                out
            }
            other => {
                let s = self.res_string(other);
                vec![self.add(Kind::Text(s), None)?]
            }
        };
        Ok((nodes, r))
    }

    fn var_name(loc: &str) -> &str {
        loc.trim().trim_start_matches('$')
    }
}

impl HostModel for XPathModel {
    fn declare(&mut self, name: &str, init: Init<'_>) -> Result<(), String> {
        let r = self.content(init);
        let nodes = match r {
            Ok((n, _)) => n,
            Err(e) => {
                let _ = self.bind_nodes(name, Vec::new());
                return Err(e);
            }
        };
        self.bind_nodes(name, nodes)
    }

    fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let r = self.run(expr)?;
        Ok(self.to_value(&r))
    }

    fn cond(&mut self, expr: &str) -> Result<bool, String> {
        Ok(match self.run(expr)? {
            Res::Bool(b) => b,
            Res::Num(n) => n != 0.0 && !n.is_nan(),
            Res::Str(s) => !s.is_empty(),
            Res::Nodes(ns) => !ns.is_empty(),
        })
    }

    fn assign(
        &mut self,
        location: &str,
        value: Init<'_>,
        kind: Option<&str>,
        attr: Option<&str>,
    ) -> Result<(), String> {
        let loc = location.trim();
        if SYSTEM.iter().any(|s| {
            loc.strip_prefix('$')
                .and_then(|l| l.strip_prefix(s))
                .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric()))
        }) {
            return Err(format!("cannot assign the system variable in \"{loc}\""));
        }
        let targets = match self.run(loc)? {
            Res::Nodes(ns) if !ns.is_empty() => ns,
            _ => return Err(format!("location \"{loc}\" is not a node")),
        };
        let kind = kind.map(str::trim).unwrap_or("replacechildren");
        if kind == "delete" {
            for t in &targets {
                match t {
                    Ref::Node(n) if *n != self.root => self.detach(*n),
                    Ref::Attr(n, a) => {
                        if let Kind::Element { attrs, .. } = &mut self.nodes[*n].kind {
                            attrs.retain(|(k, _)| k != a);
                        }
                    }
                    Ref::Node(_) => return Err("cannot delete the datamodel".into()),
                }
            }
            return Ok(());
        }
        let (first, r) = self.content(value)?;
        if kind == "addattribute" {
            let name = attr.ok_or("<assign type=\"addattribute\"> without attr=")?;
            let v = self.res_string(&r);
            for t in &targets {
                match t {
                    Ref::Node(n) => match &mut self.nodes[*n].kind {
                        Kind::Element { attrs, .. } => {
                            attrs.retain(|(k, _)| k != name);
                            attrs.push((name.to_string(), v.clone()));
                        }
                        Kind::Text(_) => return Err("addattribute on a text node".into()),
                    },
                    Ref::Attr(..) => return Err("addattribute on an attribute".into()),
                }
            }
            return Ok(());
        }
        let has_elements = first
            .iter()
            .any(|&n| matches!(self.nodes[n].kind, Kind::Element { .. }));
        // Check every target before changing any (a failed assign changes nothing).
        for t in &targets {
            match (t, kind) {
                (Ref::Attr(..), "replacechildren") if has_elements => {
                    return Err("cannot assign XML to an attribute".into())
                }
                (Ref::Attr(..), "replacechildren") => {}
                (Ref::Attr(..), k) => return Err(format!("type=\"{k}\" on an attribute")),
                (Ref::Node(n), "previoussibling" | "nextsibling" | "replace")
                    if self.nodes[*n].parent.is_none() || *n == self.root =>
                {
                    return Err(format!("type=\"{kind}\" on a node without a parent"))
                }
                (
                    Ref::Node(_),
                    "replacechildren" | "firstchild" | "lastchild" | "previoussibling"
                    | "nextsibling" | "replace",
                ) => {}
                (_, k) => return Err(format!("unknown <assign type=\"{k}\">")),
            }
        }
        for (i, t) in targets.iter().enumerate() {
            let nodes = if i == 0 {
                first.clone()
            } else {
                let mut v = Vec::new();
                for &n in &first {
                    v.push(self.deep_copy(n)?);
                }
                v
            };
            match t {
                Ref::Attr(n, a) => {
                    let v = self.res_string(&r);
                    if let Kind::Element { attrs, .. } = &mut self.nodes[*n].kind {
                        match attrs.iter_mut().find(|(k, _)| k == a) {
                            Some(slot) => slot.1 = v,
                            None => attrs.push((a.clone(), v)),
                        }
                    }
                }
                Ref::Node(n) => {
                    let n = *n;
                    match kind {
                        "replacechildren" => {
                            let s = self.res_string(&r);
                            if let Kind::Text(t) = &mut self.nodes[n].kind {
                                *t = s;
                                continue;
                            }
                            for c in std::mem::take(&mut self.nodes[n].children) {
                                self.nodes[c].parent = None;
                            }
                            for c in nodes {
                                self.append(n, c);
                            }
                        }
                        "lastchild" => {
                            for c in nodes {
                                self.append(n, c);
                            }
                        }
                        "firstchild" => {
                            for (k, c) in nodes.into_iter().enumerate() {
                                self.nodes[c].parent = Some(n);
                                self.nodes[n].children.insert(k, c);
                            }
                        }
                        _ => {
                            let Some(p) = self.nodes[n].parent else {
                                continue;
                            };
                            let at = self.nodes[p]
                                .children
                                .iter()
                                .position(|&c| c == n)
                                .unwrap_or(0);
                            let at = if kind == "nextsibling" { at + 1 } else { at };
                            if kind == "replace" {
                                self.detach(n);
                            }
                            for (k, c) in nodes.into_iter().enumerate() {
                                self.nodes[c].parent = Some(p);
                                let pos = (at + k).min(self.nodes[p].children.len());
                                self.nodes[p].children.insert(pos, c);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn script(&mut self, _src: &str) -> Result<(), String> {
        Err("the XPath datamodel has no <script>".into())
    }

    fn set_event(&mut self, event: &Value) -> Result<(), String> {
        let mut fields = Vec::new();
        for f in [
            "name",
            "type",
            "sendid",
            "origin",
            "origintype",
            "invokeid",
            "data",
        ] {
            let e = self.element(f, Vec::new())?;
            if let Some(v) = event.get(f) {
                for c in self.value_nodes(v)? {
                    self.append(e, c);
                }
            }
            fields.push(e);
        }
        self.bind_nodes("_event", fields)
    }

    fn set_active(&mut self, active: &[&str]) {
        self.active = active.iter().map(|s| (*s).to_string()).collect();
    }

    fn foreach_start(&mut self, array: &str) -> Result<usize, String> {
        match self.run(array)? {
            Res::Nodes(ns) => {
                let n = ns.len();
                self.stack.push(ns);
                Ok(n)
            }
            _ => Err(format!("foreach array \"{array}\" is not a node-set")),
        }
    }

    fn foreach_bind(&mut self, item: &str, index: Option<&str>, i: usize) -> Result<(), String> {
        let item = Self::var_name(item);
        if item.is_empty()
            || SYSTEM.contains(&item)
            || !item
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(format!("illegal foreach item \"{item}\""));
        }
        let Some(Ref::Node(n)) = self.stack.last().and_then(|s| s.get(i)).cloned() else {
            return Err("foreach item is not a node".into());
        };
        self.vars.insert(item.to_string(), n);
        if let Some(ix) = index {
            #[allow(clippy::cast_precision_loss)]
            self.bind(Self::var_name(ix), &Value::Number((i + 1) as f64))?;
        }
        Ok(())
    }

    fn foreach_end(&mut self) {
        self.stack.pop();
    }

    fn read(&mut self, name: &str) -> Result<Value, String> {
        let name = Self::var_name(name);
        if !self.vars.contains_key(name) {
            return Err(format!("variable {name} is not declared"));
        }
        self.eval(&format!("${name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_elements_assign_types_and_errors() {
        let mut m = XPathModel::new(1, "t");
        m.declare("foo", Init::Expr("2")).unwrap();
        assert!(m
            .cond("local-name($foo)='data' and $foo/@id='foo' and $foo = 2")
            .unwrap());
        assert!(m.cond("local-name($foo/..)='datamodel'").unwrap());
        let cart = xml_value("<cart><book><t>a</t></book><book><t>b</t></book></cart>");
        m.declare("c", Init::Value(&cart)).unwrap();
        m.assign(
            "$c/cart/book[1]",
            Init::Value(&xml_value("<x>1</x>")),
            Some("firstchild"),
            None,
        )
        .unwrap();
        assert!(m
            .cond("$c/cart/book[1]/*[1] = 1 and $c/cart/book[1]/*[2] = 'a'")
            .unwrap());
        m.assign(
            "$c/cart/book[2]",
            Init::Expr("'z'"),
            Some("addattribute"),
            Some("k"),
        )
        .unwrap();
        assert!(m.cond("$c/cart/book[2]/@k = 'z'").unwrap());
        // XML into an attribute fails and changes nothing.
        assert!(m
            .assign(
                "$c/cart/book[2]/@k",
                Init::Value(&xml_value("<y/>")),
                None,
                None
            )
            .is_err());
        assert!(m.cond("$c/cart/book[2]/@k = 'z'").unwrap());
        assert!(m
            .assign("$_sessionid", Init::Expr("3"), None, None)
            .is_err());
        assert!(m.eval("$undeclared").is_err());
        assert!(m.eval("((").is_err());
        m.assign("$c/cart/book[2]", Init::None, Some("delete"), None)
            .unwrap();
        assert!(m.cond("count($c/cart/book) = 1").unwrap());
        m.set_active(&["s1"]);
        assert!(m.cond("In('s1') and not(In('s2'))").unwrap());
    }
}
