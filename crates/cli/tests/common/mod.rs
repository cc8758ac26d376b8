//! What the CLI's end-to-end tests share: the repository root, running the built `viastack`
//! binary there, and scratch files. (Each test binary uses a subset.)
#![allow(clippy::unwrap_used, dead_code)]

pub mod chat;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root directory.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the built `viastack` with `args` in the repository root, without `VIASTACK_LOG`.
pub fn viastack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(args)
        .current_dir(root())
        .env_remove("VIASTACK_LOG")
        .output()
        .unwrap()
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// A scratch directory of this test process, per `group` (and test).
pub fn scratch(group: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("viastack-{group}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `src` to `name` in the scratch directory of `group`, `test`.
pub fn write(group: &str, test: &str, name: &str, src: &str) -> PathBuf {
    let p = scratch(&format!("{group}-{test}")).join(name);
    std::fs::write(&p, src).unwrap();
    p
}
