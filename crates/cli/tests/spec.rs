//! End-to-end tests of `viastack spec check|dot|conformance`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use common::{root, text, viastack};

/// A file in a per-test scratch directory.
fn write(test: &str, name: &str, src: &str) -> PathBuf {
    common::write("spec-cli", test, name, src)
}

const GOOD: &str = r#"<?xml version="1.0"?>
<scxml version="1.0" xmlns="http://www.w3.org/2005/07/scxml"
       xmlns:action="http://my.custom-actions.domain/action" initialstate="init">
  <state id="init">
    <transition event="payloadmessage" target="waitack">
      <action:execute name="setTimer"/>
    </transition>
  </state>
  <state id="waitack">
    <transition event="h2hackmessage" target="done"/>
  </state>
  <final id="done"/>
</scxml>
"#;

#[test]
fn check_accepts_a_good_chart() {
    let p = write("good", "good.scxml", GOOD);
    let o = viastack(&["spec", "check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("ok: 3 states"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn check_names_a_host_datamodel() {
    let src = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" version="1.0" datamodel="ecmascript" initial="a">
  <datamodel><data id="x" expr="1"/></datamodel>
  <state id="a"><transition cond="x + 1 == 2" target="b"/></state>
  <final id="b"/>
</scxml>
"#;
    let p = write("ecma", "ecma.scxml", src);
    let o = viastack(&["spec", "check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("datamodel ecmascript"),
        "{}",
        text(&o.stdout)
    );
    let good = write("good-dm", "good.scxml", GOOD);
    let o = viastack(&["spec", "check", good.to_str().unwrap()]);
    assert!(
        !text(&o.stdout).contains("datamodel"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn check_errors_exit_non_zero_with_file_line_col() {
    let src = "<scxml xmlns=\"http://www.w3.org/2005/07/scxml\" initial=\"a\">\n  <state id=\"a\">\n    <transition event=\"e\" target=\"nowhere\"/>\n  </state>\n  <state id=\"a\"/>\n</scxml>\n";
    let p = write("bad", "bad.scxml", src);
    let o = viastack(&["spec", "check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    let file = p.display().to_string();
    assert!(
        err.contains(&format!("{file}:3:35: error: unknown target \"nowhere\"")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:5:14: error: duplicate state id \"a\"")),
        "{err}"
    );
}

#[test]
fn check_runs_the_service_checks_on_a_delivery_service() {
    let good = std::fs::read_to_string(root().join("specs/dupelim.scxml")).unwrap();
    let o = viastack(&["spec", "check", "specs/dupelim.scxml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("ok: service,"),
        "{}",
        text(&o.stdout)
    );
    // An action parameter the chart alone would accept as an opaque custom element.
    let needle = "<action:setTimer id=\"5\" ms=\"10000\"/>";
    assert!(good.contains(needle));
    let bad = good.replace(needle, "<action:setTimer id=\"5\" seconds=\"10\"/>");
    let line = bad.lines().position(|l| l.contains("seconds=")).unwrap() + 1;
    let p = write("service", "dupelim.scxml", &bad);
    let o = viastack(&["spec", "check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("{}:{line}:", p.display())) && err.contains("error"),
        "{err}"
    );
}

#[test]
fn check_prints_warnings_but_succeeds() {
    let src = GOOD.replace(
        "<final id=\"done\"/>",
        "<state id=\"lost\"/><final id=\"done\"/>",
    );
    let p = write("warn", "warn.scxml", &src);
    let o = viastack(&["spec", "check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("warning: state \"lost\" is unreachable"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn dot_labels_transitions_with_event_and_actions() {
    let p = write("dot", "h.scxml", GOOD);
    let o = viastack(&["spec", "dot", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(out.starts_with("digraph"), "{out}");
    assert!(
        out.contains(r#""init" -> "waitack" [label="payloadmessage / action:execute setTimer"];"#),
        "{out}"
    );
    assert!(out.contains(r#""done" [shape=doublecircle];"#), "{out}");
}

fn suite() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("VIASTACK_SCXML_W3C") {
        return Some(PathBuf::from(d));
    }
    let r = root().canonicalize().ok()?;
    [
        r.join("../shared/conformance/scxml-w3c"),
        r.parent()?.join("shared/conformance/scxml-w3c"),
    ]
    .into_iter()
    .find(|d| d.join("manifest.json").is_file())
}

#[test]
fn conformance_prints_per_test_results_and_totals() {
    let Some(dir) = suite() else {
        println!("skipped: W3C SCXML suite not found (set VIASTACK_SCXML_W3C)");
        return;
    };
    let o = viastack(&["spec", "conformance", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    let out = text(&o.stdout);
    let last = out.lines().last().unwrap();
    let words: Vec<&str> = last.split_whitespace().collect();
    assert_eq!(words.len(), 8, "{last}");
    assert_eq!(
        (words[1], words[3], words[5], words[7]),
        ("passed,", "failed,", "skipped,", "excluded")
    );
    assert_eq!((words[2], words[4]), ("0", "0"), "{out}");
    assert!(words[0].parse::<usize>().unwrap() >= 119, "{last}");
    // The HTTP I/O processor's test is reported as excluded, with the reason.
    assert!(
        out.lines()
            .any(|l| l.starts_with("201 excluded: needs the Basic HTTP Event I/O Processor")),
        "{out}"
    );

    let o = viastack(&["spec", "conformance", dir.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["failed"], 0);
    assert_eq!(v["skipped"], 0);
    assert_eq!(v["excluded"], 1);
    assert_eq!(v["tests"].as_array().unwrap().len(), 121);
}

#[test]
fn conformance_on_a_folder_without_manifest_fails() {
    let p = write("nomanifest", "x.txt", "");
    let o = viastack(&["spec", "conformance", p.parent().unwrap().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("manifest.json"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn compile_prints_rust_for_a_flat_service_and_refuses_the_others() {
    let o = viastack(&["spec", "compile", "specs/h2hack.scxml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let code = text(&o.stdout);
    // The same text the build of viastack-services compiles (and tests against the store).
    assert!(code.contains("pub const SERVICE_ID: u32 = 1;"), "{code}");
    assert!(code.contains("impl Runner for Compiled"), "{code}");
    assert!(code.contains("\"waitack\""), "{code}");
    // A service with a datamodel, `cond`s and `_event.data` reads (issue 15 §2) compiles too.
    let o = viastack(&["spec", "compile", "specs/leakybucket.scxml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let code = text(&o.stdout);
    assert!(code.contains("pub const SERVICE_ID: u32 = 9;"), "{code}");
    assert!(code.contains("native::assign(&mut inst.vars"), "{code}");
    // A chart the flat machine refuses (a `<raise>`) is refused, with the reason.
    let src = include_str!("../../../specs/ordering.scxml").replace(
        r#"<transition event="idle" target="closed"/>"#,
        r#"<transition event="idle" target="closed"><raise event="idle"/></transition>"#,
    );
    let p = write("compile-refused", "raise.scxml", &src);
    let o = viastack(&["spec", "compile", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr)
            .contains("cannot be compiled to Rust: the chart is not a flat state machine"),
        "{}",
        text(&o.stderr)
    );
}

/// `spec check` names the path each shipped service runs on: the flat machine for all nine.
#[test]
fn check_says_every_shipped_service_runs_on_the_flat_machine() {
    for name in [
        "dupelim",
        "e2eack",
        "h2hack",
        "handshake",
        "incast",
        "leakybucket",
        "ordering",
        "selection",
        "sync",
    ] {
        let o = viastack(&["spec", "check", &format!("specs/{name}.scxml")]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o.stderr));
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert!(all.contains("runs on the flat machine"), "{name}: {all}");
    }
}

/// `--datamodel ecmascript` rewrites the placeholders with confEcma.xsl and runs the test on
/// the ECMAScript datamodel: a test whose own condition is ECMAScript passes there and fails
/// in viastack's language.
#[test]
fn conformance_in_ecmascript() {
    let manifest = write(
        "ecma",
        "manifest.json",
        r#"[{"id": "9001", "conformance": "mandatory", "start": ["test9001.txml"], "deps": []}]"#,
    );
    let dir = manifest.parent().unwrap();
    std::fs::create_dir_all(dir.join("txml")).unwrap();
    std::fs::write(
        dir.join("txml/test9001.txml"),
        r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:conf="http://www.w3.org/2005/scxml-conformance" conf:datamodel="" initial="s0" version="1.0">
  <datamodel><data conf:id="1" conf:expr="[1,2,3]"/></datamodel>
  <state id="s0"><onentry><conf:extendArray id="1"/></onentry>
    <transition cond="Var1 instanceof Array &amp;&amp; Var1.length === 4 &amp;&amp; Var1[3] === 4" conf:targetpass=""/>
    <transition conf:targetfail=""/></state>
  <conf:pass/><conf:fail/></scxml>"#,
    )
    .unwrap();
    let d = dir.to_str().unwrap();
    let o = viastack(&["spec", "conformance", d, "--datamodel", "ecmascript"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("9001 pass"), "{out}");
    assert!(
        out.ends_with("1 passed, 0 failed, 0 skipped, 0 excluded\n"),
        "{out}"
    );
    let o = viastack(&["spec", "conformance", d]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("9001 fail"), "{}", text(&o.stdout));
    let o = viastack(&["spec", "conformance", d, "--datamodel", "lua"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
