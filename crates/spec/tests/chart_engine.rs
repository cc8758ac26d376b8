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

#[test]
fn parallel_regions_and_done_events() {
    let c = chart(
        r#"initial="p">
        <parallel id="p">
          <state id="r1" initial="a1">
            <state id="a1"><transition event="go" target="f1"/></state>
            <final id="f1"/>
          </state>
          <state id="r2" initial="a2">
            <state id="a2"><transition event="go" target="f2"/></state>
            <final id="f2"><donedata><param name="x" expr="2"/></donedata></final>
          </state>
          <transition event="done.state.p" target="end"/>
        </parallel>
        <final id="end"/>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    assert_eq!(active(&c, &i), ["p", "r1", "a1", "r2", "a2"]);
    // Both regions take "go" in one microstep; both finals raise done.state.rN, then p is done.
    assert_eq!(send(&c, &mut i, "go"), Status::Final);
    assert_eq!(active(&c, &i), ["end"]);
}

#[test]
fn parallel_conflict_the_descendant_wins() {
    let c = chart(
        r#"initial="p">
        <datamodel><data id="who" expr="''"/></datamodel>
        <parallel id="p">
          <state id="r1"><transition event="e" target="x"><assign location="who" expr="'r1'"/></transition></state>
          <state id="r2"/>
          <transition event="e" target="y"><assign location="who" expr="'p'"/></transition>
        </parallel>
        <state id="x"/><state id="y"/>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    send(&c, &mut i, "e");
    assert_eq!(active(&c, &i), ["x"]);
    assert_eq!(i.var(&c, "who"), Some(&Value::str("r1")));
}

#[test]
fn shallow_and_deep_history() {
    let c = chart(
        r#"initial="s">
        <state id="s" initial="a">
          <history id="h" type="deep"><transition target="a"/></history>
          <state id="a" initial="a1">
            <state id="a1"><transition event="next" target="a2"/></state>
            <state id="a2"/>
          </state>
          <transition event="out" target="o"/>
        </state>
        <state id="o"><transition event="back" target="h"/></state>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    send(&c, &mut i, "next");
    send(&c, &mut i, "out");
    assert_eq!(active(&c, &i), ["o"]);
    send(&c, &mut i, "back");
    assert_eq!(active(&c, &i), ["s", "a", "a2"]);
}

#[test]
fn event_data_params_content_and_event_fields() {
    let c = chart(
        r#"initial="a">
        <datamodel><data id="got"/><data id="n" expr="5"/><data id="t"/></datamodel>
        <state id="a">
          <onentry><send event="msg" namelist="n"><param name="k" expr="'v'"/></send></onentry>
          <transition event="msg" target="b">
            <assign location="got" expr="_event.data.k + _event.data.n"/>
            <assign location="t" expr="_event.type"/>
          </transition>
        </state>
        <state id="b">
          <onentry><raise event="inner"/><send event="outer"><content expr="[1, 2]"/></send></onentry>
          <transition event="inner" cond="_event.type == 'internal'" target="c"/>
        </state>
        <state id="c"><transition event="outer" cond="len(_event.data) == 2" target="d"/></state>
        <final id="d"/>"#,
    );
    let mut i = Instance::new(&c);
    assert_eq!(
        i.start(&c, Instant::ZERO, &mut NoHost).unwrap(),
        Status::Final
    );
    assert_eq!(i.var(&c, "got"), Some(&Value::str("v5")));
    assert_eq!(i.var(&c, "t"), Some(&Value::str("external")));
}

#[test]
fn if_foreach_and_in() {
    let c = chart(
        r#"initial="a">
        <datamodel><data id="sum" expr="0"/><data id="xs" expr="[1, 2, 3]"/></datamodel>
        <state id="a">
          <onentry>
            <foreach array="xs" item="x" index="i"><assign location="sum" expr="sum + x * 10 + i"/></foreach>
            <if cond="sum == 10"><assign location="sum" expr="-1"/>
            <elseif cond="In('a') and sum == 63"/><assign location="sum" expr="'yes'"/>
            <else/><assign location="sum" expr="-2"/></if>
          </onentry>
        </state>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    assert_eq!(i.var(&c, "sum"), Some(&Value::str("yes")));
}

#[test]
fn run_time_errors_raise_error_execution_and_stop_the_block() {
    let c = chart(
        r#"initial="a">
        <datamodel><data id="x" expr="0"/></datamodel>
        <state id="a">
          <onentry><assign location="x" expr="1"/><assign location="x" expr="null.bad"/><assign location="x" expr="2"/></onentry>
          <transition event="error.execution" cond="x == 1" target="ok"/>
        </state>
        <final id="ok"/>"#,
    );
    let mut i = Instance::new(&c);
    assert_eq!(
        i.start(&c, Instant::ZERO, &mut NoHost).unwrap(),
        Status::Final
    );
}

#[test]
fn events_before_start_are_refused_and_after_final_ignored() {
    let c = chart(r#"><final id="f"/>"#);
    let mut i = Instance::new(&c);
    assert_eq!(
        i.handle_event(&c, Instant::ZERO, ExternalEvent::named("x"), &mut NoHost),
        Err(RunError::NotStarted)
    );
    assert_eq!(
        i.start(&c, Instant::ZERO, &mut NoHost).unwrap(),
        Status::Final
    );
    assert_eq!(send(&c, &mut i, "x"), Status::Final);
    assert_eq!(i.poll_timeout(), None);
}

#[test]
fn instances_are_small() {
    let c = chart(
        r#"initialstate="init">
        <datamodel><data id="n" expr="0"/></datamodel>
        <state id="init"><transition event="p" target="wait"/></state>
        <state id="wait"><transition event="ack" target="done"/><transition event="nack"/></state>
        <final id="done"/>"#,
    );
    let i = Instance::new(&c);
    let bytes = std::mem::size_of::<Instance>() + i.heap_bytes();
    assert!(bytes <= 512, "{bytes} bytes per instance");
}

#[test]
fn charts_are_shared_and_instances_move_between_threads() {
    fn shared<T: Send + Sync>() {}
    fn movable<T: Send>() {}
    shared::<Chart<()>>();
    movable::<Instance>();
}

#[test]
fn dot_draws_clusters_history_and_initial_arrows() {
    let src = format!(
        r#"<scxml {NS} initial="p">
        <parallel id="p">
          <state id="r1"><history id="h"/><state id="a"><transition event="e" cond="true" target="b"><raise event="x"/></transition></state><state id="b"/></state>
          <state id="r2"><state id="c"><transition event="t"><send event="t" delay="1s"/></transition></state></state>
        </parallel></scxml>"#
    );
    let doc = chart::parse("t.scxml", &src).unwrap();
    let dot = chart::dot::to_dot(&doc);
    assert!(dot.contains(r#"subgraph "cluster_p" {"#), "{dot}");
    assert!(dot.contains("style=dashed"), "{dot}");
    assert!(dot.contains(r#""h" [shape=circle, label="H"];"#), "{dot}");
    assert!(dot.contains(r#""__initial_r1" -> "a";"#), "{dot}");
    assert!(
        dot.contains(r#""a" -> "b" [label="e [true] / raise x"];"#),
        "{dot}"
    );
    assert!(
        dot.contains(r#""c" -> "c" [label="t / send t after 1s", style=dotted];"#),
        "{dot}"
    );
}

/// A host whose action drives a second instance of another chart (re-entering the engine).
struct Nested<'c> {
    inner: &'c Chart<()>,
    instance: Instance,
}

impl Host<Act> for Nested<'_> {
    fn execute(&mut self, _action: &Act, _vars: &mut Vars<'_>) -> Result<(), String> {
        self.instance
            .handle_event(
                self.inner,
                Instant::ZERO,
                ExternalEvent::named("go"),
                &mut NoHost,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[test]
fn a_host_may_run_another_instance_from_an_action() {
    let inner = chart(
        r#"initial="a"><state id="a"><transition event="go" target="b"/></state><state id="b"/>"#,
    );
    let src = format!(
        r#"<scxml {NS} initial="s"><state id="s"><transition event="hit" target="t"><action:count var="k"/></transition></state><final id="t"/></scxml>"#
    );
    let (outer, _) = Chart::compile(&chart::parse("o.scxml", &src).unwrap(), &Actions).unwrap();
    let mut host = Nested {
        inner: &inner,
        instance: Instance::new(&inner),
    };
    host.instance
        .start(&inner, Instant::ZERO, &mut NoHost)
        .unwrap();
    let mut i = Instance::new(&outer);
    i.start(&outer, Instant::ZERO, &mut host).unwrap();
    let st = i
        .handle_event(
            &outer,
            Instant::ZERO,
            ExternalEvent::named("hit"),
            &mut host,
        )
        .unwrap();
    assert_eq!(st, Status::Final);
    assert_eq!(active(&inner, &host.instance), ["b"]);
}

#[test]
fn a_symbol_of_another_chart_is_ignored() {
    let c = chart(
        r#"initial="a"><state id="a"><transition event="*" target="b"/></state><state id="b"/>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    let foreign = chart::Symbol(10_000);
    i.handle_event(
        &c,
        Instant::ZERO,
        ExternalEvent::symbol(foreign),
        &mut NoHost,
    )
    .unwrap();
    assert_eq!(active(&c, &i), ["a"]);
}

#[test]
fn queues_are_bounded() {
    let c = chart(
        r#"initial="a">
        <datamodel><data id="xs" expr="[1,2,3,4,5,6,7,8,9,10]"/></datamodel>
        <state id="a">
          <onentry>
            <foreach array="[1,2,3,4,5,6,7,8,9,10,11]" item="i"><assign location="xs" expr="xs + xs"/></foreach>
            <foreach array="xs" item="i"><send event="later" delay="1s"/></foreach>
          </onentry>
          <transition event="error.execution" target="b"/>
        </state>
        <state id="b"/>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    assert_eq!(active(&c, &i), ["b"]);
}

#[test]
fn a_host_sets_variables_that_conditions_read() {
    let c = chart(
        r#"initial="a">
        <state id="a">
          <transition event="m" cond="isBound(limit) and count &lt; limit" target="a"/>
          <transition event="m" target="over"/>
        </state>
        <state id="over"/>"#,
    );
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    assert!(i.vars(&c).set("limit", Value::Number(2.0)));
    assert!(i.vars(&c).set("count", Value::Number(1.0)));
    assert!(!i.vars(&c).set("not_in_the_chart", Value::Null));
    send(&c, &mut i, "m");
    assert_eq!(active(&c, &i), ["a"]);
    i.vars(&c).set("count", Value::Number(2.0));
    send(&c, &mut i, "m");
    assert_eq!(active(&c, &i), ["over"]);
}

#[test]
fn names_unknown_to_the_chart_match_by_string() {
    let c = chart(
        r#"initial="a">
        <state id="a"><transition event="net.msg" target="b"/></state>
        <state id="b"><transition event="*" target="c"/></state>
        <state id="c"/>"#,
    );
    assert!(c.symbol("net.msg.ack").is_none());
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut NoHost).unwrap();
    send(&c, &mut i, "net.msgs");
    assert_eq!(active(&c, &i), ["a"]);
    send(&c, &mut i, "net.msg.ack");
    assert_eq!(active(&c, &i), ["b"]);
    send(&c, &mut i, "anything.at.all");
    assert_eq!(active(&c, &i), ["c"]);
}

#[test]
fn a_failing_eventless_condition_is_stopped_by_the_step_limit() {
    // Each evaluation of the eventless transition raises error.execution, nothing ever fires:
    // without counting internal events as steps this would spin forever.
    let mut c = chart(
        r#"initial="a">
        <state id="a"><transition cond="undeclared == 1" target="b"/></state>
        <state id="b"/>"#,
    );
    c.set_step_limit(50);
    let mut i = Instance::new(&c);
    assert_eq!(
        i.start(&c, Instant::ZERO, &mut NoHost),
        Err(RunError::StepLimit { steps: 51 })
    );
}
