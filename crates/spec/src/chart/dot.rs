//! Graphviz (DOT) rendering of a document.
//!
//! Atomic states are rounded boxes, final states double circles, history states circles
//! (`H`, `H*`); compound and parallel states are clusters (parallel ones dashed) with an
//! invisible anchor node that edges attach to. Each initial state gets an arrow from a
//! point. Transitions are edges labelled `event [cond] / action, action`; a targetless
//! transition is a dotted self-loop. Custom actions show as `prefix:name` plus their `name=`
//! attribute (the seed's `<action:execute name="sendMessage"/>` reads `action:execute sendMessage`).

use std::fmt::Write;

use super::model::{Document, Exec, StateKind, StateNode, TransitionNode};

fn q(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn actions(body: &[Exec], out: &mut Vec<String>) {
    for e in body {
        out.push(match e {
            Exec::Raise { event, .. } => format!("raise {}", event.text),
            Exec::Send(s) => {
                let ev = s
                    .event
                    .as_ref()
                    .or(s.eventexpr.as_ref())
                    .map_or("?", |e| e.text.as_str());
                match s.delay.as_ref().or(s.delayexpr.as_ref()) {
                    Some(d) => format!("send {ev} after {}", d.text),
                    None => format!("send {ev}"),
                }
            }
            Exec::Cancel {
                sendid, sendidexpr, ..
            } => format!(
                "cancel {}",
                sendid
                    .as_ref()
                    .or(sendidexpr.as_ref())
                    .map_or("", |s| s.text.as_str())
            ),
            Exec::Log { label, .. } => format!("log {label}"),
            Exec::Assign { location, .. } => format!("{} := …", location.text),
            Exec::If { branches, .. } => {
                let mut inner = Vec::new();
                for (_, b) in branches {
                    actions(b, &mut inner);
                }
                format!("if {{{}}}", inner.join(", "))
            }
            Exec::Foreach { body, .. } => {
                let mut inner = Vec::new();
                actions(body, &mut inner);
                format!("foreach {{{}}}", inner.join(", "))
            }
            Exec::Script { .. } => "script".into(),
            Exec::Custom(c) => {
                let mut s = match &c.prefix {
                    Some(p) => format!("{p}:{}", c.name),
                    None => c.name.clone(),
                };
                if let Some(n) = c.attr("name") {
                    s.push(' ');
                    s.push_str(n);
                }
                s
            }
        });
    }
}

struct Dot {
    out: String,
    anon: usize,
}

impl Dot {
    fn node_id(&mut self, st: &StateNode) -> String {
        match &st.id {
            Some(id) => id.text.clone(),
            None => {
                self.anon += 1;
                format!("#anon{}", self.anon)
            }
        }
    }

    fn label(t: &TransitionNode) -> String {
        let mut l = t.event.as_ref().map_or(String::new(), |e| e.text.clone());
        if let Some(c) = &t.cond {
            if !l.is_empty() {
                l.push(' ');
            }
            let _ = write!(l, "[{}]", c.text);
        }
        let mut acts = Vec::new();
        actions(&t.body, &mut acts);
        if !acts.is_empty() {
            l.push_str(" / ");
            l.push_str(&acts.join(", "));
        }
        l
    }

    fn state(&mut self, st: &StateNode, depth: usize, edges: &mut Vec<String>) {
        let pad = "  ".repeat(depth);
        let id = self.node_id(st);
        let composite = matches!(st.kind, StateKind::State | StateKind::Parallel)
            && st
                .children
                .iter()
                .any(|c| !matches!(c.kind, StateKind::History { .. }));
        if composite {
            let _ = writeln!(self.out, "{pad}subgraph {} {{", q(&format!("cluster_{id}")));
            let _ = writeln!(self.out, "{pad}  label={};", q(&id));
            if st.kind == StateKind::Parallel {
                let _ = writeln!(self.out, "{pad}  style=dashed;");
            }
            let _ = writeln!(
                self.out,
                "{pad}  {} [shape=point, style=invis, width=0];",
                q(&id)
            );
            self.children(st, &id, depth + 1, edges);
            let _ = writeln!(self.out, "{pad}}}");
        } else {
            let attrs = match st.kind {
                StateKind::Final => "shape=doublecircle".to_string(),
                StateKind::History { deep } => {
                    format!("shape=circle, label={}", q(if deep { "H*" } else { "H" }))
                }
                _ => "shape=box, style=rounded".to_string(),
            };
            let _ = writeln!(self.out, "{pad}{} [{attrs}];", q(&id));
        }
        for t in &st.transitions {
            let label = q(&Self::label(t));
            match &t.target {
                Some(targets) => {
                    for tg in targets.text.split_whitespace() {
                        edges.push(format!("{} -> {} [label={label}];", q(&id), q(tg)));
                    }
                }
                None => edges.push(format!(
                    "{} -> {} [label={label}, style=dotted];",
                    q(&id),
                    q(&id)
                )),
            }
        }
    }

    fn children(&mut self, st: &StateNode, id: &str, depth: usize, edges: &mut Vec<String>) {
        let pad = "  ".repeat(depth);
        let initial: Vec<String> = if let Some(t) = &st.initial_transition {
            t.target
                .iter()
                .flat_map(|s| s.text.split_whitespace().map(str::to_string))
                .collect()
        } else if let Some(i) = &st.initial {
            i.text.split_whitespace().map(str::to_string).collect()
        } else if st.kind == StateKind::Parallel {
            Vec::new()
        } else {
            st.children
                .iter()
                .find(|c| !matches!(c.kind, StateKind::History { .. }))
                .and_then(|c| c.id.as_ref().map(|i| vec![i.text.clone()]))
                .unwrap_or_default()
        };
        if !initial.is_empty() {
            let init = format!("__initial_{id}");
            let _ = writeln!(self.out, "{pad}{} [shape=point];", q(&init));
            for i in initial {
                edges.push(format!("{} -> {};", q(&init), q(&i)));
            }
        }
        for c in &st.children {
            self.state(c, depth, edges);
        }
    }
}

/// Renders `doc` as a Graphviz digraph.
pub fn to_dot(doc: &Document) -> String {
    let mut d = Dot {
        out: String::new(),
        anon: 0,
    };
    let name = doc.name.clone().unwrap_or_else(|| "scxml".into());
    let _ = writeln!(d.out, "digraph {} {{", q(&name));
    let _ = writeln!(d.out, "  compound=true;");
    let _ = writeln!(d.out, "  node [fontname=\"Helvetica\"];");
    let _ = writeln!(d.out, "  edge [fontname=\"Helvetica\", fontsize=10];");
    let mut edges = Vec::new();
    d.children(&doc.root, "scxml", 1, &mut edges);
    for e in edges {
        let _ = writeln!(d.out, "  {e}");
    }
    d.out.push_str("}\n");
    d.out
}
