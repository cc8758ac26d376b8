//! The flat machine: a delivery service whose chart is a plain finite-state machine, compiled
//! one step further than the general chart table (seed 000 §6.3: the XML processing of a
//! generic engine was the prior system's bottleneck; issue 5 "compile to a table").
//!
//! Most delivery services (h2hack, e2eack, duplicate elimination, handshake, selection,
//! synchronization) are written as the seed writes them: atomic states under the root, each
//! transition named by a basic or composite event, executable content made only of the
//! service's actions. For such a chart every (state, event) pair has at most one transition
//! and its whole effect is known at load time: the source's `<onexit>` blocks, the
//! transition's body, the target's `<onentry>` blocks (and, on reaching a top-level `<final>`,
//! its `<onexit>` as the interpreter exits). [`Flat`] stores exactly that — a table indexed by
//! (service event, state) of steps, each a target and its action blocks — so an instance is
//! one state number and an event is one table read.
//!
//! [`Flat::compile`] accepts a chart only when the flat run is indistinguishable from the
//! general engine's ([`chart::Instance`](crate::chart::Instance)); a test drives every shipped
//! service both ways with random traces and compares the actions and states. A chart qualifies
//! when:
//! - every state but the root is an atomic `<state>` or a `<final>` child of the root (no
//!   nesting, `<parallel>` or `<history>`), and the root's initial state is one of them;
//! - every transition names an event (no eventless ones), has no `cond`, and every descriptor names a basic or composite event (or
//!   matches them by prefix or `*`) — none can match `error.*` or `done.*`, which only the
//!   engine raises;
//! - executable content is only the service's actions (no `<raise>`, `<send>`, `<assign>`,
//!   `<log>`, `<if>`, `<foreach>`), none reads a datamodel variable (`$x`), and the document
//!   never reads `_event`.
//!
//! As in the engine, an action that fails ends its block (the rest of the block is skipped;
//! the `error.execution` the engine would raise selects no transition in such a chart).

use crate::chart::compile::descriptor_matches;
use crate::chart::compile::{Chart, Kind, Op, StateInfo};

use super::action::Action;
use super::data::ServiceData;

/// One transition's effect: where it goes and the action blocks it runs, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// Target state (`None`: a targetless transition, the state does not change).
    pub target: Option<u16>,
    /// Whether the target is a top-level `<final>`: the instance ends after the step.
    pub ends: bool,
    /// Action blocks; a failing action ends its block.
    pub blocks: Box<[Box<[Action]>]>,
}

/// A chart compiled to (event × state) → step.
#[derive(Clone, Debug)]
pub(crate) struct Flat {
    states: usize,
    /// Per service event (basic events, then composite ones) × state: step index + 1, 0 = none.
    table: Box<[u16]>,
    steps: Box<[Step]>,
    /// Entering the initial state.
    start: Step,
}

