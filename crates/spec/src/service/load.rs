//! A service compiled from its SCXML specification (seed 000 §4.2.3.3, §5.1.3.1 — the seed's
//! `ExecSpec`): the service data, the basic-event matcher, the composite events' logic
//! program, the history layout and the compiled chart with its actions. Immutable and shared
//! by every instance of the service (§4.3.3, Figure 4.10b).
//!
//! [`Service::load`] runs the whole pipeline: the service data ([`data`](super::data)), the
//! composite expressions ([`logic`](super::logic)), the chart (parse, validate, compile with
//! the action vocabulary as its [`Extension`]) and the service-level verification:
//! - warning: a basic event that can never match (contradicting filters);
//! - warning: a timer armed by `setTimer` that no basic `<Timer>` event handles;
//! - warning: a basic or composite event that no transition names and no composite uses.

use std::collections::BTreeSet;

use crate::chart::compile::descriptor_matches;
use crate::chart::{self, Chart, CustomElement, Extension, StateId, Symbol};

use super::action::{Action, Compiler};
use super::basic::Matcher;
use super::data::{BasicKind, ServiceData};
use super::diag::{error, Diagnostic, Diagnostics, Pos, Severity};
use super::flat::Flat;
use super::history::Layout;
use super::logic;

/// The action vocabulary as the chart's extension.
struct Ext<'a> {
    data: &'a ServiceData,
    compiler: Compiler<'a>,
}

impl Extension for Ext<'_> {
    type Action = Action;

    fn compile_action(&self, el: &CustomElement) -> Result<Action, String> {
        self.compiler.compile(&el.name, &el.attrs)
    }

    fn action_events(&self, el: &CustomElement) -> Vec<String> {
        if el.name != "setTimer" {
            return Vec::new();
        }
        let id: Option<u32> = el
            .attr("id")
            .or_else(|| el.attr("TimerIdentifier"))
            .and_then(|v| v.trim().parse().ok());
        self.data
            .basic
            .iter()
            .filter(|b| matches!(b.kind, BasicKind::Timer(t) if t.is_none() || t == id))
            .map(|b| b.name.clone())
            .chain(self.data.composite.iter().map(|c| c.name.clone()))
            .collect()
    }

    fn terminates(&self, el: &CustomElement) -> bool {
        el.name == "terminate" || (el.name == "execute" && el.attr("name") == Some("terminate"))
    }

    fn external_events(&self) -> Option<Vec<String>> {
        Some(
            self.data
                .basic
                .iter()
                .map(|b| b.name.clone())
                .chain(self.data.composite.iter().map(|c| c.name.clone()))
                .collect(),
        )
    }
}

/// A compiled service.
#[derive(Debug)]
pub struct Service {
    /// The seed's service data.
    pub data: ServiceData,
    /// The compiled state chart.
    pub chart: Chart<Action>,
    pub(crate) matcher: Matcher,
    pub(crate) logic: logic::Program,
    pub(crate) layout: Layout,
    pub(crate) drafts: usize,
    pub(crate) basic_sym: Vec<Option<Symbol>>,
    pub(crate) composite_sym: Vec<Option<Symbol>>,
    /// Per basic event: the composite events it is a constituent of.
    pub(crate) comp_by_basic: Vec<Vec<u16>>,
    /// Per symbol: the states with a transition whose descriptor matches it. An event none of
    /// whose handlers is active is not given to the chart (it would select no transition).
    pub(crate) handlers: Vec<Box<[StateId]>>,
    /// The chart reads `_event.data`: events carry the message's attributes.
    pub(crate) event_data: bool,
    /// The chart as a flat machine, when it is one ([`flat`](super::flat)).
    pub(crate) flat: Option<Flat>,
    /// Why the chart runs on the general engine (`None` on the flat machine).
    fallback: Option<String>,
}

impl Service {
    /// Reads, validates, verifies and compiles a service specification.
    ///
    /// # Errors
    /// Every error found (service data, expressions, chart, actions), with `file:line:col`.
    /// `Ok` carries the warnings.
    pub fn load(file: &str, src: &str) -> Result<(Service, Vec<Diagnostic>), Diagnostics> {
        let data = ServiceData::read(file, src)?;
        let mut errors = Vec::new();
        let program = match logic::compile(&data) {
            Ok(p) => Some(p),
            Err(es) => {
                for (ci, e) in es {
                    let c = &data.composite[ci];
                    if c.xquery.is_some() {
                        // The offset is into the translation, not the XQuery: point at the
                        // query and show the translation.
                        errors.push(error(
                            file,
                            c.expr_pos,
                            format!(
                                "composite event `{}`: in the translation of its XQuery, `{}`: {}",
                                c.name, c.expr, e.message
                            ),
                        ));
                        continue;
                    }
                    let pos = logic::offset_pos(&c.expr, c.expr_pos, e.offset);
                    errors.push(error(
                        file,
                        pos,
                        format!("composite event `{}`: {}", c.name, e.message),
                    ));
                }
                None
            }
        };
        let doc = match chart::parse(file, src) {
            Ok(d) => Some(d),
            Err(ds) => {
                errors.extend(ds.0);
                None
            }
        };
        let (Some(program), Some(doc)) = (program, doc) else {
            return Err(Diagnostics(errors));
        };
        // `foreach` selectors of the actions compile into the same program.
        let program = std::cell::RefCell::new(program);
        let ext = Ext {
            data: &data,
            compiler: Compiler::with_logic(&data, &program),
        };
        let (chart, mut warnings) = match Chart::compile(&doc, &ext) {
            Ok(x) => x,
            Err(ds) => {
                errors.extend(ds.0);
                return Err(Diagnostics(errors));
            }
        };
        if !errors.is_empty() {
            return Err(Diagnostics(errors));
        }
        let timers_set = ext.compiler.timers_set();
        let (layout, drafts) = ext.compiler.finish();
        let program = program.into_inner();
        let matcher = Matcher::new(&data);
        warnings.extend(verify(file, &data, &matcher, &chart, &timers_set, src));
        let basic_sym = data.basic.iter().map(|b| chart.symbol(&b.name)).collect();
        let composite_sym = data
            .composite
            .iter()
            .map(|c| chart.symbol(&c.name))
            .collect();
        let mut comp_by_basic = vec![Vec::new(); data.basic.len()];
        for (ci, c) in data.composite.iter().enumerate() {
            for &b in &c.constituents {
                comp_by_basic[b].push(ci as u16);
            }
        }
        let handlers = chart
            .symbols()
            .map(|(_, name)| {
                let mut states: Vec<StateId> = chart
                    .transitions()
                    .iter()
                    .filter(|t| t.events.iter().any(|d| descriptor_matches(d, name)))
                    .map(|t| StateId(t.source))
                    .collect();
                states.dedup();
                states.into_boxed_slice()
            })
            .collect();
        let (flat, fallback) = match Flat::compile(&chart, &data, src) {
            Ok(mut f) => {
                f.plan(
                    data.basic.len(),
                    |e| layout.slot(e),
                    |e| program.listens(e),
                    |e| program.direct_keyed(e),
                    &comp_by_basic,
                    &matcher,
                );
                (Some(f), None)
            }
            Err(why) => (None, Some(why)),
        };
        let svc = Service {
            flat,
            fallback,
            data,
            chart,
            matcher,
            logic: program,
            layout,
            drafts,
            basic_sym,
            composite_sym,
            comp_by_basic,
            handlers,
            event_data: src.contains("_event.data"),
        };
        Ok((svc, warnings))
    }

