//! The SCXML document model: states, transitions, executable content, datamodel.
//!
//! [`build`] turns an [`xml::Element`](super::xml::Element) tree into a [`Document`], checking
//! the vocabulary: an SCXML element or attribute this implementation does not know is an error
//! naming what was expected there. Expressions stay as source text ([`Src`]) with their
//! position; [`validate`](super::validate) parses them. Elements in another namespace inside
//! executable content become [`Exec::Custom`] (the seed's `<action:…>`), kept whole for the
//! [`Extension`](super::Extension); `<data>` with element children is kept opaque.
//!
//! `<invoke>` (W3C SCXML §6.4) is kept as an [`InvokeNode`]; an inline `<content><scxml>…`
//! child document is built here too (its errors are the invoking document's). `<script>`
//! (§5.8) holds statements of viastack's language ([`super::expr::parse_script`]); `src=`
//! on `<data>` and `<script>` names a resource the host's loader fetches at run time.

use super::xml::{Element, CONF_NS};
use super::{Diagnostic, Diagnostics, Pos};

/// An attribute value (an expression, id list or literal) and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Src {
    /// The text as written.
    pub text: String,
    /// Position of its first character.
    pub pos: Pos,
}

/// What kind of state a [`StateNode`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateKind {
    /// The `<scxml>` element itself, the root compound state.
    Root,
    /// `<state>` (atomic without child states, compound with them).
    State,
    /// `<parallel>`.
    Parallel,
    /// `<final>`.
    Final,
    /// `<history type="shallow|deep">`.
    History {
        /// `type="deep"`.
        deep: bool,
    },
}

/// A state (or the root, or a pseudo-state `<history>`).
#[derive(Clone, Debug, PartialEq)]
pub struct StateNode {
    /// Kind.
    pub kind: StateKind,
    /// `id`, if given.
    pub id: Option<Src>,
    /// Where the element starts.
    pub pos: Pos,
    /// `initial` attribute (`initialstate` on `<scxml>`): space-separated state ids.
    pub initial: Option<Src>,
    /// The transition of an `<initial>` child element.
    pub initial_transition: Option<TransitionNode>,
    /// `<onentry>` blocks in document order.
    pub onentry: Vec<Vec<Exec>>,
    /// `<onexit>` blocks in document order.
    pub onexit: Vec<Vec<Exec>>,
    /// Transitions in document order (for history: its default transition).
    pub transitions: Vec<TransitionNode>,
    /// Child states (state, parallel, final, history) in document order.
    pub children: Vec<StateNode>,
    /// `<data>` elements of this state's `<datamodel>`.
    pub data: Vec<DataNode>,
    /// `<donedata>` of a final state.
    pub donedata: Option<DoneData>,
    /// `<invoke>` children in document order.
    pub invokes: Vec<InvokeNode>,
    /// Top-level `<script>` blocks (root only), run at load time.
    pub scripts: Vec<Exec>,
}

/// What an `<invoke>` starts.
#[derive(Clone, Debug, PartialEq)]
pub enum InvokeContent {
    /// An inline `<content><scxml>…</scxml></content>` document.
    Doc(Box<Document>),
    /// `<content expr=…>`: an expression giving the document's text.
    Expr(Src),
    /// `<content>` text.
    Text(String),
}

/// `<invoke>` (W3C SCXML §6.4).
#[derive(Clone, Debug, PartialEq, Default)]
#[allow(missing_docs)]
pub struct InvokeNode {
    pub pos: Pos,
    pub type_: Option<Src>,
    pub typeexpr: Option<Src>,
    pub src: Option<Src>,
    pub srcexpr: Option<Src>,
    pub id: Option<Src>,
    pub idlocation: Option<Src>,
    pub namelist: Option<Src>,
    pub autoforward: bool,
    pub params: Vec<Param>,
    pub content: Option<InvokeContent>,
    pub finalize: Vec<Exec>,
}

impl StateNode {
    fn new(kind: StateKind, pos: Pos) -> StateNode {
        StateNode {
            kind,
            id: None,
            pos,
            initial: None,
            initial_transition: None,
            onentry: Vec::new(),
            onexit: Vec::new(),
            transitions: Vec::new(),
            children: Vec::new(),
            data: Vec::new(),
            donedata: None,
            invokes: Vec::new(),
            scripts: Vec::new(),
        }
    }