impl Flat {
    /// Compiles `chart` (the chart of the service with `data`) when it qualifies (module doc).
    ///
    /// # Errors
    /// Why the chart does not qualify (the first construct found), for `spec check`.
    pub(crate) fn compile(
        chart: &Chart<Action>,
        data: &ServiceData,
        src: &str,
    ) -> Result<Flat, String> {
        let states = chart.states();
        let n = states.len();
        if n < 2 || n > usize::from(u16::MAX) {
            return Err(format!(
                "{} states (1 to 65,534 are flattened)",
                n.saturating_sub(1)
            ));
        }
        if !chart.scripts.is_empty() {
            return Err("the document has a top-level <script>".into());
        }
        if src.contains("_event") {
            return Err("the document reads `_event`".into());
        }
        for s in &states[1..] {
            let name = &s.id;
            if !(matches!(s.kind, Kind::Atomic | Kind::Final) && s.parent == 0) {
                return Err(format!(
                    "state `{name}` is nested, parallel or a history state"
                ));
            }
            if !s.data.is_empty() || s.donedata.is_some() {
                return Err(format!("state `{name}` has a datamodel or donedata"));
            }
            if !s.invokes.is_empty() {
                return Err(format!("state `{name}` invokes a session"));
            }
        }
        let blocks_ok = |blocks: &[Vec<Op>]| blocks.iter().all(|b| actions_only(chart, b));
        if let Some(s) = states
            .iter()
            .find(|s| !(blocks_ok(&s.onentry) && blocks_ok(&s.onexit)))
        {
            return Err(format!(
                "state `{}`: <onentry>/<onexit> content other than the service's actions (or an action reading a datamodel variable)",
                s.id
            ));
        }
        let names: Vec<&str> = data
            .basic
            .iter()
            .map(|b| b.name.as_str())
            .chain(data.composite.iter().map(|c| c.name.as_str()))
            .collect();
        let own = |s: &StateInfo| {
            &chart.transitions()[s.transitions.start as usize..s.transitions.end as usize]
        };
        for t in states.iter().flat_map(own) {
            let from = chart.state_name(crate::chart::StateId(t.source));
            if t.events.is_empty() {
                return Err(format!("state `{from}` has an eventless transition"));
            }
            if t.cond.is_some() {
                return Err(format!("state `{from}` has a transition with a `cond`"));
            }
            if t.targets.len() > 1 {
                return Err(format!(
                    "state `{from}` has a transition with several targets"
                ));
            }
            if !actions_only(chart, &t.body) {
                return Err(format!("state `{from}`: a transition runs content other than the service's actions (or an action reading a datamodel variable)"));
            }
            let internal = ["error.execution", "error.communication", "done.state.x"];
            if let Some(d) = t.events.iter().find(|d| {
                internal.iter().any(|e| descriptor_matches(d, e))
                    || !names.iter().any(|e| descriptor_matches(d, e))
            }) {
                return Err(format!(
                    "state `{from}`: event descriptor `{d}` can match an event the engine raises, or no service event"
                ));
            }
        }
        // The initial configuration: the root and one of its children.
        let start_state = match chart.initial_entry.as_slice() {
            [(0, _), (s, _)] | [(s, _)] if *s != 0 => *s,
            _ => return Err("the initial configuration is not one top-level state".into()),
        };
        let all_blocks = || {
            let state_blocks = states
                .iter()
                .flat_map(|s| s.onentry.iter().chain(&s.onexit).map(Vec::as_slice));
            let bodies = states.iter().flat_map(own).map(|t| t.body.as_slice());
            state_blocks.chain(bodies).map(|ops| custom(chart, ops))
        };
        let fusable = fusable_drafts(all_blocks());
        let step_to = |source: Option<u32>, target: Option<u32>, body: &[Op]| -> Step {
            let mut blocks: Vec<Box<[Action]>> = Vec::new();
            let mut push = |ops: &[Op]| {
                let actions = fuse(&custom(chart, ops), &fusable);
                if !actions.is_empty() {
                    blocks.push(actions.into());
                }
            };
            if let (Some(s), Some(_)) = (source, target) {
                states[s as usize].onexit.iter().for_each(|b| push(b));
            }
            push(body);
            let mut ends = false;
            if let Some(t) = target {
                let st = &states[t as usize];
                st.onentry.iter().for_each(|b| push(b));
                if st.kind == Kind::Final {
                    ends = true;
                    st.onexit.iter().for_each(|b| push(b));
                }
            }
            Step {
                target: target.map(|t| t as u16),
                ends,
                blocks: blocks.into(),
            }
        };
        let start = step_to(None, Some(start_state), &[]);
        let mut steps = Vec::new();
        let mut table = vec![0u16; names.len() * n];
        for (e, name) in names.iter().enumerate() {
            for s in 1..n {
                let st = &states[s];
                if st.kind == Kind::Final {
                    continue;
                }
                let first = own(st)
                    .iter()
                    .find(|t| t.events.iter().any(|d| descriptor_matches(d, name)));
                if let Some(t) = first {
                    steps.push(step_to(Some(s as u32), t.targets.first().copied(), &t.body));
                    if steps.len() >= usize::from(u16::MAX) {
                        return Err("more than 65,534 (event, state) steps".into());
                    }
                    table[e * n + s] = steps.len() as u16;
                }
            }
        }
        Ok(Flat {
            states: n,
            table: table.into(),
            steps: steps.into(),
            start,
        })
    }

    /// Number of states (the root is 0).
    pub(crate) fn state_count(&self) -> usize {
        self.states
    }

    /// Every (service event, state, step) entry of the table.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (usize, u16, &Step)> + '_ {
        self.table.iter().enumerate().filter_map(move |(i, &t)| {
            let step = self.steps.get(usize::from(t).checked_sub(1)?)?;
            Some((i / self.states, (i % self.states) as u16, step))
        })
    }

    /// The step entering the initial state.
    #[inline]
    pub(crate) fn start(&self) -> &Step {
        &self.start
    }

    /// The step service event `event` (basic index, or basic count + composite index) takes
    /// in `state`, if any.
    #[inline]
    pub(crate) fn step(&self, event: usize, state: u16) -> Option<&Step> {
        let i = *self.table.get(event * self.states + usize::from(state))?;
        self.steps.get(usize::from(i).checked_sub(1)?)
    }
}

/// The custom actions of a block (a qualifying chart has no other content).
fn custom<'c>(chart: &'c Chart<Action>, ops: &[Op]) -> Vec<&'c Action> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Custom(i) => chart.actions().get(*i as usize),
            _ => None,
        })
        .collect()
}

