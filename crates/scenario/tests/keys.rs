//! Nodes whose `encrypt` layer reads its key from a key file (named relative to the stack file,
//! as a deployment writes it) talk to each other in the simulator: over a lossy link, with
//! reliable FIFO above encryption, every message arrives once and in order, and no packet fails
//! authentication. Every assertion names its seed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use viastack_scenario::{run, RunOptions};

const KEY: &str = "9a1e6d0c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";

/// The stack file's text: device, encrypt (key from `keys/group.key`), reliable FIFO; two
/// nodes sending to each other over a link that loses 10%.
const STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.enc]
kind = "encrypt"
key_file = "keys/group.key"
[layers.rel]
kind = "reliable-fifo"
[qos.q]
layers = ["dev", "enc", "rel"]
[channels.data]
qos = "q"
[scenario]
nodes = 2
duration = "2s"
expect = "reliable-fifo"
[scenario.link]
latency = "1ms"
loss = 0.1
[[scenario.workload]]
channel = "data"
messages = 50
size = 200
interval = "2ms"
"#;

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn two_nodes_keyed_from_a_key_file_communicate_over_a_lossy_link() {
    let dir =
        Scratch(std::env::temp_dir().join(format!("viastack-sim-keys-{}", std::process::id())));
    std::fs::create_dir_all(dir.0.join("keys")).unwrap();
    let key_file = dir.0.join("keys/group.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let stack_path = dir.0.join("stack.toml").display().to_string();
    let catalog = viastack_stack::standard_catalog();
    let file =
        viastack_stack::parse(&stack_path, STACK, &catalog).unwrap_or_else(|d| panic!("{d}"));
    for seed in 0..20u64 {
        let options = RunOptions {
            seed: Some(seed),
            duration: None,
        };
        let r =
            run(&file, &catalog, &options, |_| {}).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(r.verdict.holds, "seed {seed}: {r}");
        assert_eq!(r.sent, 100, "seed {seed}: {r}");
        assert_eq!(r.delivered, r.sent, "seed {seed}: {r}");
        assert!(
            r.network.lost > 0,
            "seed {seed}: the link lost nothing: {r}"
        );
        assert_eq!(r.counters.get("enc.bad_tag"), None, "seed {seed}: {r}");
    }
}