    /// Most microsteps one event may take in one instance; more stops the instance (a
    /// transition loop) and the store reports it.
    pub fn step_limit(&self) -> u32 {
        self.chart.step_limit()
    }

    /// Sets the per-event step limit (before sharing the service with a store).
    pub fn set_step_limit(&mut self, steps: u32) {
        self.chart.set_step_limit(steps.max(1));
    }

    /// Whether instances run on the flat machine ([`flat`](super::flat)) rather than the
    /// general chart engine.
    pub fn is_flat(&self) -> bool {
        self.flat.is_some()
    }

    /// Runs instances on the general chart engine even when the chart is flat (to compare
    /// the two; before sharing the service with a store).
    pub fn disable_flat(&mut self) {
        if self.flat.take().is_some() {
            self.fallback = Some("the flat machine was disabled (disable_flat)".into());
        }
    }

    /// Which path instances run on: `"flat"` (the chart pre-resolved at load time into a
    /// table of steps, [`flat`](super::flat)) or `"engine"` (the general chart interpreter),
    /// and for the engine why the chart was not flattened.
    pub fn path(&self) -> (&'static str, Option<&str>) {
        match &self.flat {
            Some(_) => ("flat", None),
            None => ("engine", self.fallback.as_deref()),
        }
    }

    /// ServiceID.
    pub fn id(&self) -> u32 {
        self.data.service_id
    }
}

fn warning(file: &str, pos: Pos, message: String) -> Diagnostic {
    Diagnostic {
        severity: Severity::Warning,
        ..error(file, pos, message)
    }
}

fn verify(
    file: &str,
    data: &ServiceData,
    matcher: &Matcher,
    chart: &Chart<Action>,
    timers_set: &[u32],
    src: &str,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (i, b) in data.basic.iter().enumerate() {
        if !matcher.can_match(i as u16) {
            out.push(warning(
                file,
                b.pos,
                format!(
                    "basic event `{}` can never match: its filters contradict each other",
                    b.name
                ),
            ));
        }
    }
    let set: BTreeSet<u32> = timers_set.iter().copied().collect();
    for id in set {
        let handled = data
            .basic
            .iter()
            .any(|b| matches!(b.kind, BasicKind::Timer(t) if t.is_none() || t == Some(id)));
        if !handled {
            let needle = format!("id=\"{id}\"");
            let pos = src
                .lines()
                .enumerate()
                .find_map(|(l, line)| {
                    (line.contains("setTimer") && line.contains(&needle)).then(|| Pos {
                        line: l as u32 + 1,
                        col: line.find("<").map_or(1, |c| c as u32 + 1),
                    })
                })
                .unwrap_or(Pos { line: 1, col: 1 });
            out.push(warning(file, pos, format!("timer {id} is set but no basic <Timer> event with TimerIdentifier {id} handles it")));
        }
    }
    let used_by_composites: BTreeSet<usize> = data
        .composite
        .iter()
        .flat_map(|c| c.constituents.iter().copied())
        .collect();
    let named = |n: &str| {
        chart
            .transitions()
            .iter()
            .any(|t| t.events.iter().any(|d| descriptor_matches(d, n)))
    };
    for (i, b) in data.basic.iter().enumerate() {
        if !named(&b.name) && !used_by_composites.contains(&i) && !composite_mentions(data, &b.name)
        {
            out.push(warning(file, b.pos, format!("basic event `{}` is handled nowhere: no transition names it and no composite event uses it", b.name)));
        }
    }
    for c in &data.composite {
        if !named(&c.name) {
            out.push(warning(
                file,
                c.pos,
                format!(
                    "composite event `{}` is handled nowhere: no transition names it",
                    c.name
                ),
            ));
        }
    }
    out
}

fn composite_mentions(data: &ServiceData, name: &str) -> bool {
    data.composite.iter().any(|c| {
        c.expr
            .split(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '-'))
            .any(|w| w == name)
    })
}
