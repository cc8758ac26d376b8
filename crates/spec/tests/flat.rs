//! The flat machine (`service::flat`) against the general chart engine: every shipped service
//! that qualifies is driven both ways through the same random traces, and the actions, their
//! messages and the states after every input must be identical.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::Value;
use viastack_spec::service::trace::{self, Options};
use viastack_spec::service::{Service, Store, StoreConfig};

mod support {
    pub mod random_trace;
}
use support::random_trace::random_trace;

/// Every shipped service, and whether it is a plain state machine the flat form runs.
const SPECS: &[(&str, &str, bool)] = &[
    (
        "dupelim",
        include_str!("../../../specs/dupelim.scxml"),
        true,
    ),
    ("e2eack", include_str!("../../../specs/e2eack.scxml"), true),
    ("h2hack", include_str!("../../../specs/h2hack.scxml"), true),
    (
        "selection",
        include_str!("../../../specs/selection.scxml"),
        true,
    ),
    ("sync", include_str!("../../../specs/sync.scxml"), true),
    // Nested states, flattened to (event, atomic state) steps.
    (
        "handshake",
        include_str!("../../../specs/handshake.scxml"),
        true,
    ),
    // Datamodel, `cond`, `<assign>`, `_event.data` and `$variables` (issue 15 §2): the flat
    // machine's datamodel.
    ("incast", include_str!("../../../specs/incast.scxml"), true),
    (
        "leakybucket",
        include_str!("../../../specs/leakybucket.scxml"),
        true,
    ),
    (
        "ordering",
        include_str!("../../../specs/ordering.scxml"),
        true,
    ),
];

fn load(name: &str, src: &str) -> Service {
    Service::load(&format!("{name}.scxml"), src)
        .unwrap_or_else(|e| panic!("{e}"))
        .0
}

fn store(svc: Service) -> Store {
    Store::new(vec![Arc::new(svc)], StoreConfig::default())
}

#[test]
fn the_plain_state_machines_among_the_shipped_services_run_flat() {
    for &(name, src, flat) in SPECS {
        assert_eq!(load(name, src).is_flat(), flat, "{name}");
    }
}

#[test]
fn flat_and_general_engine_take_the_same_actions_on_random_traces() {
    for &(name, src, flat) in SPECS {
        if !flat {
            continue;
        }
        let service = load(name, src).id();
        for seed in 0..300 {
            let inputs = random_trace(service, seed);
            for auto in [false, true] {
                let opts = Options {
                    auto_timers: auto,
                    end_ms: None,
                };
                let a = trace::run(&mut store(load(name, src)), &inputs, opts);
                let mut general = load(name, src);
                general.disable_flat();
                let b = trace::run(&mut store(general), &inputs, opts);
                if a != b {
                    let (i, (x, y)) = a
                        .iter()
                        .zip(&b)
                        .enumerate()
                        .find(|(_, (x, y))| x != y)
                        .unwrap_or((a.len().min(b.len()), (&Value::Null, &Value::Null)));
                    panic!("{name} seed {seed} auto_timers {auto}: first difference at output {i}:\nflat:    {x}\ngeneral: {y}\ninputs: {inputs:?}");
                }
                assert!(a.len() > inputs.len() / 2, "{name} seed {seed}: {a:?}");
            }
        }
    }
}

/// A plain machine that uses what the shipped ones do not: `<onexit>`, an external
/// self-transition, a `<final>` with entry and exit actions, two descriptors, several
/// blocks, actions that fail (`last(b)` before any `b`) in the middle of a block, and
/// create/set/execute runs whose draft is (`toApplication`) and is not (`sendControlMessage`)
/// read elsewhere.
const CORNERS: &str = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml"
       xmlns:action="http://my.custom-actions.domain/action" initial="one">
  <datamodel>
    <data name="service"><ServiceID>4</ServiceID></data>
    <data name="events"><Basic>
      <Event name="a"><Message><MessageType>1</MessageType></Message></Event>
      <Event name="b"><Message><MessageType>2</MessageType></Message></Event>
      <Event name="c"><Message><MessageType>3</MessageType></Message></Event>
      <Event name="t"><Timer><TimerIdentifier>1</TimerIdentifier></Timer></Event>
    </Basic></data>
  </datamodel>
  <state id="one">
    <onentry><action:setTimer id="1" ms="10"/></onentry>
    <onentry><action:toApplication message="last(b)"/><action:setTimer id="2" ms="20"/></onentry>
    <onexit><action:cancelTimer id="1"/><action:toApplication message="last(c)"/><action:cancelTimer id="3"/></onexit>
    <onexit><action:cancelTimer id="4"/></onexit>
    <transition event="a" target="one"><action:sendControlMessage from="last(b)" MessageType="9"/><action:setTimer id="5" ms="1"/>
      <action:create name="toApplication"/>
      <action:set name="toApplication" field="Message" expr="last(a)"/>
      <action:execute name="toApplication"/>
      <action:sendControlMessage MessageType="5" DestinationAddress="toApplication.SourceAddress"/>
    </transition>
    <transition event="b" target="two"/>
    <transition event="c t"><action:setTimer id="6" ms="6"/></transition>
  </state>
  <state id="two">
    <transition event="c" target="end"><action:toApplication message="last(a)"/>
      <action:create name="sendControlMessage"/>
      <action:set name="sendControlMessage" field="Message" expr="last(c)"/>
      <action:set name="sendControlMessage" field="Message/MessageType" value="7"/>
      <action:set name="sendControlMessage" field="Message/HopLimit" expr="last(b).HopLimit"/>
      <action:execute name="sendControlMessage"/>
    </transition>
    <transition event="t" target="one"/>
  </state>
  <final id="end">
    <onentry><action:setTimer id="7" ms="7"/></onentry>
    <onexit><action:cancelTimer id="8"/></onexit>
  </final>
