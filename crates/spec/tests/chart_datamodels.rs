//! The ECMAScript and XPath datamodels on the chart engine (`<scxml datamodel=…>`, issue 15
//! §1): chosen by the attribute, errors raised as `error.execution` (never a panic or a
//! rejected document), a script that never ends stopped by the step budget, runs a function of
//! their inputs, values crossing `<send>` and `<invoke>`.
#![allow(clippy::unwrap_used)]

use viastack_kernel::time::Instant;
use viastack_spec::chart::{self, Chart, Host, Instance, NoExtension, Status, Value, Vars};

const NS: &str = r#"xmlns="http://www.w3.org/2005/07/scxml""#;

fn chart(dm: &str, body: &str) -> Chart<()> {
    let src = format!(r#"<scxml {NS} datamodel="{dm}" initial="s0">{body}</scxml>"#);
    let doc = chart::parse("t.scxml", &src).unwrap_or_else(|e| panic!("{e}"));
    Chart::compile(&doc, &NoExtension)
        .unwrap_or_else(|e| panic!("{e}"))
        .0
}

#[derive(Default)]
struct Logs(Vec<(String, Value)>);

impl Host<()> for Logs {
    fn execute(&mut self, _: &(), _: &mut Vars<'_>) -> Result<(), String> {
        Err("no actions".into())
    }
    fn log(&mut self, label: &str, value: &Value) {
        self.0.push((label.to_string(), value.clone()));
    }
}

/// Runs to the end (no timers in these charts) and returns the top-level state and the logs.
fn run(c: &Chart<()>) -> (String, Vec<(String, Value)>) {
    let mut host = Logs::default();
    let mut i = Instance::with_session(c, 1);
    let status = i.start(c, Instant::ZERO, &mut host).unwrap();
    assert_eq!(status, Status::Final, "logs: {:?}", host.0);
    let top = i
        .active_states()
        .filter(|s| c.states()[s.0 as usize].parent == 0)
        .map(|s| c.state_name(s).to_string())
        .collect::<Vec<_>>()
        .join(",");
    (top, host.0)
}

const PASS_FAIL: &str = r#"<final id="pass"/><final id="fail"/>"#;

#[test]
fn the_datamodel_attribute_chooses_the_language() {
    // `typeof` is an ECMAScript operator; viastack's language has a typeof() function that
    // answers "list" for a list, ECMAScript answers "object".
    let body = format!(
        r#"<datamodel><data id="x" expr="[1, 2]"/></datamodel>
        <state id="s0"><transition cond="typeof(x) == 'object'" target="pass"/>
          <transition cond="typeof(x) == 'list'" target="fail"/></state>{PASS_FAIL}"#
    );
    assert_eq!(run(&chart("ecmascript", &body)).0, "pass");
    assert_eq!(run(&chart("viastack", &body)).0, "fail");
    let xp = format!(
        r#"<datamodel><data id="x" expr="3"/></datamodel>
        <state id="s0"><transition cond="$x * 2 = 6 and local-name($x) = 'data'" target="pass"/>
          <transition target="fail"/></state>{PASS_FAIL}"#
    );
    assert_eq!(run(&chart("xpath", &xp)).0, "pass");
}

#[test]
fn ecmascript_errors_are_execution_errors() {
    for bad in [
        "<script>this is not ECMAScript</script>",
        "<script>throw new Error('x')</script>",
        r#"<assign location="undeclared" expr="1"/>"#,
        r#"<assign location="_sessionid" expr="1"/>"#,
        r#"<log label="x" expr="nosuch.field"/>"#,
        r#"<foreach array="7" item="i"><log label="never" expr="i"/></foreach>"#,
    ] {
        let body = format!(
            r#"<state id="s0"><onentry>{bad}</onentry>
              <transition event="error.execution" target="pass"/>
              <transition event="*" target="fail"/></state>{PASS_FAIL}"#
        );
        let (top, logs) = run(&chart("ecmascript", &body));
        assert_eq!(top, "pass", "{bad}");
        assert!(logs.iter().all(|(l, _)| l != "never"), "{bad}");
    }
    // A condition that throws is false, and raises error.execution.
    let body = format!(
        r#"<state id="s0"><transition cond="nosuch()" target="fail"/>
          <transition event="error.execution" target="pass"/></state>{PASS_FAIL}"#
    );
    assert_eq!(run(&chart("ecmascript", &body)).0, "pass");
}

#[test]
fn a_script_that_never_ends_is_stopped() {
    let body = format!(
        r#"<datamodel><data id="n" expr="0"/></datamodel>
        <state id="s0"><onentry><script>while (true) {{ n++; }}</script></onentry>
          <transition event="error.execution" cond="n > 1000" target="pass"/>
          <transition event="*" target="fail"/></state>{PASS_FAIL}"#
    );
    let (top, _) = run(&chart("ecmascript", &body));
    assert_eq!(top, "pass");
    // The same in a condition.
    let body = format!(
        r#"<state id="s0"><transition cond="(function () {{ for (;;) {{}} }})()" target="fail"/>
          <transition event="error.execution" target="pass"/></state>{PASS_FAIL}"#
    );
    assert_eq!(run(&chart("ecmascript", &body)).0, "pass");
}

#[test]
fn runs_are_a_function_of_their_inputs() {
    let body = format!(
        r#"<state id="s0"><onentry>
          <log label="r" expr="[Math.random(), Math.random(), Date.now(), new Date().getTime()]"/>
          </onentry><transition target="pass"/></state>{PASS_FAIL}"#
    );
    let c = chart("ecmascript", &body);
    let (_, a) = run(&c);
    let (_, b) = run(&c);
    assert_eq!(a, b);
    let Value::List(l) = &a[0].1 else {
        panic!("{a:?}")
    };
    assert_eq!(l[2], Value::Number(0.0));
    assert_eq!(l[3], Value::Number(0.0));
}

#[test]
fn values_cross_send_and_event_data() {
    // ECMAScript: params and XML content arrive as _event.data.
    let body = format!(
        r#"<state id="s0"><onentry>
          <send event="a"><param name="p" expr="({{k: [1, 2]}})"/></send>
          <send event="b"><content><r xmlns=""><i v="x"/></r></content></send></onentry>
          <transition event="a" cond="_event.data.p.k[1] === 2" target="s1"/>
          <transition event="*" target="fail"/></state>
        <state id="s1"><transition event="b"
            cond="_event.data.getElementsByTagName('i')[0].getAttribute('v') === 'x'" target="pass"/>
          <transition event="*" target="fail"/></state>{PASS_FAIL}"#
    );
    assert_eq!(run(&chart("ecmascript", &body)).0, "pass");
    // XPath: the same through $_event/data.
    let body = format!(
        r#"<state id="s0"><onentry>
          <send event="a"><param name="p" expr="2"/></send>
          <send event="b"><content><r xmlns=""><i v="x"/></r></content></send></onentry>
          <transition event="a" cond="$_event/data/data[@id='p'] = 2" target="s1"/>
          <transition event="*" target="fail"/></state>
        <state id="s1"><transition event="b" cond="$_event/data/r/i/@v = 'x'" target="pass"/>
          <transition event="*" target="fail"/></state>{PASS_FAIL}"#
    );
    assert_eq!(run(&chart("xpath", &body)).0, "pass");
}

#[test]
fn xpath_errors_are_execution_errors() {
    for bad in [
        r#"<assign location="$nosuch" expr="1"/>"#,
        r#"<assign location="$x/none" expr="1"/>"#,
        r#"<log label="x" expr="(("/>"#,
        r#"<assign location="$_name" expr="1"/>"#,
        r#"<script>x = 1</script>"#,
    ] {
        let body = format!(
            r#"<datamodel><data id="x"/></datamodel>
            <state id="s0"><onentry>{bad}</onentry>
              <transition event="error.execution" target="pass"/>
              <transition event="*" target="fail"/></state>{PASS_FAIL}"#
        );
        assert_eq!(run(&chart("xpath", &body)).0, "pass", "{bad}");
    }
}

#[test]
fn an_invoked_ecmascript_session_gets_its_params() {
    let body = format!(
        r##"<state id="s0"><invoke><param name="v" expr="[1, 2, 3]"/><content>
          <scxml {NS} datamodel="ecmascript" initial="c0"><datamodel><data id="v"/></datamodel>
            <state id="c0"><transition cond="v.length === 3" target="ok"/>
              <transition target="ko"/></state>
            <final id="ok"><onentry><send target="#_parent" event="child.ok"/></onentry></final>
            <final id="ko"/></scxml></content></invoke>
          <transition event="child.ok" target="pass"/>
          <transition event="done.invoke" target="fail"/></state>{PASS_FAIL}"##
    );
    let c = chart("ecmascript", &body);
    let mut host = Logs::default();
    let mut i = Instance::with_session(&c, 1);
    let mut status = i.start(&c, Instant::ZERO, &mut host).unwrap();
    for _ in 0..10 {
        if status == Status::Final {
            break;
        }
        let Some(t) = i.poll_timeout() else { break };
        status = i.handle_timeout(&c, t, &mut host).unwrap();
    }
    assert!(i.is_final());
    assert!(i.is_active(c.state_id("pass").unwrap()));
}

/// Hostile inputs straight to both datamodels (what the `spec_datamodels` fuzz target does
/// with any bytes): errors, never panics, and the model stays usable.
#[test]
fn hostile_inputs_are_errors_and_the_models_stay_usable() {
    use viastack_spec::chart::host::{self, Datamodel, Init};
    let inputs = [
        "",
        "(((",
        "}{",
        "function f() { f(); } f()",
        "var a = []; for (;;) a.push(new Array(100000).fill(1))",
        "while (true) {}",
        "'\u{0}'",
        "$",
        "//*[",
        "<a><b></a>",
        "<a xmlns='urn:x'><b c='1'/></a>",
        "_event = 1",
        "\"use strict\"; undeclared = 1",
        "throw {toString: function () { throw 1; }}",
        "$x/../../..",
        "count(//*) > 0",
    ];
    for kind in [Datamodel::Ecmascript, Datamodel::Xpath] {
        let mut m = host::create(kind, 1, "t").unwrap();
        for src in inputs {
            let _ = m.declare("x", Init::Expr(src));
            let _ = m.eval(src);
            let _ = m.cond(src);
            let _ = m.script(src);
            let _ = m.assign(src, Init::Expr("1"), None, None);
            let v = host::text_value(kind, src);
            let _ = m.declare("y", Init::Value(&v));
            let _ = m.assign("$x", Init::Value(&v), Some("lastchild"), None);
            if let Ok(n) = m.foreach_start(src) {
                for i in 0..n.min(3) {
                    let _ = m.foreach_bind(src, Some("i"), i);
                }
                m.foreach_end();
            }
            assert_eq!(
                m.eval("1 + 1").unwrap(),
                Value::Number(2.0),
                "{kind:?} after {src}"
            );
        }
    }
}
