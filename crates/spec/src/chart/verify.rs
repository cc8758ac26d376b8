//! Verification: design mistakes in a valid chart.
//!
//! | rule | severity |
//! | --- | --- |
//! | a state that can never be entered (unreachable) | warning |
//! | a reachable atomic state from which no top-level final state and no terminating custom action can be reached | warning |
//! | a chart with neither a top-level final state nor a terminating action | warning |
//! | an event raised or sent to the machine itself that no transition handles | warning |
//! | a delayed `<send>` (a timer) whose event no transition handles | warning |
//! | a transition never taken: an earlier unconditional transition of the same state matches every event it does | warning |
//! | a transition naming an event that is not declared, when the [`Extension`] declares the environment's events | error |
//!
//! Reachability ignores conditions (any transition may fire). The layer above adds its own
//! rules (basic events that can never match, timers set by its actions but never handled)
//! through [`Extension::verify`], given a [`View`] of what the chart handles and reaches.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::compile::{descriptor_matches, Kind};
use super::model::{CustomElement, Document, Exec, StateNode};
use super::{Chart, Diagnostic, Extension, Pos};

/// What the verifier found out about a chart, for an [`Extension`]'s own rules.
pub struct View<'a> {
    /// The document.
    pub doc: &'a Document,
    descriptors: Vec<Arc<str>>,
    states: Vec<(Arc<str>, bool)>,
}

impl View<'_> {
    /// Whether some transition's event descriptor matches event `name`.
    pub fn handled(&self, name: &str) -> bool {
        self.descriptors.iter().any(|d| descriptor_matches(d, name))
    }

    /// Whether the state with id `id` can be entered (`None` if there is no such state).
    pub fn reachable(&self, id: &str) -> Option<bool> {
        self.states
            .iter()
            .find(|(n, _)| &**n == id)
            .map(|(_, r)| *r)
    }

    /// Every transition event descriptor (normalised), in document order.
    pub fn descriptors(&self) -> &[Arc<str>] {
        &self.descriptors
    }

    /// The file name.
    pub fn file(&self) -> &str {
        &self.doc.file
    }
}

fn preorder<'d>(st: &'d StateNode, out: &mut Vec<&'d StateNode>) {
    out.push(st);
    for c in &st.children {
        preorder(c, out);
    }
}

fn customs<'d>(b: &'d [Exec], out: &mut Vec<&'d CustomElement>) {
    for e in b {
        match e {
            Exec::Custom(c) => out.push(c),
            Exec::If { branches, .. } => {
                for (_, body) in branches {
                    customs(body, out);
                }
            }
            Exec::Foreach { body, .. } => customs(body, out),
            _ => {}
        }
    }
}

/// An event the chart produces for itself: (name, position, is a timer).
fn produced(b: &[Exec], out: &mut Vec<(String, Pos, bool)>) {
    for e in b {
        match e {
            Exec::Raise { event, pos } => out.push((event.text.trim().to_string(), *pos, false)),
            Exec::Send(s) => {
                let to_self = match &s.target {
                    None => s.targetexpr.is_none(),
                    Some(t) => t.text == "#_internal",
                };
                if let (Some(ev), true) = (&s.event, to_self) {
                    let timer = s.delay.is_some() || s.delayexpr.is_some();
                    out.push((ev.text.trim().to_string(), s.pos, timer));
                }
            }
            Exec::If { branches, .. } => {
                for (_, body) in branches {
                    produced(body, out);
                }
            }
            Exec::Foreach { body, .. } => produced(body, out),
            _ => {}
        }
    }
}

fn all_blocks(st: &StateNode) -> impl Iterator<Item = &[Exec]> {
    st.onentry
        .iter()
        .chain(&st.onexit)
        .map(Vec::as_slice)
        .chain(st.transitions.iter().map(|t| t.body.as_slice()))
        .chain(st.initial_transition.iter().map(|t| t.body.as_slice()))
}

