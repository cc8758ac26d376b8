//! Compiles the shipped delivery services that the generator handles (`specs/*.scxml`) to Rust
//! (`viastack_spec::service::codegen`), one `$OUT_DIR/<name>.rs` each, and lists them with
//! the generator's reason for each one it refuses in `$OUT_DIR/catalog.rs`.

use std::fmt::Write as _;
use std::path::Path;

use viastack_spec::service::{codegen, Service};

/// The shipped services, in `specs/`.
const SERVICES: &[&str] = &[
    "dupelim",
    "e2eack",
    "h2hack",
    "handshake",
    "incast",
    "leakybucket",
    "ordering",
    "selection",
    "sync",
];

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let specs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs");
    let mut catalog = String::from("/// Services compiled to Rust, and those the generator refused with its reason.\npub const CATALOG: &[(&str, Result<(), &str>)] = &[\n");
    for name in SERVICES {
        let path = specs.join(format!("{name}.scxml"));
        println!("cargo:rerun-if-changed={}", path.display());
        let src =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = format!("specs/{name}.scxml");
        let (svc, _) = Service::load(&file, &src).unwrap_or_else(|e| panic!("{e}"));
        let target = Path::new(&out).join(format!("{name}.rs"));
        match codegen::rust(&svc, &file) {
            Ok(code) => {
                std::fs::write(&target, code)
                    .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
                let _ = writeln!(catalog, "    ({name:?}, Ok(())),");
            }
            Err(why) => {
                let _ = std::fs::remove_file(&target);
                let _ = writeln!(catalog, "    ({name:?}, Err({why:?})),");
            }
        }
    }
    catalog.push_str("];\n");
    let target = Path::new(&out).join("catalog.rs");
    std::fs::write(&target, catalog).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    println!("cargo:rerun-if-changed=build.rs");
}