    /// The id text, or "" for the root and anonymous states.
    pub fn id_str(&self) -> &str {
        self.id.as_ref().map_or("", |s| s.text.as_str())
    }
}

/// A `<transition>`.
#[derive(Clone, Debug, PartialEq)]
pub struct TransitionNode {
    /// Where it starts.
    pub pos: Pos,
    /// `event`: space-separated event descriptors.
    pub event: Option<Src>,
    /// `cond`: a boolean expression.
    pub cond: Option<Src>,
    /// `target`: space-separated state ids; none = a targetless transition.
    pub target: Option<Src>,
    /// `type="internal"`.
    pub internal: bool,
    /// Executable content.
    pub body: Vec<Exec>,
}

/// A `<data>` element.
#[derive(Clone, Debug, PartialEq)]
pub struct DataNode {
    /// Where it starts.
    pub pos: Pos,
    /// `id`: the variable name.
    pub id: Option<Src>,
    /// `name` (the seed's service data: `service`, `metaops`, `events`).
    pub name: Option<String>,
    /// `expr`: the initial value.
    pub expr: Option<Src>,
    /// Inline text content (an expression or JSON), if no element children.
    pub text: String,
    /// Whether it has element children (kept opaque).
    pub has_elements: bool,
    /// The element children as XML text (for the ECMAScript and XPath datamodels).
    pub markup: String,
    /// `src`: a resource the host's loader fetches.
    pub src: Option<Src>,
}

/// `<param>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Where it starts.
    pub pos: Pos,
    /// `name`.
    pub name: String,
    /// `expr`.
    pub expr: Option<Src>,
    /// `location`.
    pub location: Option<Src>,
}

/// `<content>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Content {
    /// Where it starts.
    pub pos: Pos,
    /// `expr`.
    pub expr: Option<Src>,
    /// Inline text.
    pub text: String,
    /// The element children as XML text (for the ECMAScript and XPath datamodels).
    pub markup: String,
}

/// `<donedata>`.
#[derive(Clone, Debug, PartialEq)]
pub struct DoneData {
    /// Where it starts.
    pub pos: Pos,
    /// `<content>`, if any.
    pub content: Option<Content>,
    /// `<param>`s.
    pub params: Vec<Param>,
}

/// `<send>`.
#[derive(Clone, Debug, PartialEq, Default)]
#[allow(missing_docs)]
pub struct SendNode {
    pub pos: Pos,
    pub event: Option<Src>,
    pub eventexpr: Option<Src>,
    pub target: Option<Src>,
    pub targetexpr: Option<Src>,
    pub type_: Option<Src>,
    pub typeexpr: Option<Src>,
    pub id: Option<Src>,
    pub idlocation: Option<Src>,
    pub delay: Option<Src>,
    pub delayexpr: Option<Src>,
    pub namelist: Option<Src>,
    pub params: Vec<Param>,
    pub content: Option<Content>,
}

/// Any element inside executable content whose namespace is neither SCXML nor `conf:`
/// (e.g. `xmlns:action="http://my.custom-actions.domain/action"`), kept whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomElement {
    /// Namespace URI.
    pub namespace: String,
    /// Prefix as written.
    pub prefix: Option<String>,
    /// Local name (`create`, `set`, `execute`, `setTimer`, …).
    pub name: String,
    /// Attributes (local name, value) in document order.
    pub attrs: Vec<(String, String)>,
    /// Child elements.
    pub children: Vec<CustomElement>,
    /// Direct text.
    pub text: String,
    /// Where it starts.
    pub pos: Pos,
}

impl CustomElement {
    /// The attribute `name`.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn from_xml(e: &Element) -> CustomElement {
        CustomElement {
            namespace: e.ns.clone(),
            prefix: e.prefix.clone(),
            name: e.name.clone(),
            attrs: e
                .attrs
                .iter()
                .map(|a| (a.name.clone(), a.value.clone()))
                .collect(),
            children: e.children.iter().map(CustomElement::from_xml).collect(),
            text: e.text.clone(),
            pos: e.pos,
        }
    }
}

