//! `reliable-fifo`'s `give_up_on_suspect` in the simulator: over a shared `heartbeat` below it,
//! a crashed peer's pending messages are reported `PeerUnreachable` as soon as the detector
//! suspects the peer, not after `max_retries` backed-off timeouts (which take far longer than
//! the run); without the option, the detector's notice passes by and the reliable layer keeps
//! retrying.
#![allow(clippy::unwrap_used)]

use viastack_kernel::{Duration, Instant, NodeId};
use viastack_scenario::{run_recorded, RunOptions};

fn stack(give_up: bool) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.fd]
kind = "heartbeat"
interval = "100ms"
timeout = "500ms"
[layers.rel]
kind = "reliable-fifo"
give_up_on_suspect = {give_up}
[qos.data]
layers = ["dev", "fd", "rel"]
[channels.data]
qos = "data"
[scenario]
nodes = 3
duration = "4s"
expect = "none"
[scenario.link]
latency = "5ms"
[[scenario.crash]]
node = 2
at = "1s"
[[scenario.workload]]
channel = "data"
messages = 35
size = 64
interval = "100ms"
"#
    )
}

/// When node 0 got `Suspect(n2)` and `PeerUnreachable(n2)`, if it did.
fn notices_at_node_0(give_up: bool, seed: u64) -> (Option<Instant>, Option<Instant>) {
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("give-up.toml", &stack(give_up), &catalog)
        .unwrap_or_else(|d| panic!("{d}"));
    let options = RunOptions {
        seed: Some(seed),
        duration: None,
    };
    let (_, rec) = run_recorded(&file, &catalog, &options, |_| {})
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let log = rec.notice_log.get(&NodeId(0)).cloned().unwrap_or_default();
    let first = |name: &str| {
        log.iter()
            .find(|r| r.name == name && r.peer == Some(NodeId(2)))
            .map(|r| r.at)
    };
    (first("Suspect"), first("PeerUnreachable"))
}

#[test]
fn a_suspected_peer_is_given_up_at_once_with_the_option() {
    for seed in 0..20 {
        let (suspect, unreachable) = notices_at_node_0(true, seed);
        let suspect = suspect.unwrap_or_else(|| panic!("seed {seed}: no Suspect"));
        let unreachable = unreachable.unwrap_or_else(|| panic!("seed {seed}: no PeerUnreachable"));
        assert_eq!(unreachable, suspect, "seed {seed}: given up when suspected");
        assert!(
            suspect <= Instant::ZERO + Duration::from_millis(1_700),
            "seed {seed}: suspected at {suspect:?}"
        );
    }
}

#[test]
fn without_the_option_the_reliable_layer_keeps_trying() {
    for seed in 0..5 {
        let (suspect, unreachable) = notices_at_node_0(false, seed);
        assert!(
            suspect.is_some(),
            "seed {seed}: the detector still suspects"
        );
        assert_eq!(
            unreachable, None,
            "seed {seed}: 15 backed-off timeouts outlast the run"
        );
    }
}
