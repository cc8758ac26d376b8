//! The seed's own XQuery listings (seed 000 §3.3, §5.1.2.2), kept verbatim in
//! `tests/data/seed-listings/`, loaded unchanged into a service and run against the same traces
//! as the shipped `<Expression>` form: the outputs must be identical. Also the seed's three
//! example composite events of §4.2.1.2 (all / some but not all / no acknowledgements) written
//! in XQuery with `some`, `every`, `count`, `empty` and `where`, against their first-order
//! forms of docs/spec-format.md.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use viastack_spec::service::trace::{self, Options};
use viastack_spec::service::{Service, Store, StoreConfig};

#[path = "support/random_trace.rs"]
mod random_trace;
use random_trace::random_trace;

const H2HACK: &str = include_str!("../../../specs/h2hack.scxml");
/// §5.1.2.2, the content of `<XQuery>` exactly as the seed prints it (with its blank lines
/// and its entities: `<out&gt;true&lt;/out&gt;`).
const S5_1_2_2: &str = include_str!("data/seed-listings/s5.1.2.2-allh2hackmessagesreceived.xq");
/// §3.3, the introductory example over a document `nodes.xml`.
const S3_3: &str = include_str!("data/seed-listings/s3.3-nodes.xq");

const SHIPPED: &str =
    "<Expression>forall d in node.children : exists m in h2hackmessage : m.source == d</Expression>";

fn load(name: &str, src: &str) -> Service {
    Service::load(name, src).unwrap_or_else(|e| panic!("{e}")).0
}

fn with_xquery(xml: &str) -> String {
    assert!(H2HACK.contains(SHIPPED));
    H2HACK.replace(SHIPPED, &format!("<XQuery>{xml}</XQuery>"))
}

/// Compares two specifications of the same service on 300 random traces, with and without
/// timers firing by themselves; returns how many output lines were compared.
fn same_outputs(a: &Service, b: &Service, service: u32) -> usize {
    let (a, b) = (Arc::new(clone_load(a)), Arc::new(clone_load(b)));
    let mut compared = 0;
    for seed in 0..300 {
        let inputs = random_trace(service, seed);
        for auto in [false, true] {
            let opts = Options {
                auto_timers: auto,
                end_ms: None,
            };
            let x = trace::run(
                &mut Store::new(vec![a.clone()], StoreConfig::default()),
                &inputs,
                opts,
            );
            let y = trace::run(
                &mut Store::new(vec![b.clone()], StoreConfig::default()),
                &inputs,
                opts,
            );
            assert_eq!(x, y, "seed {seed} auto_timers {auto}: inputs {inputs:?}");
            compared += x.len();
        }
    }
    compared
}

/// Services are not `Clone`; this keeps the signature above readable.
fn clone_load(s: &Service) -> Service {
    SOURCES.with(|m| {
        let m = m.borrow();
        let src = m
            .iter()
            .find(|(n, _)| n == &s.data.name)
            .map(|(_, s)| s.clone());
        load(&s.data.name, &src.unwrap())
    })
}

