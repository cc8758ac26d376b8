//! `<invoke>` (W3C SCXML §6.4), `<script>` (§5.8) and `<data src>` (§5.2) on the chart
//! engine, without the W3C files: one construct per test, each checked through what the
//! parent session observes.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use viastack_kernel::time::{Duration, Instant};
use viastack_spec::chart::{
    self, Chart, ExternalEvent, Host, Instance, NoExtension, Status, Value, Vars,
};

const NS: &str = r###"xmlns="http://www.w3.org/2005/07/scxml""###;

fn chart(body: &str) -> Chart<()> {
    let src = format!("<scxml {NS} {body}</scxml>");
    let doc = chart::parse("parent.scxml", &src).unwrap_or_else(|e| panic!("{e}"));
    Chart::compile(&doc, &NoExtension)
        .unwrap_or_else(|e| panic!("{e}"))
        .0
}

/// A host whose loader serves documents from a map, and that records `<log>`s.
#[derive(Default)]
struct Files {
    files: HashMap<String, String>,
    loads: Vec<(String, String)>,
    logs: Vec<(String, Value)>,
}

impl Host<()> for Files {
    fn execute(&mut self, _: &(), _: &mut Vars<'_>) -> Result<(), String> {
        Err("no actions".into())
    }
    fn log(&mut self, label: &str, value: &Value) {
        self.logs.push((label.to_string(), value.clone()));
    }
    fn load(&mut self, base: &str, uri: &str) -> Result<String, String> {
        self.loads.push((base.to_string(), uri.to_string()));
        self.files
            .get(uri)
            .cloned()
            .ok_or_else(|| format!("no file {uri}"))
    }
}

fn top(c: &Chart<()>, i: &Instance) -> Vec<String> {
    i.active_states()
        .filter(|s| c.states()[s.0 as usize].parent == 0)
        .map(|s| c.state_name(s).to_string())
        .collect()
}

/// Starts `c` and runs its virtual clock until it ends or has nothing pending (at most
/// `jumps` timer jumps).
fn run(c: &Chart<()>, host: &mut Files, session: u64, jumps: usize) -> Instance {
    let mut i = Instance::with_session(c, session);
    let mut status = i.start(c, Instant::ZERO, host).unwrap();
    for _ in 0..jumps {
        if status == Status::Final {
            break;
        }
        let Some(t) = i.poll_timeout() else { break };
        status = i.handle_timeout(c, t, host).unwrap();
    }
    i
}

const CHILD_DONE: &str = r###"<content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="f">
      <final id="f"><donedata><param name="x" expr="7"/></donedata></final></scxml></content>"###;