/// A `create`, `set`… , `execute` run of one draft starting at `block[i]`: its length.
fn triple(block: &[&Action], i: usize) -> Option<usize> {
    let Action::Create { draft } = block[i] else {
        return None;
    };
    let d = *draft;
    for (j, a) in block.iter().enumerate().skip(i + 1) {
        match a {
            Action::Set { draft, value, .. } if *draft == d && !value.reads_draft(d) => {}
            Action::Execute { draft, .. } if *draft == d => return Some(j + 1 - i),
            _ => return None,
        }
    }
    None
}

/// Drafts whose every use in the chart is a whole create/set/execute run: nothing can observe
/// them between actions, so each run can become one [`Action::Run`].
fn fusable_drafts<'c>(blocks: impl Iterator<Item = Vec<&'c Action>>) -> Vec<u8> {
    let mut inside: Vec<u8> = Vec::new();
    let mut outside: Vec<u8> = Vec::new();
    for block in blocks {
        let mut i = 0;
        while i < block.len() {
            if let Some(len) = triple(&block, i) {
                if let Action::Create { draft } = block[i] {
                    inside.push(*draft);
                }
                i += len;
                continue;
            }
            outside.extend(block[i].drafts());
            i += 1;
        }
    }
    inside.retain(|d| !outside.contains(d));
    inside
}

/// A block's actions with the runs of `fusable` drafts fused.
fn fuse(block: &[&Action], fusable: &[u8]) -> Vec<Action> {
    let mut out = Vec::with_capacity(block.len());
    let mut i = 0;
    while i < block.len() {
        if let (Some(len), Action::Create { draft }) = (triple(block, i), block[i]) {
            if fusable.contains(draft) {
                let sets = block[i + 1..i + len - 1].iter().filter_map(|a| match a {
                    Action::Set { field, value, .. } => Some((field.clone(), value.clone())),
                    _ => None,
                });
                if let Action::Execute { prim, .. } = block[i + len - 1] {
                    out.push(Action::Run {
                        prim: *prim,
                        draft: None,
                        base: None,
                        sets: sets.collect(),
                    });
                    i += len;
                    continue;
                }
            }
        }
        out.push(block[i].clone());
        i += 1;
    }
    out
}

/// Whether a block holds only custom actions that read no datamodel variable.
fn actions_only(chart: &Chart<Action>, ops: &[Op]) -> bool {
    ops.iter().all(|op| match op {
        Op::Custom(i) => chart
            .actions()
            .get(*i as usize)
            .is_some_and(|a| !a.reads_datamodel()),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::load::Service;
    use super::*;

    const SRC: &str = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml"
           xmlns:action="http://my.custom-actions.domain/action" initial="a">
      <datamodel>
        <data name="service"><ServiceID>4</ServiceID></data>
        <data name="events"><Basic>
          <Event name="x"><Message><MessageType>1</MessageType></Message></Event>
        </Basic></data>
      </datamodel>
      <state id="a">
        <transition event="x" target="b">
          <action:create name="sendControlMessage"/>
          <action:set name="sendControlMessage" field="Message" expr="last(x)"/>
          <action:set name="sendControlMessage" field="Message/MessageType" value="7"/>
          <action:execute name="sendControlMessage"/>
          <action:create name="toApplication"/>
          <action:set name="toApplication" field="Message" expr="last(x)"/>
          <action:execute name="toApplication"/>
          <action:sendControlMessage MessageType="5" DestinationAddress="toApplication.SourceAddress"/>
        </transition>
      </state>
      <final id="b"/>
    </scxml>"#;

    #[test]
    fn create_set_execute_runs_of_unobserved_drafts_become_one_action() {
        let (svc, _) = Service::load("f.scxml", SRC).unwrap();
        let flat = svc.flat.as_ref().unwrap();
        let step = flat.step(0, 1).unwrap();
        assert_eq!(step.target, Some(2));
        assert!(step.ends);
        let block = &step.blocks[0];
        // sendControlMessage's run is fused; toApplication's draft is read by a later action,
        // so its run is kept as written.
        assert!(
            matches!(&block[0], Action::Run { prim: super::super::action::Prim::SendControl, draft: None, base: None, sets } if sets.len() == 2),
            "{block:?}"
        );
        assert!(matches!(block[1], Action::Create { .. }), "{block:?}");
        assert!(matches!(block[2], Action::Set { .. }), "{block:?}");
        assert!(matches!(block[3], Action::Execute { .. }), "{block:?}");
        assert!(matches!(block[4], Action::Run { .. }), "{block:?}");
        assert_eq!(block.len(), 5);
    }
}
