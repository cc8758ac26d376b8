//! Seed 004's group management across a host restart (`stacks/mcast-net15.toml` in the
//! simulator): H1 joins G1, A multicasts to G1, H1 crashes and restarts. The restarted host
//! joins again the groups it was a member of (`viastack_scenario::group_schedule`), its IGMP
//! reports the membership again (RFC 2236 §3), and delivery resumes and lasts: R4 still lists
//! G1 long after the membership it learnt before the crash would have expired (260 s × 0.1),
//! and H1 keeps receiving A's data to the end of the run.
#![allow(clippy::unwrap_used)]

use viastack_kernel::{Duration, Instant};
use viastack_scenario::{group_schedule, run, Report, RunOptions};
use viastack_stack::model::{CrashSpec, GroupEventSpec};
use viastack_stack::StackFile;

const G1: u32 = 0xef01_0101; // 239.1.1.1

/// The net15 file with only H1 (node 11) joining G1 at 5 s and crashing from 10 s to 12 s (no
/// other crash, no link failure, no leave).
fn file() -> StackFile {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../stacks/mcast-net15.toml");
    let src = std::fs::read_to_string(path).unwrap();
    let mut f = viastack_stack::parse(
        "mcast-net15.toml",
        &src,
        &viastack_stack::standard_catalog(),
    )
    .unwrap_or_else(|d| panic!("{d}"));
    let sc = f.scenario.as_mut().unwrap();
    sc.link_failures.clear();
    sc.groups
        .retain(|g| g.node == 11 && g.join && g.at == Duration::from_secs(5));
    assert_eq!(sc.groups.len(), 1);
    assert_eq!(sc.groups[0].group, G1);
    sc.crashes = vec![CrashSpec {
        node: 11,
        at: Duration::from_secs(10),
        restart: Some(Duration::from_secs(12)),
        line: 0,
    }];
    f
}

fn run_for(f: &StackFile, secs: u64) -> Report {
    let options = RunOptions {
        seed: None,
        duration: Some(Duration::from_secs(secs)),
    };
    run(f, &viastack_stack::standard_catalog(), &options, |_| {}).unwrap()
}

/// Deliveries at the hosts up at the end (H1's restarted incarnation only: its counters
/// started again at 12 s).
fn delivered(r: &Report) -> u64 {
    r.counters.get("data.data_delivered").copied().unwrap_or(0)
}

fn members(r: &Report, node: &str) -> Vec<String> {
    r.memory[node]
        .groups
        .iter()
        .map(|g| g.group.clone())
        .collect()
}

#[test]
fn a_restarted_host_reports_its_groups_again_and_delivery_resumes() {
    let f = file();
    let r40 = run_for(&f, 40);
    let r60 = run_for(&f, 60);
    // A sends every 100 ms until 60 s: about 200 messages from 40 s to 60 s, over five links
    // with 1 % loss each.
    let late = delivered(&r60) - delivered(&r40);
    assert!(
        late >= 170,
        "H1 got {late} of ~200 messages from 40 s to 60 s"
    );
    assert_eq!(
        members(&r60, "R4"),
        ["239.1.1.1"],
        "R4 still lists G1 for H1"
    );
    // The restarted incarnation sent its own reports (joined on boot, then answered queries).
    assert!(
        r60.counters
            .get("groups.reports_sent")
            .copied()
            .unwrap_or(0)
            >= 1
    );
}

fn g(node: u32, join: bool, at: u64) -> GroupEventSpec {
    GroupEventSpec {
        node,
        join,
        group: G1,
        at: Duration::from_secs(at),
        line: 0,
    }
}

#[test]
fn group_schedule_replays_the_memberships_held_at_a_restart() {
    let t = |s: u64| Instant::ZERO + Duration::from_secs(s);
    let groups = [
        g(1, true, 5),
        g(1, false, 15),
        g(1, true, 45),
        g(2, true, 5),
    ];
    // First boot: the file as written.
    assert_eq!(
        group_schedule(&groups, 1, Instant::ZERO),
        [(t(5), true, G1), (t(15), false, G1), (t(45), true, G1)]
    );
    // Restarted while a member: joins at once, then what is ahead.
    assert_eq!(
        group_schedule(&groups, 1, t(10)),
        [(t(10), true, G1), (t(15), false, G1), (t(45), true, G1)]
    );
    // Restarted after leaving: nothing to replay.
    assert_eq!(group_schedule(&groups, 1, t(20)), [(t(45), true, G1)]);
    // Restarted after joining again; another node's commands are not its own.
    assert_eq!(group_schedule(&groups, 1, t(50)), [(t(50), true, G1)]);
    assert_eq!(group_schedule(&groups, 3, t(50)), []);
}