</scxml>"#;

#[test]
fn corner_cases_of_the_flat_form_match_the_general_engine() {
    assert!(load("corners", CORNERS).is_flat());
    let mut checked = 0;
    for seed in 0..300 {
        let inputs = random_trace(4, seed);
        let opts = Options {
            auto_timers: false,
            end_ms: None,
        };
        let a = trace::run(&mut store(load("corners", CORNERS)), &inputs, opts);
        let mut general = load("corners", CORNERS);
        general.disable_flat();
        let b = trace::run(&mut store(general), &inputs, opts);
        assert_eq!(a, b, "seed {seed}: inputs {inputs:?}");
        checked += a.len();
    }
    assert!(checked > 10_000, "{checked}");
}

/// Nesting the flat form resolves at load time: a transition of an ancestor taken from a
/// deeper state, exits deepest first up to the transition's domain, entries top-down with the
/// initial transitions' content of states entered by default (the root's initial state is
/// itself compound), an internal transition of a compound state (its source not exited), an
/// external self-transition of a compound state (exited and re-entered), and a targetless one
/// inherited from an ancestor.
const NESTED: &str = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml"
       xmlns:action="http://my.custom-actions.domain/action" initial="outer">
  <datamodel>
    <data name="service"><ServiceID>4</ServiceID></data>
    <data name="events"><Basic>
      <Event name="a"><Message><MessageType>1</MessageType></Message></Event>
      <Event name="b"><Message><MessageType>2</MessageType></Message></Event>
      <Event name="c"><Message><MessageType>3</MessageType></Message></Event>
      <Event name="t"><Timer><TimerIdentifier>1</TimerIdentifier></Timer></Event>
    </Basic></data>
  </datamodel>
  <state id="outer">
    <onentry><action:setTimer id="10" ms="1"/></onentry>
    <onexit><action:cancelTimer id="10"/></onexit>
    <initial><transition target="inner"><action:setTimer id="11" ms="1"/></transition></initial>
    <transition event="t" target="done"><action:toApplication message="last(a)"/></transition>
    <transition event="c"><action:setTimer id="12" ms="1"/></transition>
    <state id="inner" initial="x">
      <onentry><action:setTimer id="20" ms="1"/></onentry>
      <onexit><action:cancelTimer id="20"/><action:toApplication message="last(b)"/></onexit>
      <transition event="b" type="internal" target="y"><action:setTimer id="21" ms="1"/></transition>
      <transition event="a" target="inner"><action:setTimer id="22" ms="1"/></transition>
      <state id="x">
        <onentry><action:setTimer id="30" ms="1"/></onentry>
        <onexit><action:cancelTimer id="30"/></onexit>
        <transition event="a" target="z"><action:sendControlMessage from="last(a)" MessageType="9"/></transition>
      </state>
      <state id="y">
        <onentry><action:setTimer id="40" ms="1"/></onentry>
        <onexit><action:cancelTimer id="40"/></onexit>
        <transition event="c" target="x"/>
      </state>
    </state>
    <state id="z">
      <onentry><action:setTimer id="50" ms="1"/></onentry>
      <transition event="b" target="outer"/>
    </state>
  </state>
  <final id="done"><onentry><action:setTimer id="60" ms="1"/></onentry></final>
</scxml>"#;

