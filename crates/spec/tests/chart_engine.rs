//! The chart engine driven through small documents, one construct each.
#![allow(clippy::unwrap_used)]

use viastack_kernel::time::{Duration, Instant};
use viastack_spec::chart::{
    self, Chart, CustomElement, Extension, ExternalEvent, Host, Instance, NoExtension, NoHost,
    RunError, Status, Value, Vars,
};

const NS: &str = r#"xmlns="http://www.w3.org/2005/07/scxml" xmlns:action="http://my.custom-actions.domain/action""#;

fn chart(body: &str) -> Chart<()> {
    let src = format!("<scxml {NS} {body}</scxml>");
    let doc = chart::parse("t.scxml", &src).unwrap_or_else(|e| panic!("{e}"));
    Chart::compile(&doc, &NoExtension)
        .unwrap_or_else(|e| panic!("{e}"))
        .0
}

fn active(c: &Chart<()>, i: &Instance) -> Vec<String> {
    i.active_states()
        .map(|s| c.state_name(s).to_string())
        .collect()
}

fn send(c: &Chart<()>, i: &mut Instance, name: &str) -> Status {
    i.handle_event(c, Instant::ZERO, ExternalEvent::named(name), &mut NoHost)
        .unwrap()
}

#[test]
fn flat_states_transitions_and_conditions() {
    let c = chart(
        r#"initialstate="a">
        <datamodel><data id="n" expr="0"/></datamodel>
        <state id="a">
          <transition event="go" cond="n &lt; 2" target="b"><assign location="n" expr="n + 1"/></transition>
          <transition event="go" target="done"/>
        </state>
        <state id="b"><transition event="back" target="a"/></state>
        <final id="done"/>"#,
    );
    let mut i = Instance::new(&c);
    assert_eq!(
        i.start(&c, Instant::ZERO, &mut NoHost).unwrap(),
        Status::Running
    );
    assert_eq!(active(&c, &i), ["a"]);
    send(&c, &mut i, "go");
    assert_eq!(active(&c, &i), ["b"]);
    send(&c, &mut i, "unknown.event");
    assert_eq!(active(&c, &i), ["b"]);
    send(&c, &mut i, "back");
    send(&c, &mut i, "go");
    send(&c, &mut i, "back");
    assert_eq!(i.var(&c, "n"), Some(&Value::Number(2.0)));
    assert_eq!(send(&c, &mut i, "go"), Status::Final);
    assert!(i.is_final());
    assert_eq!(active(&c, &i), ["done"]);
}

