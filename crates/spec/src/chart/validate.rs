//! Validation: the document's references and expressions are consistent.
//!
//! Errors (each with `file:line:col` and what was expected):
//! - duplicate state id;
//! - a transition or `initial` naming a state that does not exist ("unknown target");
//! - an `initial` state that is not a descendant of its state ("missing initial state");
//! - a history state with more than one default transition, or whose default target is not
//!   a descendant of its parent;
//! - a `<data>` id declared twice;
//! - an expression or location that does not parse (see [`expr`]), an unknown
//!   state in `In()`;
//! - a delay that does not parse.
//!
//! Expressions are parsed again by the compiler (which keeps the result); here they are only
//! checked, so `parse` reports every error at once.

use std::collections::HashMap;

use super::expr::{self, Names};
use super::model::{Document, Exec, Src, StateKind, StateNode, TransitionNode};
use super::{Diagnostic, Pos};

struct V<'d> {
    file: &'d str,
    ids: HashMap<&'d str, (Pos, u32, u32)>,
    out: Vec<Diagnostic>,
    vars: expr::AnyNames,
    known: Option<String>,
    /// ECMAScript or XPath: expressions are checked when they run (a syntax error is
    /// `error.execution`, W3C SCXML §B.2).
    host: bool,
}

struct StateNames<'a> {
    ids: &'a HashMap<&'a str, (Pos, u32, u32)>,
    vars: &'a mut expr::AnyNames,
}

impl Names for StateNames<'_> {
    fn var(&mut self, name: &str) -> u32 {
        self.vars.var(name)
    }
    fn state(&self, id: &str) -> Option<u32> {
        self.ids.get(id).map(|(_, i, _)| *i)
    }
}

/// Checks `doc`; returns errors (and warnings) found.
pub fn validate(doc: &Document) -> Vec<Diagnostic> {
    let mut v = V {
        file: &doc.file,
        ids: HashMap::new(),
        out: Vec::new(),
        vars: expr::AnyNames::default(),
        known: None,
        host: doc.datamodel.is_host(),
    };
    let mut next = 0;
    v.collect_ids(&doc.root, &mut next);
    let mut data_ids: HashMap<String, Pos> = HashMap::new();
    v.check_state(&doc.root, &mut data_ids);
    v.out
}

impl<'d> V<'d> {
    fn error(&mut self, pos: Pos, msg: String) {
        self.out.push(Diagnostic::error(self.file, pos, msg));
    }

    fn collect_ids(&mut self, st: &'d StateNode, next: &mut u32) {
        let me = *next;
        *next += 1;
        for c in &st.children {
            self.collect_ids(c, next);
        }
        let end = *next;
        if let Some(id) = &st.id {
            if let Some((first, _, _)) = self.ids.get(id.text.as_str()) {
                let first = *first;
                self.error(
                    id.pos,
                    format!(
                        "duplicate state id \"{}\" (first declared at {first}; expected unique ids)",
                        id.text
                    ),
                );
            } else if id.text.is_empty() {
                self.error(id.pos, "empty state id (expected a name)".into());
            } else {
                self.ids.insert(&id.text, (id.pos, me, end));
            }
        }
    }

    /// The first state ids in order, for "expected" hints (computed once).
    fn known_ids(&mut self) -> String {
        if self.known.is_none() {
            let mut k: Vec<&str> = self.ids.keys().copied().collect();
            k.sort_unstable();
            let more = k.len() > 12;
            k.truncate(12);
            let mut hint = k.join(", ");
            if more {
                hint.push_str(", …");
            }
            self.known = Some(hint);
        }
        self.known.clone().unwrap_or_default()
    }

    /// Index and descendant end of a state, looked up again by walking (ids map holds it).
    fn range_of(&self, id: &str) -> Option<(u32, u32)> {
        self.ids.get(id).map(|(_, i, e)| (*i, *e))
    }

