//! Bad input never crashes the parser (DESIGN.md §4.6): random bytes and random mutations of a
//! valid file give `Ok` or `Err`, never a panic; every error names the file and a line within
//! it.
#![allow(clippy::unwrap_used)]

mod common;

use proptest::prelude::*;
use viastack_stack::parse;

const TOKENS: &[&str] = &[
    "[",
    "]",
    "[[",
    "]]",
    "=",
    "\"",
    "{",
    "}",
    ",",
    ".",
    "\n",
    " ",
    "#",
    "0",
    "-1",
    "1.5",
    "1e400",
    "true",
    "\"10ms\"",
    "\"64KiB\"",
    "\"1Gbit\"",
    "99999999999999999999",
    "1979-05-27",
    "[layers.x]",
    "kind",
    "ghost",
    "sim-device",
    "fragment",
    "needy",
    "layers",
    "qos",
    "channels",
    "bind",
    "sessions",
    "scenario",
    "nodes",
    "[[scenario.workload]]",
    "groups",
    "senders",
    "\"\"",
    "\"µs\"",
    "'",
    "\\",
    "\u{0}",
    "é",
];

fn check(src: &str) {
    let lines = src.split('\n').count().max(1);
    match parse("f.toml", src, &common::catalog()) {
        Ok(_) => {}
        Err(d) => {
            assert!(!d.0.is_empty());
            for x in &d.0 {
                assert_eq!(x.file, "f.toml");
                assert!(
                    x.line >= 1 && x.line <= lines,
                    "line {} of {lines}: {x}",
                    x.line
                );
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    Swap(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0usize..20).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Edit::Insert(a, t)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap(a, b)),
    ]
}

fn apply(src: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = src.chars().collect();
    for e in edits {
        let len = chars.len().max(1);
        match *e {
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
            Edit::Insert(at, t) => {
                let at = at % (chars.len() + 1);
                for (i, c) in TOKENS[t].chars().enumerate() {
                    chars.insert(at + i, c);
                }
            }
            Edit::Swap(a, b) => {
                if !chars.is_empty() {
                    let (a, b) = (a % chars.len(), b % chars.len());
                    chars.swap(a, b);
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_tokens_never_panic(toks in proptest::collection::vec(0..TOKENS.len(), 0..60)) {
        let src: String = toks.iter().map(|t| TOKENS[*t]).collect();
        check(&src);
    }

    #[test]
    fn mutated_valid_files_never_panic(edits in proptest::collection::vec(edit(), 1..8)) {
        check(&apply(common::EXAMPLE, &edits));
    }
}

#[test]
fn the_example_itself_parses() {
    parse("f.toml", common::EXAMPLE, &common::catalog()).unwrap();
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!("a = {}{}", "[".repeat(100_000), "]".repeat(100_000));
    check(&deep);
    let deep = format!("a = {}1{}", "{ b = ".repeat(10_000), " }".repeat(10_000));
    check(&deep);
    let dotted = format!("{} = 1", vec!["k"; 200_000].join("."));
    check(&dotted);
}