#[test]
fn compound_states_raise_and_entry_exit_order() {
    let c = chart(
        r#"initial="p">
        <datamodel><data id="log" expr="''"/></datamodel>
        <state id="p">
          <onentry><assign location="log" expr="log + 'P'"/></onentry>
          <onexit><assign location="log" expr="log + 'p'"/></onexit>
          <state id="p1">
            <onentry><assign location="log" expr="log + 'A'"/><raise event="next"/></onentry>
            <onexit><assign location="log" expr="log + 'a'"/></onexit>
            <transition event="next" target="p2"/>
          </state>
          <state id="p2">
            <onentry><assign location="log" expr="log + 'B'"/></onentry>
            <transition event="out" target="q"/>
          </state>
          <transition event="x.y" target="q"/>
        </state>
        <state id="q"><onentry><assign location="log" expr="log + 'Q'"/></onentry></state>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    assert_eq!(active(&c, &i), ["p", "p2"]);
    // Descriptor "x.y" matches "x.y.z" by token prefix, via the parent state.
    send(&c, &mut i, "x.y.z");
    assert_eq!(active(&c, &i), ["q"]);
    assert_eq!(i.var(&c, "log"), Some(&Value::str("PAaBpQ")));
}

#[test]
fn targetless_and_internal_transitions_do_not_exit() {
    let c = chart(
        r#"initial="s">
        <datamodel><data id="exits" expr="0"/></datamodel>
        <state id="s">
          <onexit><assign location="exits" expr="exits + 1"/></onexit>
          <transition event="self"><assign location="exits" expr="exits + 10"/></transition>
          <transition event="inner" type="internal" target="s2"/>
          <state id="s1"/><state id="s2"/>
        </state>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    send(&c, &mut i, "self");
    send(&c, &mut i, "inner");
    assert_eq!(active(&c, &i), ["s", "s2"]);
    assert_eq!(i.var(&c, "exits"), Some(&Value::Number(10.0)));
}

#[test]
fn transition_loop_is_stopped() {
    let mut c = chart(
        r#"initial="a">
        <state id="a"><transition event="go" target="b"/></state>
        <state id="b"><transition target="c"/></state>
        <state id="c"><transition target="b"/></state>"#,
    );
    c.set_step_limit(100);
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    let r = i.handle_event(&c, Instant::ZERO, ExternalEvent::named("go"), &mut NoHost);
    assert_eq!(r, Err(RunError::StepLimit { steps: 101 }));
}

#[test]
fn delayed_send_and_cancel_on_the_virtual_clock() {
    let c = chart(
        r#"initial="a">
        <state id="a">
          <onentry>
            <send event="t1" delay="1s"/>
            <send id="c" event="t2" delay="500ms"/>
            <cancel sendid="c"/>
          </onentry>
          <transition event="t2" target="bad"/>
          <transition event="t1" target="ok"/>
        </state>
        <final id="ok"/><final id="bad"/>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    let t = i.poll_timeout().unwrap();
    assert_eq!(t, Instant::ZERO + Duration::from_secs(1));
    assert_eq!(i.handle_timeout(&c, t, &mut NoHost).unwrap(), Status::Final);
    assert_eq!(active(&c, &i), ["ok"]);
}

struct Actions;
#[derive(Debug, PartialEq)]
enum Act {
    Count(String),
}

impl Extension for Actions {
    type Action = Act;
    fn compile_action(&self, el: &CustomElement) -> Result<Act, String> {
        match el.name.as_str() {
            "count" => Ok(Act::Count(
                el.attr("var").ok_or("count needs var=")?.to_string(),
            )),
            other => Err(format!("unknown action {other}")),
        }
    }
}

struct Counter(Vec<String>);
impl Host<Act> for Counter {
    fn execute(&mut self, action: &Act, vars: &mut Vars<'_>) -> Result<(), String> {
        let Act::Count(name) = action;
        let n = vars.get(name).and_then(Value::as_f64).unwrap_or(0.0);
        vars.set(name, Value::Number(n + 1.0));
        self.0.push(vars.event_name().unwrap_or("").to_string());
        if n >= 1.0 {
            return Err("too many".into());
        }
        Ok(())
    }
}

#[test]
fn custom_actions_run_through_the_host() {
    let src = format!(
        r#"<scxml {NS} initialstate="a">
        <datamodel><data id="k" expr="0"/></datamodel>
        <state id="a">
          <transition event="hit"><action:count var="k"/></transition>
          <transition event="error.execution" target="failed"/>
        </state>
        <state id="failed"/></scxml>"#
    );
    let doc = chart::parse("t.scxml", &src).unwrap();
    let (c, _) = Chart::compile(&doc, &Actions).unwrap();
    let mut host = Counter(Vec::new());
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut host).unwrap();
    let hit = c.symbol("hit").unwrap();
    i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(hit), &mut host)
        .unwrap();
    assert_eq!(i.var(&c, "k"), Some(&Value::Number(1.0)));
    i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(hit), &mut host)
        .unwrap();
    assert_eq!(host.0, ["hit", "hit"]);
    assert_eq!(c.state_name(i.active_states().next().unwrap()), "failed");

    let bad =
        format!(r#"<scxml {NS}><state id="a"><onentry><action:nope/></onentry></state></scxml>"#);
    let err = Chart::compile(&chart::parse("b.scxml", &bad).unwrap(), &Actions).unwrap_err();
    assert!(err.to_string().starts_with("b.scxml:1:"), "{err}");
    assert!(err.to_string().contains("unknown action nope"), "{err}");
}