#[test]
fn nested_states_on_the_flat_form_match_the_general_engine() {
    assert_eq!(load("nested", NESTED).path(), ("flat", None));
    let mut checked = 0;
    for seed in 0..300 {
        let inputs = random_trace(4, seed);
        for auto in [false, true] {
            let opts = Options {
                auto_timers: auto,
                end_ms: None,
            };
            let a = trace::run(&mut store(load("nested", NESTED)), &inputs, opts);
            let mut general = load("nested", NESTED);
            general.disable_flat();
            let b = trace::run(&mut store(general), &inputs, opts);
            assert_eq!(a, b, "seed {seed} auto_timers {auto}: inputs {inputs:?}");
            checked += a.len();
        }
    }
    assert!(checked > 10_000, "{checked}");
    // A <final> inside a compound state raises done.state.*: the engine, with the reason.
    let src = NESTED.replace(r#"<state id="z">"#, r#"<final id="f"/><state id="z">"#);
    let svc = load("nested-final", &src);
    assert_eq!(svc.path().0, "engine");
    assert!(
        svc.path().1.is_some_and(|w| w.contains("done.state")),
        "{:?}",
        svc.path()
    );
}

/// Eventless transitions (the generator's test specification `eventless`): the initial state
/// left at once, a transient state entered by an event, a chain of two, a compound state's
/// eventless transition taken from its child, one reaching a top-level `<final>`.
const EVENTLESS: &str = include_str!("data/codegen/eventless.scxml");

#[test]
fn eventless_transitions_on_the_flat_form_match_the_general_engine() {
    assert_eq!(load("eventless", EVENTLESS).path(), ("flat", None));
    let mut checked = 0;
    for seed in 0..300 {
        let inputs = random_trace(8, seed);
        for auto in [false, true] {
            let opts = Options {
                auto_timers: auto,
                end_ms: None,
            };
            let a = trace::run(&mut store(load("eventless", EVENTLESS)), &inputs, opts);
            let mut general = load("eventless", EVENTLESS);
            general.disable_flat();
            let b = trace::run(&mut store(general), &inputs, opts);
            assert_eq!(a, b, "seed {seed} auto_timers {auto}: inputs {inputs:?}");
            checked += a.len();
        }
    }
    assert!(checked > 10_000, "{checked}");
    // With a `cond`, without a target, or in a cycle: the engine, with the reason.
    for (from, to, why) in [
        (
            r#"<transition target="hop2">"#,
            r#"<transition cond="true" target="hop2">"#,
            "eventless transition with a `cond`",
        ),
        (
            r#"<transition target="hop2">"#,
            r#"<transition>"#,
            "without a target",
        ),
        (
            r#"<transition target="idle">
      <action:sendControlMessage MessageType="11""#,
            r#"<transition target="hop1">
      <action:sendControlMessage MessageType="11""#,
            "cycle",
        ),
    ] {
        let src = EVENTLESS.replace(from, to);
        assert_ne!(src, EVENTLESS);
        let svc = load("eventless-refused", &src);
        assert_eq!(svc.path().0, "engine");
        assert!(
            svc.path().1.is_some_and(|w| w.contains(why)),
            "{:?}",
            svc.path()
        );
    }
}

#[test]
fn a_catch_all_descriptor_keeps_the_general_engine() {
    // `*` also matches the `error.execution` a failing action raises, which only the general
    // engine delivers.
    let src = CORNERS.replace(r#"event="c t""#, r#"event="*""#);
    assert!(!load("star", &src).is_flat());
}

#[test]
fn every_shipped_service_says_which_path_it_runs_on_and_why_a_fallback() {
    for &(name, src, flat) in SPECS {
        let svc = load(name, src);
        match svc.path() {
            ("flat", None) => assert!(flat, "{name}"),
            ("engine", Some(why)) => assert!(!flat && !why.is_empty(), "{name}: {why}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    // A refused construct (a `<raise>`) falls back to the engine, and the reason names it.
    let src = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" initial="a">
      <datamodel>
        <data name="service"><ServiceID>4</ServiceID></data>
        <data name="events"><Basic>
          <Event name="x"><Message><MessageType>1</MessageType></Message></Event>
        </Basic></data>
      </datamodel>
      <state id="a"><transition event="x" cond="true" target="b"><raise event="x"/></transition></state>
      <final id="b"/>
    </scxml>"#;
    let svc = load("raise", src);
    let (path, why) = svc.path();
    assert_eq!(path, "engine");
    assert!(why.is_some_and(|w| w.contains("<raise>")), "{why:?}");
    // Without it, the `cond` runs on the flat machine.
    let plain = src.replace(r#"<raise event="x"/>"#, "");
    assert_eq!(load("cond", &plain).path(), ("flat", None));
    // A `cond` that reads no variable is still evaluated (true and false alike, as the engine).
    for c in ["true", "false"] {
        let chart = plain.replace(r#"cond="true""#, &format!(r#"cond="{c}""#));
        for seed in 0..40 {
            let inputs = random_trace(4, seed);
            let opts = Options::default();
            let a = trace::run(&mut store(load("c", &chart)), &inputs, opts);
            let mut general = load("c", &chart);
            general.disable_flat();
            let b = trace::run(&mut store(general), &inputs, opts);
            assert_eq!(a, b, "cond={c} seed {seed}");
        }
    }
    // `_event` read as a whole: the engine, named.
    let whole = src.replace(
        r#"<raise event="x"/>"#,
        r#"<assign location="v" expr="_event"/>"#,
    );
    let why = load("whole", &whole).path().1.map(str::to_string);
    assert!(
        why.as_deref().is_some_and(|w| w.contains("_event")),
        "{why:?}"
    );
    let mut general = load("raise", src);
    general.disable_flat();
    assert_eq!(general.path().0, "engine");
}
