//! The W3C SCXML conformance suite: none fails, none is skipped, only the listed exclusions
//! (the HTTP Event I/O Processor's tests) are not run; and the placeholder table covers every
//! template of the W3C transformation.
//!
//! The test documents are read from the shared folder, never copied into the repository:
//! `$VIASTACK_SCXML_W3C`, else `../shared/conformance/scxml-w3c` beside the repository.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use viastack_spec::chart::conformance::{self, Outcome};

fn suite_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("VIASTACK_SCXML_W3C") {
        return Some(PathBuf::from(d));
    }
    // crates/spec → repository root → its parent.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut candidates = vec![root.join("../shared/conformance/scxml-w3c")];
    // A git worktree lives beside the main checkout: try the parent's shared folder too.
    if let Ok(canon) = root.canonicalize() {
        if let Some(parent) = canon.parent() {
            candidates.push(parent.join("shared/conformance/scxml-w3c"));
        }
    }
    candidates
        .into_iter()
        .find(|d| d.join("manifest.json").is_file())
}

#[test]
fn w3c_suite_passes_or_names_what_it_needs() {
    let Some(dir) = suite_dir() else {
        println!("skipped: W3C SCXML suite not found (set VIASTACK_SCXML_W3C or provide ../shared/conformance/scxml-w3c)");
        return;
    };
    let results = conformance::run_dir(&dir).unwrap();
    for r in &results {
        println!("{} {}", r.id, r.outcome);
    }
    // The same suite rewritten into ECMAScript (confEcma.xsl) on the ECMAScript datamodel.
    let ecma = conformance::run_dir_as(&dir, conformance::Datamodel::Ecmascript).unwrap();
    let te = conformance::totals(&ecma);
    println!("ECMAScript: {te}");
    let failed: Vec<String> = ecma
        .iter()
        .filter(|r| !matches!(r.outcome, Outcome::Pass | Outcome::Excluded(_)))
        .map(|r| format!("{} {}", r.id, r.outcome))
        .collect();
    assert!(failed.is_empty(), "ECMAScript:\n{}", failed.join("\n"));
    assert!(te.passed >= 119, "ECMAScript: only {te}");
    let t = conformance::totals(&results);
    println!("{t}");
    let failed: Vec<String> = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail(_)))
        .map(|r| format!("{} {}", r.id, r.outcome))
        .collect();
    assert!(failed.is_empty(), "failed tests:\n{}", failed.join("\n"));
    let skipped: Vec<String> = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Skipped(_)))
        .map(|r| format!("{} {}", r.id, r.outcome))
        .collect();
    assert!(skipped.is_empty(), "skipped tests:\n{}", skipped.join("\n"));
    // Only the listed exclusions are not run (in the shared folder: the HTTP processor's).
    for r in &results {
        if let Outcome::Excluded(_) = r.outcome {
            assert!(
                conformance::EXCLUDED.iter().any(|(id, _)| *id == r.id),
                "{}",
                r.id
            );
        }
    }
    assert!(t.passed >= 119, "only {t}");
    assert_eq!(t.passed + t.failed + t.skipped + t.excluded, results.len());
}

/// Every template of the W3C transformation `confEcma.xsl` (names in
/// `tests/data/w3c-conf-templates.txt`) is rewritten into viastack's language, except the
/// placeholders only the HTTP I/O processor's tests use (`HTTP_ONLY_PLACEHOLDERS`).
#[test]
fn every_conf_ecma_template_has_a_rewriting() {
    use std::collections::BTreeSet;
    use viastack_spec::chart::xml;
    let names = include_str!("data/w3c-conf-templates.txt");
    let mut checked = 0;
    for line in names.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (attr, name) = match line.strip_prefix("@conf:") {
            Some(n) => (true, n),
            None => (false, line.strip_prefix("conf:").unwrap()),
        };
        if conformance::HTTP_ONLY_PLACEHOLDERS.contains(&name) {
            continue;
        }
        let doc = if attr {
            format!(
                r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:conf="http://www.w3.org/2005/scxml-conformance"><state id="s"><onentry><send conf:{name}="1=1"/></onentry></state></scxml>"#
            )
        } else {
            format!(
                r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:conf="http://www.w3.org/2005/scxml-conformance"><state id="s"><onentry><conf:{name} id="1" id1="1" id2="2" name="e"/></onentry></state></scxml>"#
            )
        };
        let mut root = xml::read("t", &doc).unwrap();
        // The ECMAScript rewriting (confEcma.xsl itself) covers it too.
        let mut ecma = root.clone();
        let mut needs = BTreeSet::new();
        conformance::rewrite_ecma(&mut ecma, &mut needs);
        assert!(needs.is_empty(), "{line} (ECMAScript): {needs:?}");
        let mut needs = BTreeSet::new();
        conformance::rewrite(&mut root, &mut needs);
        assert!(needs.is_empty(), "{line}: {needs:?}");
        // Nothing of the conf: namespace is left.
        fn conf_left(e: &xml::Element) -> bool {
            e.ns == xml::CONF_NS
                || e.attrs
                    .iter()
                    .any(|a| a.ns.as_deref() == Some(xml::CONF_NS))
                || e.children.iter().any(conf_left)
        }
        assert!(!conf_left(&root), "{line}: a conf: placeholder is left");
        checked += 1;
    }
    assert_eq!(
        checked + conformance::HTTP_ONLY_PLACEHOLDERS.len(),
        110,
        "confEcma.xsl has 110 placeholder templates"
    );
}

/// The 40 W3C IRP tests written for the ECMAScript and XPath datamodels (committed under
/// `tests/data/w3c-datamodels/`, with the W3C licence note) all pass; changing what one of
/// them expects makes it fail, so the passes are not vacuous.
#[test]
fn the_ecmascript_and_xpath_datamodel_tests_pass() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/w3c-datamodels");
    let results = conformance::run_dir(&dir).unwrap();
    assert_eq!(results.len(), 40);
    let not_passed: Vec<String> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Pass)
        .map(|r| format!("{} {}", r.id, r.outcome))
        .collect();
    assert!(not_passed.is_empty(), "{}", not_passed.join("\n"));
    let txml = dir.join("txml");
    for (file, from, to) in [
        ("test444.txml", "++var1==2", "++var1==3"),
        ("test453.txml", "var1(2) == 3", "var1(2) == 4"),
        ("test557.txml", "== 'title2'", "== 'title1'"),
        ("test474.txml", "type=\"firstchild\"", "type=\"lastchild\""),
        ("test481.txml", "= 'Something'", "= 'Nothing'"),
        ("test483.txml", "@position = 1", "@position = 0"),
    ] {
        let src = std::fs::read_to_string(txml.join(file)).unwrap();
        assert!(src.contains(from), "{file}");
        let broken = src.replace(from, to);
        let outcome = conformance::run_document_in(&txml, file, &broken);
        assert!(matches!(outcome, Outcome::Fail(_)), "{file}: {outcome}");
    }
}