#[test]
fn inline_content_ends_with_done_invoke_and_its_donedata() {
    let c = chart(&format!(
        r###"initial="s0">
        <state id="s0">
          <invoke id="kid">{CHILD_DONE}</invoke>
          <transition event="done.invoke.kid" cond="_event.data.x == 7 &amp;&amp; _event.invokeid == 'kid'" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###
    ));
    let i = run(&c, &mut Files::default(), 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
    // Without the invoke nothing happens: the machine waits in s0.
    let bare = chart(
        r###"initial="s0"><state id="s0"><transition event="done.invoke.kid" target="pass"/></state><final id="pass"/>"###,
    );
    assert_eq!(
        top(&bare, &run(&bare, &mut Files::default(), 1, 10)),
        ["s0"]
    );
}

#[test]
fn params_and_namelist_bind_the_childs_declared_top_level_data() {
    let c = chart(
        r###"initial="s0">
        <datamodel><data id="a" expr="5"/></datamodel>
        <state id="s0">
          <invoke namelist="a">
            <param name="b" expr="a + 1"/>
            <param name="undeclared" expr="1"/>
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <datamodel><data id="a" expr="0"/><data id="b" expr="0"/></datamodel>
              <state id="c0"><onentry>
                <send target="#_parent" event="got" namelist="a b">
                </send>
                <send target="#_parent" event="bound"><param name="u" expr="isBound(undeclared)"/></send>
              </onentry></state></scxml></content>
          </invoke>
          <transition event="got" cond="_event.data.a == 5 &amp;&amp; _event.data.b == 6" target="s1"/>
          <transition event="*" target="fail"/>
        </state>
        <state id="s1">
          <transition event="bound" cond="_event.data.u == false" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###,
    );
    let i = run(&c, &mut Files::default(), 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
}

#[test]
fn finalize_runs_before_the_childs_event_is_processed() {
    let c = chart(
        r###"initial="s0">
        <datamodel><data id="got" expr="0"/></datamodel>
        <state id="s0">
          <invoke id="kid">
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <state id="c0"><onentry><send target="#_parent" event="report"><param name="v" expr="3"/></send></onentry></state>
            </scxml></content>
            <finalize><assign location="got" expr="_event.data.v"/></finalize>
          </invoke>
          <transition event="report" cond="got == 3" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###,
    );
    let i = run(&c, &mut Files::default(), 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
}

fn forwarding(auto: bool) -> (Chart<()>, Instance) {
    let c = chart(&format!(
        r###"initial="s0">
        <state id="s0">
          <invoke id="kid" autoforward="{auto}">
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <state id="c0"><transition event="ping" target="c1"><send target="#_parent" event="pong"/></transition></state>
              <state id="c1"/>
            </scxml></content>
          </invoke>
          <transition event="pong" target="pass"/>
        </state>
        <final id="pass"/>"###
    ));
    let mut host = Files::default();
    let mut i = run(&c, &mut host, 1, 10);
    i.handle_event(&c, Instant::ZERO, ExternalEvent::named("ping"), &mut host)
        .unwrap();
    (c, i)
}

#[test]
fn autoforward_sends_the_parents_external_events_to_the_child() {
    let (c, i) = forwarding(true);
    assert_eq!(top(&c, &i), ["pass"]);
    let (c, i) = forwarding(false);
    assert_eq!(top(&c, &i), ["s0"]);
}

#[test]
fn exiting_the_invoking_state_cancels_the_child_and_its_timers() {
    let c = chart(
        r###"initial="s0">
        <datamodel><data id="late" expr="0"/></datamodel>
        <state id="s0">
          <onentry><send event="leave" delay="1s"/></onentry>
          <invoke id="kid">
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <state id="c0"><onentry>
                <send target="#_parent" event="early"/>
                <send target="#_parent" event="late" delay="2s"/>
              </onentry></state>
            </scxml></content>
          </invoke>
          <transition event="leave" target="s1"/>
        </state>
        <state id="s1">
          <onentry><send event="check" delay="5s"/></onentry>
          <transition event="late"><assign location="late" expr="late + 1"/></transition>
          <transition event="check" target="end"/>
        </state>
        <final id="end"/>"###,
    );
    let mut host = Files::default();
    let mut i = Instance::with_session(&c, 1);
    i.start(&c, Instant::ZERO, &mut host).unwrap();
    assert_eq!(i.invoked().count(), 1);
    // The child's 2 s send and our own 1 s send share one clock.
    assert_eq!(
        i.poll_timeout(),
        Some(Instant::ZERO + Duration::from_secs(1))
    );
    let t = i.poll_timeout().unwrap();
    i.handle_timeout(&c, t, &mut host).unwrap();
    assert_eq!(top(&c, &i), ["s1"]);
    assert_eq!(i.invoked().count(), 0, "the child is cancelled on exit");
    // Only our own 5 s timer is left: the child's 2 s send went with it.
    assert_eq!(
        i.poll_timeout(),
        Some(Instant::ZERO + Duration::from_secs(6))
    );
    let t = i.poll_timeout().unwrap();
    assert_eq!(i.handle_timeout(&c, t, &mut host).unwrap(), Status::Final);
    assert_eq!(i.var(&c, "late"), Some(&Value::Number(0.0)));
}

#[test]
fn parent_and_child_talk_through_hash_parent_and_hash_invokeid() {
    let c = chart(
        r##"initial="s0">
        <state id="s0">
          <invoke id="kid">
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <datamodel><data id="from" expr="''"/></datamodel>
              <state id="c0"><onentry><send target="#_parent" event="ready"/></onentry>
                <transition event="hello" target="c1"><assign location="from" expr="_event.origin"/></transition></state>
              <state id="c1"><onentry><send target="#_parent" event="hi"><param name="from" expr="from"/></send></onentry></state>
            </scxml></content>
          </invoke>
          <transition event="ready"><send target="#_kid" event="hello"/></transition>
          <transition event="hi" cond="_event.data.from == '#_parent' &amp;&amp; _event.origin == '#_kid'" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"##,
    );
    let i = run(&c, &mut Files::default(), 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
    // A target that is no child is a communication error.
    let bad = chart(
        r##"initial="s0">
        <state id="s0"><onentry><send target="#_nobody" event="x"/></onentry>
          <transition event="error.communication" target="pass"/><transition event="*" target="fail"/></state>
        <final id="pass"/><final id="fail"/>"##,
    );
    assert_eq!(
        top(&bad, &run(&bad, &mut Files::default(), 1, 10)),
        ["pass"]
    );
}

#[test]
fn idlocation_gets_a_generated_id_from_the_state_and_session() {
    let c = chart(&format!(
        r###"initial="s0">
        <datamodel><data id="iid"/></datamodel>
        <state id="s0">
          <invoke idlocation="iid">{CHILD_DONE}</invoke>
          <transition event="done.invoke" cond="_event.invokeid == iid" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###
    ));
    let i = run(&c, &mut Files::default(), 42, 10);
    assert_eq!(top(&c, &i), ["pass"]);
    let Some(Value::String(id)) = i.var(&c, "iid") else {
        panic!("iid not set")
    };
    assert!(id.starts_with("s0.42."), "{id}");
}

#[test]
fn session_ids_are_a_function_of_the_seed() {
    let c = chart(
        r###"initial="s0">
        <datamodel><data id="me"/><data id="kid"/></datamodel>
        <state id="s0">
          <onentry><assign location="me" expr="_sessionid"/></onentry>
          <invoke id="k">
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <state id="c0"><onentry><send target="#_parent" event="sid"><param name="s" expr="_sessionid"/></send></onentry></state>
            </scxml></content>
          </invoke>
          <transition event="sid"><assign location="kid" expr="_event.data.s"/></transition>
        </state>"###,
    );
    let ids = |seed: u64| {
        let i = run(&c, &mut Files::default(), seed, 10);
        let kid: Vec<u64> = i.invoked().map(|(_, s)| s).collect();
        (i.var(&c, "me").cloned(), i.var(&c, "kid").cloned(), kid)
    };
    let (a, b) = (ids(7), ids(7));
    assert_eq!(a, b);
    assert_eq!(a.0, Some(Value::str("7")));
    assert_eq!(a.1, Some(Value::str(&a.2[0].to_string())));
    assert_ne!(a.2[0], 7, "a child has a session of its own");
    assert_ne!(ids(8), a);
}

#[test]
fn src_documents_come_from_the_hosts_loader() {
    let c = chart(
        r###"initial="s0">
        <state id="s0">
          <invoke type="http://www.w3.org/TR/scxml/" src="child.scxml"/>
          <transition event="done.invoke" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###,
    );
    let mut host = Files::default();
    host.files.insert(
        "child.scxml".into(),
        format!(r###"<scxml {NS} initial="f"><final id="f"/></scxml>"###),
    );
    let i = run(&c, &mut host, 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
    assert_eq!(host.loads, [("parent.scxml".into(), "child.scxml".into())]);
    // Nothing to load, or an unsupported type: error.execution, no child.
    for bad in [
        r###"<invoke src="missing.scxml"/>"###,
        r###"<invoke type="http://example.com/other" src="child.scxml"/>"###,
    ] {
        let c = chart(&format!(
            r###"initial="s0"><state id="s0">{bad}
              <transition event="error.execution" target="pass"/><transition event="*" target="fail"/></state>
            <final id="pass"/><final id="fail"/>"###
        ));
        let i = run(&c, &mut host, 1, 10);
        assert_eq!(top(&c, &i), ["pass"], "{bad}");
    }
}

#[test]
fn scripts_run_statements_and_report_errors() {
    let c = chart(
        r###"initial="s0">
        <datamodel><data id="n" expr="1"/><data id="l" expr="[1, 2]"/></datamodel>
        <script>var top = 10</script>
        <state id="s0">
          <onentry><script>
            n += top; n++
            var s = 'a' + str(n)
            l[0] = n * 2
          </script></onentry>
          <transition cond="n == 12 &amp;&amp; s == 'a12' &amp;&amp; l[0] == 24" target="s1"/>
          <transition target="fail"/>
        </state>
        <state id="s1">
          <onentry><script>undeclared = 1</script><assign location="n" expr="0"/></onentry>
          <transition event="error.execution" cond="n == 12" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###,
    );
    let i = run(&c, &mut Files::default(), 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
}

#[test]
fn data_src_is_loaded_and_a_failed_load_is_an_execution_error() {
    let c = chart(
        r###"initial="s0">
        <datamodel><data id="v" src="file:v.json"/><data id="w" src="file:missing"/></datamodel>
        <state id="s0">
          <transition event="error.execution" cond="v[2] == 3 &amp;&amp; w == null" target="pass"/>
          <transition event="*" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###,
    );
    let mut host = Files::default();
    host.files.insert("file:v.json".into(), "[1, 2, 3]".into());
    let i = run(&c, &mut host, 1, 10);
    assert_eq!(top(&c, &i), ["pass"]);
}

#[test]
fn a_childs_delayed_send_runs_on_the_parents_clock() {
    let c = chart(
        r###"initial="s0">
        <state id="s0">
          <onentry><send event="timeout" delay="3s"/></onentry>
          <invoke id="kid">
            <content><scxml xmlns="http://www.w3.org/2005/07/scxml" initial="c0">
              <state id="c0"><onentry><send target="#_parent" event="tick" delay="2s"/></onentry></state>
            </scxml></content>
          </invoke>
          <transition event="tick" target="pass"/>
          <transition event="timeout" target="fail"/>
        </state>
        <final id="pass"/><final id="fail"/>"###,
    );
    let mut host = Files::default();
    let mut i = Instance::with_session(&c, 1);
    i.start(&c, Instant::ZERO, &mut host).unwrap();
    let t = i.poll_timeout().unwrap();
    assert_eq!(t, Instant::ZERO + Duration::from_secs(2));
    assert_eq!(i.handle_timeout(&c, t, &mut host).unwrap(), Status::Final);
    assert_eq!(top(&c, &i), ["pass"]);
}