/// Executable content.
#[derive(Clone, Debug, PartialEq)]
pub enum Exec {
    /// `<raise event=…>`.
    Raise {
        /// Where.
        pos: Pos,
        /// The event name.
        event: Src,
    },
    /// `<send>`.
    Send(Box<SendNode>),
    /// `<cancel sendid=… | sendidexpr=…>`.
    Cancel {
        /// Where.
        pos: Pos,
        /// `sendid`.
        sendid: Option<Src>,
        /// `sendidexpr`.
        sendidexpr: Option<Src>,
    },
    /// `<log label=… expr=…>`.
    Log {
        /// Where.
        pos: Pos,
        /// `label`.
        label: String,
        /// `expr`.
        expr: Option<Src>,
    },
    /// `<assign location=… expr=…>` (or inline text as the value).
    Assign {
        /// Where.
        pos: Pos,
        /// `location`.
        location: Src,
        /// `expr`.
        expr: Option<Src>,
        /// Inline text, when no `expr`.
        text: String,
        /// `type` (XPath datamodel: `replacechildren`, `firstchild`, …).
        kind: Option<Src>,
        /// `attr` (XPath datamodel, with `type="addattribute"`).
        attr: Option<Src>,
    },
    /// `<if>` with its `<elseif>`/`<else>` branches; a branch without condition is `else`.
    If {
        /// Where.
        pos: Pos,
        /// (cond, block) in order.
        branches: Vec<(Option<Src>, Vec<Exec>)>,
    },
    /// `<foreach array item index>`.
    Foreach {
        /// Where.
        pos: Pos,
        /// `array`: an expression giving a list.
        array: Src,
        /// `item`: the variable bound to each element.
        item: Src,
        /// `index`: the variable bound to each index.
        index: Option<Src>,
        /// Body.
        body: Vec<Exec>,
    },
    /// `<script>`: statements of viastack's language, inline or from `src`.
    Script {
        /// Where.
        pos: Pos,
        /// Inline text (with its position).
        text: Src,
        /// `src`.
        src: Option<Src>,
    },
    /// A custom element (another namespace).
    Custom(CustomElement),
}

/// A parsed SCXML document.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// File name, for diagnostics.
    pub file: String,
    /// `name` of `<scxml>`.
    pub name: Option<String>,
    /// `binding="late"`.
    pub late_binding: bool,
    /// `datamodel=…`: viastack's own, or ECMAScript or XPath.
    pub datamodel: super::host::Datamodel,
    /// The root: `<scxml>` as a compound state.
    pub root: StateNode,
    /// Warnings found while reading (unsupported elements that are skipped).
    pub warnings: Vec<Diagnostic>,
}

struct Builder<'a> {
    file: &'a str,
    diags: Vec<Diagnostic>,
}

const SCXML_ATTRS: &[&str] = &[
    "initial",
    "initialstate",
    "name",
    "version",
    "datamodel",
    "binding",
    "exmode",
];

/// Builds the model from the element tree.
///
/// # Errors
/// Unknown SCXML elements or attributes, missing required attributes, unsupported elements.
pub fn build(file: &str, root: &Element) -> Result<Document, Diagnostics> {
    let mut b = Builder {
        file,
        diags: Vec::new(),
    };
    if root.name != "scxml" || !root.is_scxml() {
        return Err(Diagnostics(vec![Diagnostic::error(
            file,
            root.pos,
            format!("root element is <{}> (expected <scxml>)", root.name),
        )]));
    }
    b.check_attrs(root, SCXML_ATTRS);
    let mut state = StateNode::new(StateKind::Root, root.pos);
    state.initial = src(root, "initial").or_else(|| src(root, "initialstate"));
    let late_binding = match root.get("binding") {
        None | Some("early") => false,
        Some("late") => true,
        Some(other) => {
            let pos = root.attr("binding").map_or(root.pos, |a| a.pos);
            b.error(
                pos,
                format!("binding \"{other}\" (expected \"early\" or \"late\")"),
            );
            false
        }
    };
    b.state_children(root, &mut state);
    let doc = Document {
        file: file.to_string(),
        name: root.get("name").map(str::to_string),
        late_binding,
        datamodel: super::host::Datamodel::from_attr(root.get("datamodel")),
        root: state,
        warnings: Vec::new(),
    };
    if b.diags.iter().any(Diagnostic::is_error) {
        return Err(Diagnostics(b.diags));
    }
    Ok(Document {
        warnings: b.diags,
        ..doc
    })
}

fn src(e: &Element, name: &str) -> Option<Src> {
    e.attr(name).map(|a| Src {
        text: a.value.clone(),
        pos: a.pos,
    })
}

