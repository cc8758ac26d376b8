//! The same stack files as in the simulator, on real loopback UDP sockets (issue 3 §1).
#![allow(clippy::unwrap_used)]

use viastack_kernel::Duration;
use viastack_scenario::RunOptions;
use viastack_stack::{parse, standard_catalog};

const FIFO_STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.order]
kind = "fifo"
[qos.q]
layers = ["dev", "order"]
[channels.data]
qos = "q"
[channels.control]
qos = "q"
[scenario]
nodes = 4
duration = "10s"
expect = "reliable-fifo"
[[scenario.workload]]
channel = "data"
messages = 100
size = 600
interval = "2ms"
[[scenario.workload]]
channel = "control"
messages = 20
size = 40
interval = "10ms"
pattern = "ring"
"#;

#[test]
fn every_message_crosses_real_sockets_once_and_in_order() {
    let catalog = standard_catalog();
    let file = parse("loopback.toml", FIFO_STACK, &catalog).unwrap();
    let options = RunOptions {
        seed: Some(3),
        // 100 messages at 2 ms take 0.2 s; the rest is slack for a loaded machine.
        duration: Some(Duration::from_millis(700)),
    };
    let report = viastack_net::run_threads(&file, &catalog, &options).unwrap();
    assert_eq!(report.driver, "udp-threads");
    assert_eq!(report.sent, 4 * 100 + 4 * 20, "{report}");
    // Loopback UDP at this rate does not drop; if the kernel's socket buffer ever did, the
    // report would say so as refused sends or as a loss, never as a duplicate or reordering.
    assert_eq!(report.duplicated, 0, "{report}");
    assert_eq!(report.out_of_order, 0, "{report}");
    assert_eq!(report.corrupted, 0, "{report}");
    assert_eq!(report.delivered + report.lost, report.sent, "{report}");
    assert_eq!(
        report.network.sent, report.sent,
        "one datagram per message: {report}"
    );
    assert!(
        report.delivered >= report.sent * 99 / 100,
        "loopback lost more than 1%: {report}"
    );
    assert!(report.latency.p50_us > 0.0, "{report}");
}

#[test]
fn a_stack_without_exactly_one_device_is_refused() {
    let src = r#"
[layers.a]
kind = "device"
port = 1
[layers.b]
kind = "device"
port = 2
[layers.order]
kind = "fifo"
[qos.qa]
layers = ["a", "order"]
[qos.qb]
layers = ["b", "order"]
[channels.x]
qos = "qa"
[channels.y]
qos = "qb"
[scenario]
nodes = 2
duration = "100ms"
"#;
    let catalog = standard_catalog();
    let file = parse("two-devices.toml", src, &catalog).unwrap();
    let err = viastack_net::run_threads(&file, &catalog, &RunOptions::default()).unwrap_err();
    assert!(err.to_string().contains("exactly one device"), "{err}");
}
