//! Diagnostics: every validation error and verification warning at its `file:line:col`, with
//! what was expected.
#![allow(clippy::unwrap_used)]

use viastack_spec::chart::{
    self, verify::View, Chart, CustomElement, Diagnostic, Extension, NoExtension, OpaqueActions,
    Severity,
};

/// `line:col` (1-based) of the first occurrence of `marker` in `src`, plus `skip` characters.
fn at(src: &str, marker: &str, skip: usize) -> String {
    let off = src
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not in source"));
    let before = &src[..off];
    let line = before.matches('\n').count() + 1;
    let col = before.chars().rev().take_while(|&c| c != '\n').count() + 1 + skip;
    format!("{line}:{col}")
}

fn doc(body: &str) -> String {
    format!("<scxml xmlns=\"http://www.w3.org/2005/07/scxml\" xmlns:action=\"urn:act\"\n  {body}\n</scxml>\n")
}

/// Parses and compiles; returns every diagnostic as text.
fn diags(src: &str) -> Vec<String> {
    let d = match chart::parse("t.scxml", src) {
        Ok(doc) => match Chart::compile(&doc, &OpaqueActions) {
            Ok((_, w)) => w,
            Err(e) => e.0,
        },
        Err(e) => e.0,
    };
    d.iter().map(Diagnostic::to_string).collect()
}

fn expect(src: &str, marker: &str, skip: usize, severity: Severity, words: &[&str]) {
    let all = diags(src);
    let prefix = format!("t.scxml:{}: {severity}: ", at(src, marker, skip));
    let hit = all
        .iter()
        .find(|d| d.starts_with(&prefix) && words.iter().all(|w| d.contains(w)));
    assert!(
        hit.is_some(),
        "no `{prefix}…{words:?}` among:\n{}",
        all.join("\n")
    );
}

#[test]
fn malformed_xml() {
    let all = diags("<scxml>\n  <state>\n</scxml>");
    assert!(
        all[0].starts_with("t.scxml:3:1: error: malformed XML: expected 'state' tag"),
        "{all:?}"
    );
}

