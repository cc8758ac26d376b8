//! Compiles the shipped delivery services that the generator handles (`specs/*.scxml`) to Rust
//! (`viastack_spec::service::codegen`), one `$OUT_DIR/<name>.rs` each, and lists them with
//! the generator's reason for each one it refuses in `$OUT_DIR/catalog.rs`. The generator's
//! test specifications (`crates/spec/tests/data/codegen/*.scxml`, the constructs it used to
//! refuse) go to `$OUT_DIR/gaps.rs`, a module each (`viastack_services::gaps`).

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
    gaps(&out);
    println!("cargo:rerun-if-changed=build.rs");
}

/// The generator's test specifications: `$OUT_DIR/gaps.rs` holds a module per specification
/// the generator accepts and `GAPS`, each name with the generator's reason when refused (the
/// test comparing them with the store then fails to find its module).
fn gaps(out: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/tests/data/codegen");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_suffix(".scxml").map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut mods = String::new();
    let mut list = String::from("/// The generator's test specifications, and its reason for each it refused.\npub const GAPS: &[(&str, Result<(), &str>)] = &[\n");
    for name in &names {
        let path = dir.join(format!("{name}.scxml"));
        println!("cargo:rerun-if-changed={}", path.display());
        let src =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = format!("crates/spec/tests/data/codegen/{name}.scxml");
        let (svc, _) = Service::load(&file, &src).unwrap_or_else(|e| panic!("{e}"));
        let target = Path::new(out).join(format!("gap_{name}.rs"));
        match codegen::rust(&svc, &file) {
            Ok(code) => {
                std::fs::write(&target, code)
                    .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
                let _ = writeln!(
                    mods,
                    "/// `{file}` compiled.\npub mod {name} {{\n    include!(concat!(env!(\"OUT_DIR\"), \"/gap_{name}.rs\"));\n}}"
                );
                let _ = writeln!(list, "    ({name:?}, Ok(())),");
            }
            Err(why) => {
                let _ = std::fs::remove_file(&target);
                let _ = writeln!(list, "    ({name:?}, Err({why:?})),");
            }
        }
    }
    list.push_str("];\n");
    let target = Path::new(out).join("gaps.rs");
    std::fs::write(&target, format!("{list}\n{mods}"))
        .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
}