/// Runs the verification rules on a compiled chart.
pub fn verify<A, E: Extension<Action = A>>(
    doc: &Document,
    chart: &Chart<A>,
    ext: &E,
) -> Vec<Diagnostic> {
    let file = doc.file.as_str();
    let mut out = Vec::new();
    let mut nodes = Vec::new();
    preorder(&doc.root, &mut nodes);
    let n = chart.states.len();
    if nodes.len() != n {
        return out;
    }
    let descriptors: Vec<Arc<str>> = chart
        .trans
        .iter()
        .flat_map(|t| t.events.iter().cloned())
        .collect();
    let handled = |name: &str| descriptors.iter().any(|d| descriptor_matches(d, name));

    // --- reachability ---
    let mut reach = vec![false; n];
    let mut default_done = vec![false; n];
    let mut work: Vec<(u32, bool)> = vec![(0, true)];
    while let Some((s, default)) = work.pop() {
        let su = s as usize;
        let first = !reach[su];
        reach[su] = true;
        let st = &chart.states[su];
        if first {
            for t in st.transitions.clone() {
                for &x in &chart.trans[t as usize].targets {
                    work.push((x, true));
                    let mut a = chart.states[x as usize].parent;
                    while a != 0 && !reach[a as usize] {
                        work.push((a, false));
                        a = chart.states[a as usize].parent;
                    }
                }
            }
            if st.parent != s && chart.states[st.parent as usize].kind == Kind::Parallel {
                for &c in &chart.states[st.parent as usize].children {
                    work.push((c, true));
                }
            }
        }
        if default && !default_done[su] {
            default_done[su] = true;
            match st.kind {
                Kind::Compound | Kind::History { .. } => {
                    if let Some(t) = st.initial {
                        for &x in &chart.trans[t as usize].targets {
                            work.push((x, true));
                            let mut a = chart.states[x as usize].parent;
                            while a != s && a != 0 {
                                work.push((a, false));
                                a = chart.states[a as usize].parent;
                            }
                        }
                    }
                }
                Kind::Parallel => {
                    for &c in &st.children {
                        work.push((c, true));
                    }
                }
                _ => {}
            }
        }
    }
    for (i, st) in chart.states.iter().enumerate() {
        if !reach[i] && !matches!(st.kind, Kind::History { .. }) {
            out.push(Diagnostic::warning(
                file,
                st.pos,
                format!(
                    "state \"{}\" is unreachable (no transition or initial state leads to it)",
                    st.id
                ),
            ));
        }
    }

    // --- a path to the end ---
    let terminates = |b: &[Exec]| {
        let mut c = Vec::new();
        customs(b, &mut c);
        c.iter().any(|el| ext.terminates(el))
    };
    let mut ends = vec![false; n];
    let mut any_end = false;
    for (i, st) in chart.states.iter().enumerate() {
        let node = nodes[i];
        let term = node.onentry.iter().any(|b| terminates(b))
            || node.transitions.iter().any(|t| terminates(&t.body));
        if (st.kind == Kind::Final && st.parent == 0) || term {
            ends[i] = true;
            any_end = true;
        }
    }
    if !any_end {
        out.push(Diagnostic::warning(
            file,
            chart.states[0].pos,
            "the chart has no top-level <final> state and no terminating action: instances never end",
        ));
    } else {
        // Backwards from the ends, once per state: a state can end if it is an end, if a
        // descendant can (for compound and parallel states), or if a transition of it or of an
        // ancestor leads to a state that can.
        // Only the states' own transitions: initial and history-default transitions are not
        // taken from their source's descendants.
        let mut incoming: Vec<Vec<u32>> = vec![Vec::new(); n];
        for st in &chart.states {
            for t in st.transitions.clone() {
                let t = &chart.trans[t as usize];
                for &x in &t.targets {
                    incoming[x as usize].push(t.source);
                }
            }
        }
        let mut work: Vec<u32> = (0..n).filter(|&i| ends[i]).map(|i| i as u32).collect();
        while let Some(s) = work.pop() {
            let st = &chart.states[s as usize];
            if s != 0
                && matches!(
                    chart.states[st.parent as usize].kind,
                    Kind::Compound | Kind::Parallel
                )
            {
                let p = st.parent as usize;
                if !ends[p] {
                    ends[p] = true;
                    work.push(st.parent);
                }
            }
            for &src in &incoming[s as usize] {
                for d in src..chart.states[src as usize].desc_end {
                    if !ends[d as usize] {
                        ends[d as usize] = true;
                        work.push(d);
                    }
                }
            }
        }
        for (i, st) in chart.states.iter().enumerate() {
            if reach[i] && !ends[i] && matches!(st.kind, Kind::Atomic) {
                out.push(Diagnostic::warning(
                    file,
                    st.pos,
                    format!(
                        "no path from state \"{}\" to a final state or a terminating action",
                        st.id
                    ),
                ));
            }
        }
    }

    // --- events handled nowhere ---
    let mut prod = Vec::new();
    for node in &nodes {
        for b in all_blocks(node) {
            produced(b, &mut prod);
        }
    }
    let mut extra: Vec<String> = Vec::new();
    for node in &nodes {
        for b in all_blocks(node) {
            let mut c = Vec::new();
            customs(b, &mut c);
            for el in c {
                extra.extend(ext.action_events(el));
            }
        }
    }
    let mut reported = BTreeSet::new();
    for (name, pos, timer) in &prod {
        if !handled(name) && reported.insert(name.clone()) {
            let what = if *timer { "timer event" } else { "event" };
            out.push(Diagnostic::warning(
                file,
                *pos,
                format!("{what} \"{name}\" is sent to the machine but no transition handles it"),
            ));
        }
    }

    // --- undefined events (when the environment's events are declared) ---
    if let Some(declared) = ext.external_events() {
        let mut known: Vec<String> = declared.clone();
        known.extend(prod.iter().map(|(n, _, _)| n.clone()));
        known.extend(extra);
        for t in &chart.trans {
            for d in &t.events {
                if &**d == "*"
                    || d.starts_with("done.")
                    || d.starts_with("error.")
                    || &**d == "done"
                    || &**d == "error"
                {
                    continue;
                }
                if !known.iter().any(|k| descriptor_matches(d, k)) {
                    out.push(Diagnostic::error(
                        file,
                        t.pos,
                        format!(
                            "undefined event \"{d}\" (expected one of the declared events: {})",
                            declared.join(", ")
                        ),
                    ));
                }
            }
        }
    }

    // --- shadowed transitions ---
    for st in &chart.states {
        let range: Vec<u32> = st.transitions.clone().collect();
        for (j, &tj) in range.iter().enumerate() {
            let b = &chart.trans[tj as usize];
            for &ti in &range[..j] {
                let a = &chart.trans[ti as usize];
                if a.cond.is_some() {
                    continue;
                }
                let covered = if b.events.is_empty() {
                    a.events.is_empty()
                } else {
                    !a.events.is_empty()
                        && b.events.iter().all(|d2| {
                            a.events.iter().any(|d1| {
                                &**d1 == "*" || (&**d2 != "*" && descriptor_matches(d1, d2))
                            })
                        })
                };
                if covered {
                    out.push(Diagnostic::warning(
                        file,
                        b.pos,
                        format!(
                            "transition is never taken: the unconditional transition at {} matches every event it does",
                            a.pos
                        ),
                    ));
                    break;
                }
            }
        }
    }

    let view = View {
        doc,
        descriptors,
        states: chart
            .states
            .iter()
            .enumerate()
            .filter(|(_, s)| s.named)
            .map(|(i, s)| (s.id.clone(), reach[i]))
            .collect(),
    };
    ext.verify(&view, &mut out);
    out
}