#[test]
fn unknown_target() {
    let src = doc(r#"initial="a"><state id="a"><transition event="e" target="a zz"/></state>"#);
    expect(
        &src,
        "a zz\"",
        2,
        Severity::Error,
        &["unknown target \"zz\"", "expected the id of a state: a"],
    );
}

#[test]
fn duplicate_state_id() {
    let src = doc("><state id=\"a\"/>\n  <final id=\"a\"/>");
    expect(
        &src,
        "a\"/>\n</scxml",
        0,
        Severity::Error,
        &["duplicate state id \"a\"", "first declared at 2:15"],
    );
}

#[test]
fn missing_initial_state() {
    let src = doc(r#"initialstate="start"><state id="a"/>"#);
    expect(
        &src,
        "start",
        0,
        Severity::Error,
        &["unknown initial state \"start\""],
    );
    let src = doc(r#"><state id="p" initial="q"><state id="c"/></state><state id="q"/>"#);
    expect(
        &src,
        "q\"><state id=\"c",
        0,
        Severity::Error,
        &["not a descendant of \"p\""],
    );
}

#[test]
fn unknown_element_and_attribute() {
    let src = doc(r#"><state id="a"><onentry><rase event="x"/></onentry></state>"#);
    expect(
        &src,
        "<rase",
        0,
        Severity::Error,
        &[
            "unknown element <rase> in <onentry>",
            "expected executable content",
        ],
    );
    let src = doc(r#"><state id="a" colour="red"/>"#);
    expect(
        &src,
        "red",
        0,
        Severity::Error,
        &[
            "unknown attribute \"colour\" on <state>",
            "expected one of: id, initial",
        ],
    );
}

#[test]
fn bad_expressions_point_into_the_expression() {
    let src = doc(r#"><state id="a"><transition event="e" cond="x == = 1" target="a"/></state>"#);
    expect(
        &src,
        "x == = 1",
        5,
        Severity::Error,
        &[
            "bad expression \"x == = 1\"",
            "unexpected character '='",
            "expected",
        ],
    );
    let src = doc(r#"><state id="a"><transition cond="In('nowhere')" target="a"/></state>"#);
    expect(
        &src,
        "In('nowhere')",
        0,
        Severity::Error,
        &["no state with id \"nowhere\""],
    );
    let src =
        doc(r#"><state id="a"><onentry><assign location="1 + 1" expr="2"/></onentry></state>"#);
    expect(&src, "1 + 1", 0, Severity::Error, &["is not a location"]);
    let src = doc(r#"><state id="a"><onentry><send event="t" delay="soon"/></onentry></state>"#);
    expect(
        &src,
        "soon",
        0,
        Severity::Error,
        &["bad delay \"soon\"", "expected e.g. 1s"],
    );
}

#[test]
fn unreachable_state_is_a_warning() {
    let src = doc(
        r#"initial="a"><state id="a"><transition event="e" target="f"/></state><state id="island"/><final id="f"/>"#,
    );
    expect(
        &src,
        "<state id=\"island",
        0,
        Severity::Warning,
        &["state \"island\" is unreachable"],
    );
}

#[test]
fn no_path_to_the_end_is_a_warning() {
    let src = doc(
        r#"initial="a"><state id="a"><transition event="e" target="trap"/><transition event="f" target="f"/></state><state id="trap"/><final id="f"/>"#,
    );
    expect(
        &src,
        "<state id=\"trap",
        0,
        Severity::Warning,
        &["no path from state \"trap\""],
    );
    // A terminating custom action counts as an end.
    let src = doc(
        r#"initial="a"><state id="a"><transition event="e" target="t"/><transition event="f" target="f"/></state><state id="t"><onentry><action:terminate/></onentry></state><final id="f"/>"#,
    );
    assert!(
        !diags(&src).iter().any(|d| d.contains("no path")),
        "{:?}",
        diags(&src)
    );
}

#[test]
fn events_and_timers_handled_nowhere_are_warnings() {
    let src = doc(
        r#"initial="a"><state id="a"><onentry><raise event="lost"/><send event="tick" delay="1s"/></onentry><transition event="go" target="f"/></state><final id="f"/>"#,
    );
    expect(
        &src,
        "<raise",
        0,
        Severity::Warning,
        &["event \"lost\" is sent to the machine but no transition handles it"],
    );
    expect(
        &src,
        "<send",
        0,
        Severity::Warning,
        &["timer event \"tick\""],
    );
}

#[test]
fn shadowed_transition_is_a_warning() {
    let src = doc("initial=\"a\"><state id=\"a\">\n  <transition event=\"m\" target=\"f\"/>\n  <transition event=\"m.ack\" target=\"a\"/>\n  <transition event=\"m\" cond=\"true\" target=\"a\"/></state><final id=\"f\"/>");
    expect(
        &src,
        "<transition event=\"m.ack",
        0,
        Severity::Warning,
        &["never taken", "at 3:3"],
    );
}

struct Declared;
impl Extension for Declared {
    type Action = ();
    fn compile_action(&self, _el: &CustomElement) -> Result<(), String> {
        Ok(())
    }
    fn external_events(&self) -> Option<Vec<String>> {
        Some(vec!["payloadmessage".into(), "ackmessage".into()])
    }
    fn verify(&self, view: &View<'_>, out: &mut Vec<Diagnostic>) {
        if !view.handled("ackmessage") {
            out.push(Diagnostic::warning(
                view.file(),
                chart::Pos::new(1, 1),
                "ackmessage never handled",
            ));
        }
    }
}

#[test]
fn undefined_event_is_an_error_when_events_are_declared() {
    let src = doc(
        r#"initial="a"><state id="a"><transition event="payloadmesage" target="f"/></state><final id="f"/>"#,
    );
    let d = chart::parse("t.scxml", &src).unwrap();
    let err = Chart::compile(&d, &Declared).unwrap_err().to_string();
    let want = format!("t.scxml:{}: error: undefined event \"payloadmesage\" (expected one of the declared events: payloadmessage, ackmessage)", at(&src, "<transition", 0));
    assert!(err.contains(&want), "{err}");
    // And the extension's own rule runs on a valid chart.
    let ok = src.replace("payloadmesage", "payloadmessage");
    let (_, w) = Chart::compile(&chart::parse("t.scxml", &ok).unwrap(), &Declared).unwrap();
    assert!(
        w.iter().any(|d| d.message == "ackmessage never handled"),
        "{w:?}"
    );
}

#[test]
fn custom_elements_need_an_extension() {
    let src = doc(r#"><state id="a"><onentry><action:send/></onentry></state>"#);
    let d = chart::parse("t.scxml", &src).unwrap();
    let err = Chart::compile(&d, &NoExtension).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "t.scxml:{}: error: unknown element <send>",
            at(&src, "<action:send", 0)
        )),
        "{err}"
    );
}

#[test]
fn garbage_never_panics() {
    for src in [
        "",
        "<",
        "<scxml/>",
        "<x/>",
        "<scxml><state id=''/></scxml>",
        "<scxml><parallel/></scxml>",
        "<scxml><state><history><transition target='nowhere'/></history></state></scxml>",
        &format!("{}{}", "<state>".repeat(300), "</state>".repeat(300)),
    ] {
        let _ = diags(src);
    }
}

#[test]
fn initial_element_must_target_a_descendant_and_events_appear_once() {
    let src = doc(
        r#"><state id="p"><initial><transition target="q"/></initial><state id="c"/></state><state id="q"/>"#,
    );
    expect(
        &src,
        "q\"/></initial>",
        0,
        Severity::Error,
        &["initial state \"q\" is not a descendant of \"p\""],
    );
    let src = doc(r#"><state id="a"><transition event="x y x" target="a"/></state>"#);
    expect(
        &src,
        "x y x",
        0,
        Severity::Warning,
        &["event descriptor \"x\" listed twice"],
    );
}

#[test]
fn a_chart_too_large_for_its_table_is_rejected() {
    let mut body = String::from("initial=\"s0\">");
    for i in 0..2100 {
        body.push_str(&format!(
            "<state id=\"s{i}\"><transition event=\"e{i}\" target=\"s{}\"/></state>",
            (i + 1) % 2100
        ));
    }
    let src = doc(&body);
    let all = diags(&src);
    assert!(
        all.iter()
            .any(|d| d.starts_with("t.scxml:1:1: error: chart too large: 2100 states")),
        "{:?}",
        &all[..all.len().min(3)]
    );
}

#[test]
fn a_long_chain_to_the_end_verifies_quickly() {
    // States listed against the direction of their transitions: the backwards search still
    // visits each state once.
    let mut body = String::from("initial=\"s1999\"><final id=\"s0\"/>");
    for i in 1..2000 {
        body.push_str(&format!(
            "<state id=\"s{i}\"><transition event=\"e\" target=\"s{}\"/></state>",
            i - 1
        ));
    }
    let src = doc(&body);
    let all = diags(&src);
    assert!(
        !all.iter().any(|d| d.contains("no path")),
        "{:?}",
        &all[..all.len().min(3)]
    );
}