thread_local! {
    static SOURCES: std::cell::RefCell<Vec<(String, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn keep(name: &str, src: &str) -> Service {
    let src = src.replace("<Name>h2hack</Name>", &format!("<Name>{name}</Name>"));
    SOURCES.with(|m| m.borrow_mut().push((name.to_string(), src.clone())));
    load(name, &src)
}

#[test]
fn seed_5_1_2_2_listing_verbatim_in_cdata_runs_as_the_shipped_expression() {
    // The listing as printed, pasted unchanged into CDATA (its first `<` is literal, the rest
    // entities: both are read as the characters).
    let xq = keep(
        "h2hack-xquery",
        &with_xquery(&format!("<![CDATA[{S5_1_2_2}]]>")),
    );
    let c = &xq.data.composite[0];
    assert_eq!(c.name, "allh2hackmessagesreceived");
    assert_eq!(c.xquery.as_deref(), Some(S5_1_2_2));
    assert_eq!(
        c.expr,
        "forall i in node.children : exists m in h2hackmessage : i == m.SourceAddress"
    );
    let shipped = keep("h2hack", H2HACK);
    assert!(xq.is_flat());
    let n = same_outputs(&shipped, &xq, 1);
    assert!(n > 10_000, "only {n} outputs compared");
}

#[test]
fn seed_5_1_2_2_listing_as_the_seed_meant_it_in_xml_runs_as_the_shipped_expression() {
    // In XML, as the seed's text says it was written: `<` and `>` of the constructors as
    // &lt; and &gt; (the printed listing lost one of them).
    let meant = S5_1_2_2.replace("<out&gt;", "&lt;out&gt;");
    let xq = keep("h2hack-xquery-xml", &with_xquery(&meant));
    assert_eq!(
        xq.data.composite[0].expr,
        "forall i in node.children : exists m in h2hackmessage : i == m.SourceAddress"
    );
    let shipped = keep("h2hack", H2HACK);
    same_outputs(&shipped, &xq, 1);
}

#[test]
fn seed_3_3_listing_is_refused_naming_doc() {
    let src = with_xquery(&format!("<![CDATA[{S3_3}]]>"));
    let e = Service::load("h.scxml", &src).unwrap_err().to_string();
    let line = src
        .lines()
        .position(|l| l.contains("doc(\"nodes.xml\")"))
        .unwrap()
        + 1;
    let col = src.lines().nth(line - 1).unwrap().find("doc(").unwrap() + 1;
    assert!(
        e.contains(&format!(
            "h.scxml:{line}:{col}: error: composite event `allh2hackmessagesreceived`: XQuery function `doc()`"
        )),
        "{e}"
    );
}

/// A service with the three composite events of seed §4.2.1.2 over the ACKs (type 2) from
/// the children, each answered by a control message of its own type (10, 11, 12).
fn three(all: &str, some: &str, none: &str, tag: &str) -> String {
    format!(
        r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:action="http://my.custom-actions.domain/action" initial="s">
  <datamodel>
    <data name="service"><Name>{tag}</Name><ServiceID>1</ServiceID></data>
    <data name="events"><Basic>
      <Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
      <Event name="payload"><Message><MessageType>-128</MessageType></Message></Event>
    </Basic><Composite>
      <Event name="all"><ConstituentBasicEvent>ack</ConstituentBasicEvent><ConstituentBasicEvent>payload</ConstituentBasicEvent>{all}</Event>
      <Event name="some"><ConstituentBasicEvent>ack</ConstituentBasicEvent><ConstituentBasicEvent>payload</ConstituentBasicEvent>{some}</Event>
      <Event name="none"><ConstituentBasicEvent>ack</ConstituentBasicEvent><ConstituentBasicEvent>payload</ConstituentBasicEvent>{none}</Event>
    </Composite></data>
  </datamodel>
  <state id="s">
    <transition event="all"><action:sendControlMessage MessageType="10"/></transition>
    <transition event="some"><action:sendControlMessage MessageType="11"/></transition>
    <transition event="none"><action:sendControlMessage MessageType="12"/></transition>
    <transition event="ack payload"/>
  </state>
</scxml>"#
    )
}

#[test]
fn seed_4_2_1_2_examples_in_xquery_run_as_their_first_order_forms() {
    let fol = three(
        "<Expression>forall d in node.children : exists m in ack : m.source == d</Expression>",
        "<Expression>(exists d in node.children : exists m in ack : m.source == d) and not (forall d in node.children : exists m in ack : m.source == d)</Expression>",
        "<Expression>not exists d in node.children : exists m in ack : m.source == d</Expression>",
        "fol",
    );
    let xq = three(
        r#"<XQuery>every $d in //Node[last()]/Children/LogicalAddress satisfies $d = //Event[@name="ack"]/Message/SourceAddress</XQuery>"#,
        r#"<XQuery>let $acked := for $d in //Node[last()]/Children/LogicalAddress where not($d = //Event[@name="ack"]/Message/SourceAddress) return &lt;out&gt;false&lt;/out&gt;
                   return (some $c in //Node[last()]/Children/LogicalAddress satisfies $c = //Event[@name="ack"]/Message/SourceAddress) and not($acked)</XQuery>"#,
        r#"<XQuery>count(//Node[last()]/Children/LogicalAddress) = 0 or empty(//Event[@name="ack"]) or (every $d in //Node[last()]/Children satisfies not(//Event[@name="ack"]/Message/SourceAddress = $d))</XQuery>"#,
        "xquery",
    );
    let a = keep("fol", &fol);
    let b = keep("xquery", &xq);
    let exprs: Vec<&str> = b.data.composite.iter().map(|c| c.expr.as_str()).collect();
    assert_eq!(
        exprs,
        [
            "forall d in node.children : exists m in ack : d == m.SourceAddress",
            "(exists c in node.children : exists m2 in ack : c == m2.SourceAddress) and (not forall d in node.children : exists m in ack : d == m.SourceAddress)",
            "(not exists x in node.children) or (not exists x2 in ack) or (forall d in node.children : not exists m in ack : m.SourceAddress == d)",
        ]
    );
    let n = same_outputs(&a, &b, 1);
    assert!(n > 5_000, "only {n} outputs compared");
}