    fn check_targets(&mut self, src: &Src, what: &str) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut col = 0;
        for t in src.text.split(' ') {
            if !t.trim().is_empty() {
                match self.range_of(t.trim()) {
                    Some(r) => out.push(r),
                    None => {
                        let known = self.known_ids();
                        self.error(
                            src.pos.right(col),
                            format!("unknown {what} \"{t}\" (expected the id of a state: {known})"),
                        );
                    }
                }
            }
            col += t.chars().count() + 1;
        }
        if src.text.trim().is_empty() {
            self.error(src.pos, format!("empty {what} (expected state ids)"));
        }
        out
    }

    fn check_expr(&mut self, src: &Src) {
        if self.host {
            return;
        }
        let mut names = StateNames {
            ids: &self.ids,
            vars: &mut self.vars,
        };
        if let Err(e) = expr::parse(&src.text, &mut names) {
            let pos = src.pos.right(e.offset);
            self.error(
                pos,
                format!("bad expression \"{}\": {}", src.text, e.message),
            );
        }
    }

    fn check_location(&mut self, src: &Src) {
        if self.host {
            return;
        }
        let mut names = StateNames {
            ids: &self.ids,
            vars: &mut self.vars,
        };
        if let Err(e) = expr::parse_location(&src.text, &mut names) {
            let pos = src.pos.right(e.offset);
            self.error(pos, format!("bad location \"{}\": {}", src.text, e.message));
        }
    }

    fn check_state(&mut self, st: &StateNode, data_ids: &mut HashMap<String, Pos>) {
        let me = st.id.as_ref().and_then(|id| self.range_of(&id.text));
        for d in &st.data {
            if let Some(id) = &d.id {
                if let Some(first) = data_ids.get(&id.text) {
                    let first = *first;
                    self.error(
                        id.pos,
                        format!(
                            "duplicate data id \"{}\" (first declared at {first})",
                            id.text
                        ),
                    );
                } else {
                    data_ids.insert(id.text.clone(), id.pos);
                }
            }
            if let Some(e) = &d.expr {
                self.check_expr(e);
            }
        }
        if let Some(init) = &st.initial {
            let targets = self.check_targets(init, "initial state");
            if let (Some((lo, hi)), StateKind::State) = (me, st.kind) {
                for (t, _) in targets {
                    if !(t > lo && t < hi) {
                        self.error(
                            init.pos,
                            format!(
                                "initial state \"{}\" is not a descendant of \"{}\" (expected one of its child states)",
                                init.text,
                                st.id_str()
                            ),
                        );
                    }
                }
            }
        }
        if let Some(t) = &st.initial_transition {
            match &t.target {
                None => self.error(
                    t.pos,
                    "<initial> transition without target (expected target=)".into(),
                ),
                Some(target) => {
                    if let Some((lo, hi)) = me {
                        let targets = self.check_targets(target, "initial state");
                        if targets.iter().any(|&(t, _)| !(t > lo && t < hi)) {
                            self.error(
                                target.pos,
                                format!(
                                    "initial state \"{}\" is not a descendant of \"{}\" (expected one of its child states)",
                                    target.text,
                                    st.id_str()
                                ),
                            );
                        }
                    }
                }
            }
            if t.event.is_some() || t.cond.is_some() {
                self.error(
                    t.pos,
                    "<initial> transition with event= or cond= (expected only target= and content)"
                        .into(),
                );
            }
            self.check_block(&t.body);
        }
        if let StateKind::History { .. } = st.kind {
            if st.transitions.len() > 1 {
                self.error(
                    st.pos,
                    "history state with more than one transition (expected at most one default)"
                        .into(),
                );
            }
        }
        if st.kind == StateKind::Root && st.children.is_empty() {
            self.error(
                st.pos,
                "<scxml> without states (expected at least one <state>, <parallel> or <final>)"
                    .into(),
            );
        }
        for b in st.onentry.iter().chain(&st.onexit) {
            self.check_block(b);
        }
        for t in &st.transitions {
            self.check_transition(t);
        }
        if let Some(dd) = &st.donedata {
            if let Some(c) = dd.content.as_ref().and_then(|c| c.expr.as_ref()) {
                self.check_expr(c);
            }
            for p in &dd.params {
                for e in p.expr.iter().chain(&p.location) {
                    self.check_expr(e);
                }
            }
        }
        for c in &st.children {
            self.check_state(c, data_ids);
        }
    }

    fn check_transition(&mut self, t: &TransitionNode) {
        if let Some(target) = &t.target {
            self.check_targets(target, "target");
        }
        if let Some(e) = &t.event {
            if e.text.trim().is_empty() {
                self.error(e.pos, "empty event= (expected event descriptors)".into());
            }
            let mut seen: Vec<&str> = Vec::new();
            for d in e.text.split_whitespace() {
                if seen.contains(&d) {
                    self.out.push(Diagnostic::warning(
                        self.file,
                        e.pos,
                        format!("event descriptor \"{d}\" listed twice in one transition"),
                    ));
                }
                seen.push(d);
                if d.contains("..") || (d.starts_with('.') && d != ".*") {
                    self.error(
                        e.pos,
                        format!("bad event descriptor \"{d}\" (expected dot-separated tokens)"),
                    );
                }
            }
        }
        if let Some(c) = &t.cond {
            self.check_expr(c);
        }
        self.check_block(&t.body);
    }

    fn check_block(&mut self, b: &[Exec]) {
        for e in b {
            match e {
                Exec::Raise { event, .. } => {
                    if event.text.trim().is_empty() || event.text.contains(char::is_whitespace) {
                        self.error(
                            event.pos,
                            format!("bad event name \"{}\" (expected one name)", event.text),
                        );
                    }
                }
                Exec::Send(s) => {
                    for e in [&s.eventexpr, &s.targetexpr, &s.typeexpr, &s.delayexpr]
                        .into_iter()
                        .flatten()
                    {
                        self.check_expr(e);
                    }
                    if let Some(l) = &s.idlocation {
                        self.check_location(l);
                    }
                    if s.event.is_none() && s.eventexpr.is_none() {
                        self.error(
                            s.pos,
                            "<send> without event= or eventexpr= (expected an event name)".into(),
                        );
                    }
                    if let Some(d) = &s.delay {
                        if super::compile::parse_delay(&d.text).is_none() {
                            self.error(
                                d.pos,
                                format!(
                                    "bad delay \"{}\" (expected e.g. 1s, 1.5s or 200ms)",
                                    d.text
                                ),
                            );
                        }
                    }
                    for p in &s.params {
                        for e in p.expr.iter().chain(&p.location) {
                            self.check_expr(e);
                        }
                    }
                    if let Some(c) = s.content.as_ref().and_then(|c| c.expr.as_ref()) {
                        self.check_expr(c);
                    }
                }
                Exec::Cancel { sendidexpr, .. } => {
                    if let Some(e) = sendidexpr {
                        self.check_expr(e);
                    }
                }
                Exec::Log { expr, .. } => {
                    if let Some(e) = expr {
                        self.check_expr(e);
                    }
                }
                Exec::Assign { location, expr, .. } => {
                    self.check_location(location);
                    if let Some(e) = expr {
                        self.check_expr(e);
                    }
                }
                Exec::If { branches, .. } => {
                    for (c, body) in branches {
                        if let Some(c) = c {
                            self.check_expr(c);
                        }
                        self.check_block(body);
                    }
                }
                Exec::Foreach {
                    array,
                    item,
                    index,
                    body,
                    ..
                } => {
                    self.check_expr(array);
                    self.check_location(item);
                    if let Some(i) = index {
                        self.check_location(i);
                    }
                    self.check_block(body);
                }
                Exec::Script { .. } | Exec::Custom(_) => {}
            }
        }
    }
}
