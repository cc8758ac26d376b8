//! `viastack bench multicast --quick` (issue 17 "Figures"): a smoke test of the lanes CI can run
//! (no JVM, no root): stack latency per component and per stack, basic multicast throughput on
//! the 15-node network on loopback, join and leave latency; and the charts it draws.
#![allow(clippy::unwrap_used)]

mod common;

use common::viastack;
use serde_json::Value;

#[test]
fn bench_multicast_quick_reports_every_lane_and_draws_pngs() {
    let dir = common::scratch("mbench-cli").join("plots");
    let o = viastack(&[
        "bench",
        "multicast",
        "--quick",
        "--size",
        "64",
        "--only",
        "stack,throughput,join,reliable",
        "--json",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = &v["stack_latency"]["sizes"][0];
    assert_eq!(row["size"], 64);
    for stack in ["interface+forward", "+checksum", "+igmp", "+dvmrp"] {
        assert!(
            row["stacks"][stack]["ns_per_msg"].as_f64().unwrap() > 0.0,
            "{stack}: {row}"
        );
    }
    for c in ["mcast-forward", "checksum", "igmp", "dvmrp"] {
        assert!(row["components"][c]["ns_per_msg"].is_number(), "{c}: {row}");
    }
    assert!(row["loopback_p50_us"].as_f64().unwrap() > 0.0, "{row}");
    let t = &v["throughput"]["sizes"][0];
    assert!(t["msgs_per_s_per_receiver"].as_f64().unwrap() > 0.0, "{t}");
    let frac = t["delivered_fraction"].as_f64().unwrap();
    assert!(frac > 0.5 && frac <= 1.0, "{t}");
    // Join: the report and the graft take a few link latencies; leave: the last-member
    // queries (2 × 100 ms at time scale 0.1) before the prune.
    let join = v["join_leave"]["join"]["p50_ms"].as_f64().unwrap();
    let leave = v["join_leave"]["leave"]["p50_ms"].as_f64().unwrap();
    assert!(join > 0.0 && join < 100.0, "join {join}");
    assert!(leave > 100.0 && leave < 1000.0, "leave {leave}");
    // The reliable lane runs or says why not.
    assert!(
        v["reliable"]["skipped"].is_string() || v["reliable"]["error_rates"].is_array(),
        "{}",
        v["reliable"]
    );
    for name in ["stack-latency", "throughput", "join-leave"] {
        let bytes = std::fs::read(dir.join(format!("multicast-{name}.png"))).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
    }
}

/// The peer lane's viastack side (no JVM): one sender, four receivers on one LAN, the sender
/// driven by back-pressure; every receiver gets every message exactly once (the lane fails
/// otherwise) and the figure is a rate.
#[test]
fn bench_multicast_peer_lane_delivers_every_message_exactly_once() {
    let o = viastack(&[
        "bench",
        "multicast",
        "--quick",
        "--only",
        "peer",
        "--no-jgroups",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v["peer"];
    let rounds = p["viastack_rounds"].as_array().unwrap();
    assert!(!rounds.is_empty(), "{p}");
    for r in rounds {
        assert_eq!(
            r["delivered_exactly_once"],
            serde_json::json!([2000, 2000, 2000, 2000]),
            "{r}"
        );
        assert!(r["msgs_per_s_per_receiver"].as_f64().unwrap() > 0.0, "{r}");
        // Bundling: far fewer datagrams than 4 per message.
        assert!(r["datagrams"].as_u64().unwrap() < 4 * 2000, "{r}");
    }
    assert!(p["jgroups_nakack2"]["skipped"].is_string(), "{p}");
}
