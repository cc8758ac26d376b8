//! Bad specifications and misbehaving services: diagnostics with positions, the step limit,
//! capacity, unknown services, pre-allocated pools.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use viastack_kernel::time::Instant;
use viastack_spec::service::trace::Recorder;
use viastack_spec::service::{Message, Runner, RunnerError, Service, Store, StoreConfig};

fn spec(events: &str, body: &str) -> String {
    format!(
        r#"<?xml version="1.0"?>
<scxml version="1.0" xmlns="http://www.w3.org/2005/07/scxml" xmlns:action="http://my.custom-actions.domain/action" initial="a">
  <datamodel>
    <data name="service"><ServiceID>3</ServiceID></data>
    <data name="events">
{events}
    </data>
  </datamodel>
{body}
</scxml>"#
    )
}

const BASIC: &str = r#"      <Basic><Event name="ping"><Message><MessageType>1</MessageType></Message></Event></Basic>"#;

fn errors(src: &str) -> String {
    match Service::load("bad.scxml", src) {
        Ok(_) => panic!("loaded:\n{src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn composite_expression_errors_point_into_the_expression() {
    let ev = format!(
        "{BASIC}\n      <Composite><Event name=\"c\"><ConstituentBasicEvent>ping</ConstituentBasicEvent><Expression>exists m in ping : m.colour == 1</Expression></Event></Composite>"
    );
    let e = errors(&spec(
        &ev,
        r#"  <state id="a"><transition event="c"/></state>"#,
    ));
    // line 7; the expression starts at column 97, `m.colour` 19 characters later.
    assert!(
        e.contains(
            "bad.scxml:7:116: error: composite event `c`: unknown message attribute `colour`"
        ),
        "{e}"
    );
}

#[test]
fn unknown_action_and_parameter_are_errors_at_the_element() {
    let e = errors(&spec(BASIC, "  <state id=\"a\">\n    <transition event=\"ping\">\n      <action:launch/>\n      <action:setTimer id=\"1\" ms=\"5\" colour=\"red\"/>\n    </transition>\n  </state>"));
    assert!(
        e.contains("bad.scxml:11:7: error: unknown action `launch`"),
        "{e}"
    );
    assert!(
        e.contains("bad.scxml:12:7: error: unknown parameter `colour` of setTimer"),
        "{e}"
    );
}

#[test]
fn undefined_event_in_last_is_an_error() {
    let e = errors(&spec(BASIC, "  <state id=\"a\"><transition event=\"ping\"><action:toApplication message=\"last(pong)\"/></transition></state>"));
    assert!(e.contains("unknown event `pong` in last(…)"), "{e}");
}

#[test]
fn service_warnings() {
    let ev = r#"      <Basic>
        <Event name="ping"><Message><MessageType>1</MessageType></Message></Event>
        <Event name="never"><Message><MessageType>1</MessageType><MessageType>2</MessageType></Message></Event>
      </Basic>"#;
    let (_, w) = Service::load("w.scxml", &spec(ev, "  <state id=\"a\"><transition event=\"ping\" target=\"z\"><action:setTimer id=\"4\" ms=\"10\"/></transition><transition event=\"never\"/></state><final id=\"z\"/>")).unwrap();
    let w: Vec<String> = w.iter().map(ToString::to_string).collect();
    assert!(
        w.iter()
            .any(|x| x.contains("basic event `never` can never match")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|x| x.contains("timer 4 is set but no basic <Timer> event")),
        "{w:?}"
    );
}

fn ping(id: u64, service: u32) -> Message {
    Message {
        service_id: service,
        message_id: id,
        message_type: 1,
        hop_limit: 255,
        ..Message::default()
    }
}

#[test]
fn a_transition_loop_is_stopped_and_reported() {
    let body = r#"  <state id="a"><transition event="ping" target="b"/></state>
  <state id="b"><transition target="c"/></state>
  <state id="c"><transition target="b"/></state>"#;
    let mut svc = Service::load("loop.scxml", &spec(BASIC, body)).unwrap().0;
    svc.set_step_limit(50);
    let mut store = Store::new(vec![Arc::new(svc)], StoreConfig::default());
    let mut rec = Recorder::default();
    let r = store.handle_message(Instant::ZERO, &ping(1, 3), &mut rec);
    assert!(matches!(r, Err(RunnerError::StepLimit { .. })), "{r:?}");
    assert_eq!(store.live(), 0, "the looping instance is freed");
    // The store still works.
    assert!(matches!(
        store.handle_message(Instant::ZERO, &ping(1, 3), &mut rec),
        Err(RunnerError::StepLimit { .. })
    ));
}

#[test]
fn capacity_unknown_service_and_pool() {
    let body = r#"  <state id="a"><transition event="ping"/></state>"#;
    let (svc, _) = Service::load("p.scxml", &spec(BASIC, body)).unwrap();
    let svc = Arc::new(svc);
    let mut store = Store::new(
        vec![Arc::clone(&svc)],
        StoreConfig {
            pool: 4,
            capacity: 3,
        },
    );
    let mut rec = Recorder::default();
    for id in 0..3 {
        store
            .handle_message(Instant::ZERO, &ping(id, 3), &mut rec)
            .unwrap();
    }
    assert_eq!(store.live(), 3);
    assert_eq!(
        store.handle_message(Instant::ZERO, &ping(9, 3), &mut rec),
        Err(RunnerError::Full(3))
    );
    assert_eq!(
        store.handle_message(Instant::ZERO, &ping(1, 4), &mut rec),
        Err(RunnerError::UnknownService(4))
    );
    // An existing instance still takes messages; a message no filter accepts creates nothing.
    store
        .handle_message(Instant::ZERO, &ping(1, 3), &mut rec)
        .unwrap();
    let other = Message {
        message_type: 9,
        ..ping(20, 3)
    };
    store
        .handle_message(Instant::ZERO, &other, &mut rec)
        .unwrap();
    assert_eq!(store.live(), 3);
    assert!(store.memory_bytes() > 0);
}

/// A store running a flat-machine service (instances in its own map) and an engine service
/// (instances in the slab) at once: one capacity for both, each instance found by its key,
/// timers and states per service, and freed instances no longer counted.
#[test]
fn flat_and_engine_services_share_one_store_and_its_capacity() {
    let flat_body = r#"  <state id="a"><transition event="ping" target="b"><action:setTimer id="1" ms="5"/></transition></state>
  <state id="b"><transition event="t" target="z"/></state>
  <final id="z"/>"#;
    let events = r#"      <Basic><Event name="ping"><Message><MessageType>1</MessageType></Message></Event>
        <Event name="t"><Timer><TimerIdentifier>1</TimerIdentifier></Timer></Event></Basic>"#;
    let flat = Service::load("f.scxml", &spec(events, flat_body))
        .unwrap()
        .0;
    assert_eq!(flat.path().0, "flat");
    // The same machine with a `<log>` (content the flat machine does not run): the engine.
    let engine_src = spec(
        events,
        &flat_body.replace(
            r#"<transition event="t" target="z"/>"#,
            r#"<transition event="t" target="z"><log expr="1"/></transition>"#,
        ),
    )
    .replace("<ServiceID>3</ServiceID>", "<ServiceID>4</ServiceID>");
    let engine = Service::load("e.scxml", &engine_src).unwrap().0;
    assert_eq!(engine.path().0, "engine");
    let mut store = Store::new(
        vec![Arc::new(flat), Arc::new(engine)],
        StoreConfig {
            pool: 1,
            capacity: 3,
        },
    );
    let mut rec = Recorder::default();
    let key = |service, message| viastack_spec::service::InstanceKey { service, message };
    for (id, service) in [(1, 3), (2, 3), (1, 4)] {
        store
            .handle_message(Instant::ZERO, &ping(id, service), &mut rec)
            .unwrap();
        assert_eq!(store.state(key(service, id)), Some("b"), "{service}/{id}");
    }
    assert_eq!(store.live(), 3);
    assert_eq!(store.states(key(3, 1)), vec!["scxml", "b"]);
    assert_eq!(
        store.handle_message(Instant::ZERO, &ping(7, 4), &mut rec),
        Err(RunnerError::Full(3))
    );
    assert_eq!(
        store.handle_message(Instant::ZERO, &ping(7, 3), &mut rec),
        Err(RunnerError::Full(3))
    );
    // The timer ends the flat instance 3/1 only; then there is room again.
    store
        .handle_timer(Instant::ZERO, key(3, 1), 1, &mut rec)
        .unwrap();
    assert_eq!(store.state(key(3, 1)), None);
    assert_eq!(store.state(key(3, 2)), Some("b"));
    assert_eq!(store.live(), 2);
    store
        .handle_timer(Instant::ZERO, key(4, 1), 1, &mut rec)
        .unwrap();
    assert_eq!(store.state(key(4, 1)), None);
    assert_eq!(store.live(), 1);
    store
        .handle_message(Instant::ZERO, &ping(7, 3), &mut rec)
        .unwrap();
    assert_eq!(store.live(), 2);
    assert!(store.memory_bytes() > 0);
}