impl Builder<'_> {
    fn error(&mut self, pos: Pos, msg: String) {
        self.diags.push(Diagnostic::error(self.file, pos, msg));
    }

    fn check_attrs(&mut self, e: &Element, allowed: &[&str]) {
        for a in &e.attrs {
            if a.ns.as_deref() == Some(CONF_NS) {
                self.error(
                    a.pos,
                    format!(
                        "conformance placeholder conf:{} left in the document",
                        a.name
                    ),
                );
            } else if a.ns.is_none() && !allowed.contains(&a.name.as_str()) {
                let mut msg = format!("unknown attribute \"{}\" on <{}>", a.name, e.name);
                if allowed.is_empty() {
                    msg.push_str(" (expected no attributes)");
                } else {
                    msg.push_str(&format!(" (expected one of: {})", allowed.join(", ")));
                }
                self.error(a.pos, msg);
            }
        }
    }

    fn required(&mut self, e: &Element, name: &str) -> Src {
        src(e, name).unwrap_or_else(|| {
            self.error(
                e.pos,
                format!(
                    "<{}> without \"{name}\" (expected a {name} attribute)",
                    e.name
                ),
            );
            Src {
                text: String::new(),
                pos: e.pos,
            }
        })
    }

    fn unknown_child(&mut self, parent: &Element, child: &Element, expected: &str) {
        if child.ns == CONF_NS {
            self.error(
                child.pos,
                format!(
                    "conformance placeholder <conf:{}> left in the document",
                    child.name
                ),
            );
        } else if child.is_scxml() {
            self.error(
                child.pos,
                format!(
                    "unknown element <{}> in <{}> (expected {expected})",
                    child.name, parent.name
                ),
            );
        }
        // Elements of other namespaces outside executable content are extension data: ignored.
    }

    fn state_children(&mut self, e: &Element, st: &mut StateNode) {
        for c in &e.children {
            if !c.is_scxml() {
                self.unknown_child(e, c, "");
                continue;
            }
            match c.name.as_str() {
                "state" | "parallel" | "final" | "history" => {
                    let child = self.state(c);
                    st.children.push(child);
                }
                "transition" if st.kind != StateKind::Root && st.kind != StateKind::Final => {
                    let t = self.transition(c);
                    st.transitions.push(t);
                }
                "onentry" if st.kind != StateKind::Root => {
                    self.check_attrs(c, &[]);
                    let block = self.block(c);
                    st.onentry.push(block);
                }
                "onexit" if st.kind != StateKind::Root => {
                    self.check_attrs(c, &[]);
                    let block = self.block(c);
                    st.onexit.push(block);
                }
                "datamodel" => {
                    self.check_attrs(c, &[]);
                    for d in &c.children {
                        if d.is_scxml() && d.name == "data" {
                            let data = self.data(d);
                            st.data.push(data);
                        } else {
                            self.unknown_child(c, d, "<data>");
                        }
                    }
                }
                "initial" if st.kind == StateKind::State => {
                    self.check_attrs(c, &[]);
                    let mut found = None;
                    for t in &c.children {
                        if t.is_scxml() && t.name == "transition" && found.is_none() {
                            found = Some(self.transition(t));
                        } else {
                            self.unknown_child(c, t, "one <transition>");
                        }
                    }
                    match found {
                        Some(t) => st.initial_transition = Some(t),
                        None => self.error(
                            c.pos,
                            "<initial> without a transition (expected one <transition target=…>)"
                                .into(),
                        ),
                    }
                }
                "donedata" if st.kind == StateKind::Final => {
                    self.check_attrs(c, &[]);
                    let mut dd = DoneData {
                        pos: c.pos,
                        content: None,
                        params: Vec::new(),
                    };
                    for p in &c.children {
                        match p.name.as_str() {
                            "content" if p.is_scxml() => dd.content = Some(self.content(p)),
                            "param" if p.is_scxml() => dd.params.push(self.param(p)),
                            _ => self.unknown_child(c, p, "<content> or <param>"),
                        }
                    }
                    st.donedata = Some(dd);
                }
                "invoke" if matches!(st.kind, StateKind::State | StateKind::Parallel) => {
                    let inv = self.invoke(c);
                    st.invokes.push(inv);
                }
                "script" if st.kind == StateKind::Root => {
                    let s = self.script(c);
                    st.scripts.push(s);
                }
                _ => {
                    let expected = match st.kind {
                        StateKind::Root => "<state>, <parallel>, <final>, <datamodel>",
                        StateKind::Final => "<onentry>, <onexit>, <donedata>",
                        StateKind::History { .. } => "<transition>",
                        _ => "<state>, <parallel>, <final>, <history>, <transition>, <onentry>, <onexit>, <initial>, <datamodel>",
                    };
                    self.unknown_child(e, c, expected);
                }
            }
        }
    }

    fn state(&mut self, e: &Element) -> StateNode {
        let kind = match e.name.as_str() {
            "parallel" => StateKind::Parallel,
            "final" => StateKind::Final,
            "history" => {
                let deep = match e.get("type") {
                    None | Some("shallow") => false,
                    Some("deep") => true,
                    Some(other) => {
                        let pos = e.attr("type").map_or(e.pos, |a| a.pos);
                        self.error(
                            pos,
                            format!("history type \"{other}\" (expected \"shallow\" or \"deep\")"),
                        );
                        false
                    }
                };
                StateKind::History { deep }
            }
            _ => StateKind::State,
        };
        let allowed: &[&str] = match kind {
            StateKind::State => &["id", "initial"],
            StateKind::History { .. } => &["id", "type"],
            _ => &["id"],
        };
        self.check_attrs(e, allowed);
        let mut st = StateNode::new(kind, e.pos);
        st.id = src(e, "id");
        if kind == StateKind::State {
            st.initial = src(e, "initial");
        }
        if let StateKind::History { .. } = kind {
            for c in &e.children {
                if c.is_scxml() && c.name == "transition" {
                    let t = self.transition(c);
                    st.transitions.push(t);
                } else {
                    self.unknown_child(e, c, "one <transition> (the default history)");
                }
            }
        } else {
            self.state_children(e, &mut st);
        }
        st
    }

    fn transition(&mut self, e: &Element) -> TransitionNode {
        self.check_attrs(e, &["event", "cond", "target", "type"]);
        let internal = match e.get("type") {
            None | Some("external") => false,
            Some("internal") => true,
            Some(other) => {
                let pos = e.attr("type").map_or(e.pos, |a| a.pos);
                self.error(
                    pos,
                    format!("transition type \"{other}\" (expected \"internal\" or \"external\")"),
                );
                false
            }
        };
        TransitionNode {
            pos: e.pos,
            event: src(e, "event"),
            cond: src(e, "cond"),
            target: src(e, "target"),
            internal,
            body: self.block(e),
        }
    }

    fn data(&mut self, e: &Element) -> DataNode {
        self.check_attrs(e, &["id", "expr", "src", "name"]);
        let given = [
            e.attr("expr").is_some(),
            e.attr("src").is_some(),
            !e.text.trim().is_empty() || !e.children.is_empty(),
        ];
        if given.iter().filter(|&&g| g).count() > 1 {
            self.error(
                e.pos,
                "<data> with more than one of expr=, src= and content (expected at most one)"
                    .into(),
            );
        }
        let d = DataNode {
            src: src(e, "src"),
            pos: e.pos,
            id: src(e, "id"),
            name: e.get("name").map(str::to_string),
            expr: src(e, "expr"),
            text: e.text.clone(),
            has_elements: !e.children.is_empty(),
            markup: e.children.iter().map(super::xml::write).collect(),
        };
        if d.id.is_none() && d.name.is_none() {
            self.error(
                e.pos,
                "<data> without \"id\" (expected the variable's id)".into(),
            );
        }
        d
    }

    fn param(&mut self, e: &Element) -> Param {
        self.check_attrs(e, &["name", "expr", "location"]);
        let name = self.required(e, "name").text;
        Param {
            pos: e.pos,
            name,
            expr: src(e, "expr"),
            location: src(e, "location"),
        }
    }

    fn content(&mut self, e: &Element) -> Content {
        self.check_attrs(e, &["expr"]);
        Content {
            pos: e.pos,
            expr: src(e, "expr"),
            text: e.text.clone(),
            markup: e.children.iter().map(super::xml::write).collect(),
        }
    }

    fn block(&mut self, parent: &Element) -> Vec<Exec> {
        let mut out = Vec::new();
        let mut i = 0;
        let children = &parent.children;
        while i < children.len() {
            let c = &children[i];
            i += 1;
            if !c.is_scxml() {
                if c.ns == CONF_NS {
                    self.unknown_child(parent, c, "");
                } else {
                    out.push(Exec::Custom(CustomElement::from_xml(c)));
                }
                continue;
            }
            let ex = match c.name.as_str() {
                "raise" => {
                    self.check_attrs(c, &["event"]);
                    Exec::Raise {
                        pos: c.pos,
                        event: self.required(c, "event"),
                    }
                }
                "send" => Exec::Send(Box::new(self.send(c))),
                "cancel" => {
                    self.check_attrs(c, &["sendid", "sendidexpr"]);
                    let sendid = src(c, "sendid");
                    let sendidexpr = src(c, "sendidexpr");
                    if sendid.is_none() == sendidexpr.is_none() {
                        self.error(
                            c.pos,
                            "<cancel> needs exactly one of sendid= and sendidexpr=".into(),
                        );
                    }
                    Exec::Cancel {
                        pos: c.pos,
                        sendid,
                        sendidexpr,
                    }
                }
                "log" => {
                    self.check_attrs(c, &["label", "expr"]);
                    Exec::Log {
                        pos: c.pos,
                        label: c.get("label").unwrap_or("").to_string(),
                        expr: src(c, "expr"),
                    }
                }
                "assign" => {
                    self.check_attrs(c, &["location", "expr", "type", "attr"]);
                    Exec::Assign {
                        pos: c.pos,
                        location: self.required(c, "location"),
                        expr: src(c, "expr"),
                        kind: src(c, "type"),
                        attr: src(c, "attr"),
                        // Inline XML (W3C SCXML §5.4) is kept as its text: viastack's
                        // datamodel has no DOM; the text can be a document to invoke.
                        text: if c.children.is_empty() {
                            c.text.clone()
                        } else {
                            c.children.iter().map(super::xml::write).collect()
                        },
                    }
                }
                "if" => {
                    self.check_attrs(c, &["cond"]);
                    let mut branches = vec![(Some(self.required(c, "cond")), Vec::new())];
                    // <elseif/> and <else/> are separators inside <if>.
                    let mut inner = Element::new(&c.ns, "if", c.pos);
                    for cc in &c.children {
                        if cc.is_scxml() && (cc.name == "elseif" || cc.name == "else") {
                            let block = self.block(&inner);
                            if let Some(last) = branches.last_mut() {
                                last.1 = block;
                            }
                            inner.children.clear();
                            if cc.name == "elseif" {
                                self.check_attrs(cc, &["cond"]);
                                branches.push((Some(self.required(cc, "cond")), Vec::new()));
                            } else {
                                self.check_attrs(cc, &[]);
                                branches.push((None, Vec::new()));
                            }
                        } else {
                            inner.children.push(cc.clone());
                        }
                    }
                    let block = self.block(&inner);
                    if let Some(last) = branches.last_mut() {
                        last.1 = block;
                    }
                    Exec::If {
                        pos: c.pos,
                        branches,
                    }
                }
                "foreach" => {
                    self.check_attrs(c, &["array", "item", "index"]);
                    Exec::Foreach {
                        pos: c.pos,
                        array: self.required(c, "array"),
                        item: self.required(c, "item"),
                        index: src(c, "index"),
                        body: self.block(c),
                    }
                }
                "script" => self.script(c),
                _ => {
                    self.unknown_child(
                        parent,
                        c,
                        "executable content: <raise>, <send>, <cancel>, <log>, <assign>, <if>, <foreach> or a custom element",
                    );
                    continue;
                }
            };
            out.push(ex);
        }
        out
    }

    fn script(&mut self, c: &Element) -> Exec {
        self.check_attrs(c, &["src"]);
        let src_attr = src(c, "src");
        if src_attr.is_some() && !c.text.trim().is_empty() {
            self.error(
                c.pos,
                "<script> with both src= and inline text (expected one)".into(),
            );
        }
        Exec::Script {
            pos: c.pos,
            text: Src {
                text: c.text.clone(),
                pos: c.pos,
            },
            src: src_attr,
        }
    }

    fn invoke(&mut self, c: &Element) -> InvokeNode {
        self.check_attrs(
            c,
            &[
                "type",
                "typeexpr",
                "src",
                "srcexpr",
                "id",
                "idlocation",
                "namelist",
                "autoforward",
            ],
        );
        let autoforward = match c.get("autoforward") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                let pos = c.attr("autoforward").map_or(c.pos, |a| a.pos);
                self.error(
                    pos,
                    format!("autoforward \"{other}\" (expected \"true\" or \"false\")"),
                );
                false
            }
        };
        let mut inv = InvokeNode {
            pos: c.pos,
            type_: src(c, "type"),
            typeexpr: src(c, "typeexpr"),
            src: src(c, "src"),
            srcexpr: src(c, "srcexpr"),
            id: src(c, "id"),
            idlocation: src(c, "idlocation"),
            namelist: src(c, "namelist"),
            autoforward,
            ..InvokeNode::default()
        };
        for (a, b, what) in [
            (&inv.type_, &inv.typeexpr, "type= and typeexpr="),
            (&inv.src, &inv.srcexpr, "src= and srcexpr="),
            (&inv.id, &inv.idlocation, "id= and idlocation="),
        ] {
            if a.is_some() && b.is_some() {
                let pos = b.as_ref().map_or(c.pos, |b| b.pos);
                self.error(
                    pos,
                    format!("<invoke> with both {what} (expected at most one)"),
                );
            }
        }
        for p in &c.children {
            match p.name.as_str() {
                "param" if p.is_scxml() => {
                    let param = self.param(p);
                    inv.params.push(param);
                }
                "finalize" if p.is_scxml() => {
                    self.check_attrs(p, &[]);
                    inv.finalize = self.block(p);
                }
                "content" if p.is_scxml() => {
                    self.check_attrs(p, &["expr"]);
                    let doc = p
                        .children
                        .iter()
                        .find(|d| d.is_scxml() && d.name == "scxml");
                    inv.content = Some(if let Some(e) = src(p, "expr") {
                        InvokeContent::Expr(e)
                    } else if let Some(d) = doc {
                        match build(self.file, d) {
                            Ok(doc) => InvokeContent::Doc(Box::new(doc)),
                            Err(ds) => {
                                self.diags.extend(ds.0);
                                InvokeContent::Text(String::new())
                            }
                        }
                    } else {
                        InvokeContent::Text(p.text.clone())
                    });
                }
                _ => self.unknown_child(c, p, "<param>, <content> or <finalize>"),
            }
        }
        if inv.content.is_some() && (inv.src.is_some() || inv.srcexpr.is_some()) {
            self.error(
                c.pos,
                "<invoke> with both <content> and src=/srcexpr= (expected one)".into(),
            );
        }
        inv
    }

    fn send(&mut self, c: &Element) -> SendNode {
        self.check_attrs(
            c,
            &[
                "event",
                "eventexpr",
                "target",
                "targetexpr",
                "type",
                "typeexpr",
                "id",
                "idlocation",
                "delay",
                "delayexpr",
                "namelist",
            ],
        );
        let mut s = SendNode {
            pos: c.pos,
            event: src(c, "event"),
            eventexpr: src(c, "eventexpr"),
            target: src(c, "target"),
            targetexpr: src(c, "targetexpr"),
            type_: src(c, "type"),
            typeexpr: src(c, "typeexpr"),
            id: src(c, "id"),
            idlocation: src(c, "idlocation"),
            delay: src(c, "delay"),
            delayexpr: src(c, "delayexpr"),
            namelist: src(c, "namelist"),
            params: Vec::new(),
            content: None,
        };
        for (a, b, what) in [
            (&s.event, &s.eventexpr, "event= and eventexpr="),
            (&s.target, &s.targetexpr, "target= and targetexpr="),
            (&s.type_, &s.typeexpr, "type= and typeexpr="),
            (&s.id, &s.idlocation, "id= and idlocation="),
            (&s.delay, &s.delayexpr, "delay= and delayexpr="),
        ] {
            if a.is_some() && b.is_some() {
                let pos = b.as_ref().map_or(c.pos, |b| b.pos);
                self.error(
                    pos,
                    format!("<send> with both {what} (expected at most one)"),
                );
            }
        }
        for p in &c.children {
            match p.name.as_str() {
                "param" if p.is_scxml() => {
                    let param = self.param(p);
                    s.params.push(param);
                }
                "content" if p.is_scxml() => s.content = Some(self.content(p)),
                _ => self.unknown_child(c, p, "<param> or <content>"),
            }
        }
        s
    }
}
