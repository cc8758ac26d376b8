//! `viastack compose PROPERTY…` end to end (seed 004's "properties-in, protocol-out"): the
//! binary builds a stack file from the layer catalog's declared properties, prints it and
//! `viastack check` accepts what it printed; impossible combinations are refused with the
//! reason and a failing exit status, nothing on stdout.
#![allow(clippy::unwrap_used)]

mod common;

#[test]
fn compose_prints_a_stack_that_check_accepts() {
    let out = common::viastack(&["compose", "reliable", "ordered", "multicast"]);
    let text = common::text(&out.stdout);
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(text.starts_with("# Composed by `viastack compose reliable ordered multicast`"));
    assert!(text.contains("seed 004"), "{text}");
    for kind in [
        "interface",
        "igmp",
        "mcast-reliable",
        "mcast-order",
        "mcast-forward",
    ] {
        assert!(
            text.contains(&format!("kind = \"{kind}\"")),
            "{kind} missing:\n{text}"
        );
    }
    // Property-oriented components by slot: the order layer above the reliable one.
    let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
    assert!(at("mcast-order") > at("mcast-reliable"), "{text}");
    let path = common::write("compose", "accepted", "composed.toml", &text);
    let check = common::viastack(&["check", path.to_str().unwrap()]);
    assert!(
        check.status.success(),
        "check refused the composed stack:\n{}\n{text}",
        common::text(&check.stderr)
    );
}

#[test]
fn compose_refuses_impossible_combinations_with_the_reason() {
    for (props, reason) in [
        (&["ordered", "multicast"][..], "`ordered` needs `reliable`"),
        (&["multicast", "unicast"][..], "exclude each other"),
        (
            &["reliable", "teleport"][..],
            "`teleport` is not a property",
        ),
    ] {
        let mut args = vec!["compose"];
        args.extend_from_slice(props);
        let out = common::viastack(&args);
        let err = common::text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{props:?}: {err}");
        assert!(err.contains("compose: refused:"), "{props:?}: {err}");
        assert!(err.contains(reason), "{props:?}: {err}");
        assert!(out.stdout.is_empty(), "{props:?} printed a stack");
    }
}
