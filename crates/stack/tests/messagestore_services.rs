//! The `messagestore` kind's services (issue 16 §4): several spec files, read relative to the
//! stack file (not the working directory), ServiceIDs distinct, trusted keys well-formed.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use viastack_stack::{parse, standard_catalog, ParamValue};

fn specs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs")
}

/// A directory `conf/` holding the stack file and `svc/` holding copies of the specs.
fn tree(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("viastack-stack-ms-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("conf")).unwrap();
    std::fs::create_dir_all(d.join("svc")).unwrap();
    for f in ["h2hack.scxml", "dupelim.scxml"] {
        std::fs::copy(specs().join(f), d.join("svc").join(f)).unwrap();
    }
    d
}

fn stack(store: &str) -> String {
    format!(
        r#"[layers.dev]
kind = "device"
[layers.net]
kind = "overlay"
[layers.store]
kind = "messagestore"
{store}
[qos.o]
layers = ["dev", "net", "store"]
[channels.data]
qos = "o"
"#
    )
}

#[test]
fn several_services_are_read_relative_to_the_stack_file() {
    let d = tree("ok");
    let path = d.join("conf/s.toml");
    let src = stack("service = \"../svc/h2hack.scxml, ../svc/dupelim.scxml\"\nknown_at = \"0,3\"");
    // The working directory is the crate's: `../svc` is found only through the stack file.
    let file =
        parse(path.to_str().unwrap(), &src, &standard_catalog()).unwrap_or_else(|e| panic!("{e}"));
    let store = &file.layers["store"].params;
    match store.get("service") {
        Some(ParamValue::Paths(ps)) => assert_eq!(
            ps,
            &vec![
                d.join("conf/../svc/h2hack.scxml"),
                d.join("conf/../svc/dupelim.scxml")
            ]
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_file_duplicate_service_id_or_bad_key_is_refused() {
    let d = tree("bad");
    let path = d.join("conf/s.toml");
    let catalog = standard_catalog();
    let err = |store: &str| {
        parse(path.to_str().unwrap(), &stack(store), &catalog)
            .unwrap_err()
            .to_string()
    };
    let e = err("service = \"svc/h2hack.scxml\"");
    assert!(e.contains("cannot read"), "{e}");
    let e = err("service = \"../svc/h2hack.scxml, ../svc/h2hack.scxml\"");
    assert!(e.contains("ServiceID 1 is already used"), "{e}");
    let e = err("service = \"\"");
    assert!(e.contains("no service given"), "{e}");
    let e = err("service = \"../svc/h2hack.scxml\"\ntrusted_keys = \"abcd\"");
    assert!(
        e.contains("trusted_keys") && e.contains("64 hex digits"),
        "{e}"
    );
    let e = err("service = \"../svc/h2hack.scxml\"\nknown_at = \"x\"");
    assert!(e.contains("not a node id"), "{e}");
    std::fs::write(d.join("svc/h2hack.scxml.sig"), "ed25519 zz\n").unwrap();
    let e = err("service = \"../svc/h2hack.scxml\"");
    assert!(e.contains("h2hack.scxml.sig"), "{e}");
}
