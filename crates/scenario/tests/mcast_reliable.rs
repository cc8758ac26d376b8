//! Issue 17 §1/§3: reliable multicast (`mcast-reliable` + `mcast-order`) through the stacks of
//! `stacks/mcast-reliable.toml` — seed 004's 15-node network with loss on the links, a router
//! reboot and a link failure — and over many seeds with duplication, reordering and random
//! loss rates added: every message reaches every host that stays joined exactly once, in
//! order where `mcast-order` is stacked; a refused send is reported to the sender; nothing is
//! reported unrecoverable; the source's buffer stays within its capacity. The same checker
//! catches a planted bug (repair switched off).
//!
//! `MCAST_SEEDS=n` sets the seed count (default 100 in CI). A failure names its seed;
//! `MCAST_SEED=n … one_seed -- --ignored --nocapture` replays one. Over 1,000 seeds one used
//! to fail silently (seed 302, 10 % loss): host H2's answers to two IGMP general queries were
//! lost, its router let the membership expire and pruned the branch, so H2 — joined as far as
//! its application knows — missed the last message without a notice. A joined receiver's
//! stability reports now carry flag M and refresh its membership at its router
//! (`Repairer::refresh_membership`, docs/WIRE.md): seed 302 passes with 12 refreshes, and is
//! replayed by `seed_302_a_joined_host_whose_igmp_answers_were_lost_keeps_its_branch`.
#![allow(clippy::unwrap_used)]

use viastack_kernel::NodeId;
use viastack_scenario::{run_recorded, Recorder, Report, RunOptions};
use viastack_stack::StackFile;

const HOSTS: [u32; 4] = [11, 12, 13, 14];

fn source() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../stacks/mcast-reliable.toml"
    );
    std::fs::read_to_string(path).unwrap()
}

fn parse(src: &str) -> StackFile {
    viastack_stack::parse(
        "mcast-reliable.toml",
        src,
        &viastack_stack::standard_catalog(),
    )
    .unwrap_or_else(|d| panic!("{d}"))
}

fn run(f: &StackFile, seed: Option<u64>) -> (Report, Recorder) {
    let options = RunOptions {
        seed,
        duration: None,
    };
    run_recorded(f, &viastack_stack::standard_catalog(), &options, |_| {}).unwrap()
}

/// The properties; `Err` names the first violation.
fn check(r: &Report, rec: &Recorder, ordered: bool, capacity: u64) -> Result<(), String> {
    check_hosts(r, rec, ordered, capacity, &HOSTS)
}

fn check_hosts(
    r: &Report,
    rec: &Recorder,
    ordered: bool,
    capacity: u64,
    hosts: &[u32],
) -> Result<(), String> {
    let key = (0u16, NodeId(0), viastack_scenario::recorder::BROADCAST);
    let stream = rec.streams.get(&key).ok_or("no multicast stream")?;
    if stream.sent == 0 {
        return Err("nothing sent".into());
    }
    let mut got = 0u64;
    for seq in 0..stream.sent {
        if stream.reported.contains(&seq) {
            continue; // refused by a full send buffer, and the sender was told
        }
        let at = rec.multicast.get(&(0, NodeId(0), seq));
        for &h in hosts {
            let n = at.and_then(|m| m.get(&NodeId(h))).copied().unwrap_or(0);
            if n != 1 {
                return Err(format!(
                    "message {seq} delivered {n} times at node {h} ({} sent)",
                    stream.sent
                ));
            }
            got += 1;
        }
    }
    if ordered && stream.out_of_order > 0 {
        return Err(format!("{} deliveries out of order", stream.out_of_order));
    }
    if let Some(n) = rec.notices.get("McastUnrecoverable") {
        return Err(format!("{n} unrecoverable notices"));
    }
    // One source: the summed peak is its send buffer's, within its capacity.
    let peak = r.counters.get("rel.send_buffer_peak").copied().unwrap_or(0);
    if got == 0 || peak == 0 {
        return Err(format!("vacuous: {got} deliveries, buffer peak {peak}"));
    }
    if peak > capacity {
        return Err(format!("send buffer held {peak} > {capacity} packets"));
    }
    // Ten routers, each cache within `cache_capacity` = 128.
    let cache = r.counters.get("rel.cache_peak").copied().unwrap_or(0);
    if cache > 10 * 128 {
        return Err(format!("router caches peaked at {cache} in all"));
    }
    Ok(())
}

#[test]
fn net15_reliable_ordered_delivery_with_loss_reboot_and_link_failure() {
    let f = parse(&source());
    let (r, rec) = run(&f, None);
    eprintln!("{r}");
    for k in [
        "rel.nacks_sent",
        "rel.repairs_sent",
        "rel.repairs_from_cache",
        "rel.nacks_forwarded",
        "rel.stability_reports",
        "rel.freed_stable",
        "rel.send_buffer_peak",
        "rel.cache_peak",
        "rel.rel_duplicates",
        "rel.nacks_suppressed",
        "order.order_held",
    ] {
        eprintln!("{k} = {}", r.counters.get(k).copied().unwrap_or(0));
    }
    check(&r, &rec, true, 512).unwrap();
    assert!(r.verdict.holds, "{:?}", r.verdict);
    // Repairs came from routers' caches, not only from the source.
    assert!(
        r.counters
            .get("rel.repairs_from_cache")
            .copied()
            .unwrap_or(0)
            > 0
    );
    // Stability freed the source's buffer.
    assert!(r.counters.get("rel.freed_stable").copied().unwrap_or(0) > 0);
}

/// The routers' links of the file (for random failures): name `Ra-Rb`.
const ROUTER_LINKS: [&str; 13] = [
    "R1-R2", "R1-R3", "R2-R3", "R2-R4", "R2-R5", "R3-R6", "R3-R7", "R1-R10", "R10-R8", "R10-R9",
    "R8-R4", "R8-R6", "R9-R5",
];

/// The stack file with seed-dependent faults: loss 0–10 %, duplication, reordering and
/// jitter on every link, one router crash and restart, one link failure and repair; fewer
/// messages so that a seed runs quickly.
fn variant(seed: u64, edit: impl Fn(String) -> String) -> String {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x0017_0017);
    let loss: f64 = rng.gen_range(0.0..0.10);
    let dup: f64 = rng.gen_range(0.0..0.05);
    let reorder: f64 = rng.gen_range(0.0..0.10);
    let router = rng.gen_range(1..=10u32);
    let crash_at = rng.gen_range(7..=20u32);
    let down = ROUTER_LINKS[rng.gen_range(0..ROUTER_LINKS.len())];
    let fail_at = rng.gen_range(7..=25u32);
    let src = source();
    let (head, _) = src.split_once("[scenario]").unwrap();
    let mut s = format!(
        "{head}[scenario]\nnodes = 15\nseed = {seed}\nduration = \"50s\"\nexpect = \"reliable-ordered-multicast\"\n\n\
         [scenario.link]\nlatency = \"1ms\"\njitter = \"1ms\"\nbandwidth = \"100Mbit\"\n\
         loss = {loss:.4}\nduplicate = {dup:.4}\nreorder = {reorder:.4}\nreorder_delay = \"15ms\"\n\n\
         [[scenario.link_failure]]\nlink = \"{down}\"\nat = \"{fail_at}s\"\nrepair = \"{}s\"\n\n\
         [[scenario.crash]]\nnode = {router}\nat = \"{crash_at}s\"\nrestart = \"{}s\"\n\n",
        fail_at + 8,
        crash_at + 4
    );
    for h in HOSTS {
        s.push_str(&format!(
            "[[scenario.group]]\nnode = {h}\naction = \"join\"\ngroup = \"239.1.1.1\"\nat = \"5s\"\n"
        ));
    }
    s.push_str(
        "\n[[scenario.workload]]\nchannel = \"if0\"\npattern = \"multicast\"\nsenders = [0]\n\
         messages = 250\nsize = 64\ninterval = \"100ms\"\nstart = \"6s\"\n",
    );
    edit(s)
}

fn seeds() -> u64 {
    std::env::var("MCAST_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

fn run_seeds(ordered: bool, edit: impl Fn(String) -> String) -> (u64, Vec<(u64, String)>) {
    let n = seeds();
    let mut bad = Vec::new();
    let mut refused = 0;
    for seed in 0..n {
        let src = variant(seed, &edit);
        let f = parse(&src);
        let (r, rec) = run(&f, None);
        refused += r.counters.get("rel.rel_refused").copied().unwrap_or(0);
        if let Err(e) = check(&r, &rec, ordered, 512) {
            bad.push((seed, e));
        } else if !r.verdict.holds {
            // The run's own `reliable-(ordered-)multicast` verdict agrees.
            bad.push((seed, format!("{:?}", r.verdict.violations)));
        }
    }
    (refused, bad)
}

#[test]
fn every_host_gets_every_message_exactly_once_in_order_over_many_seeds() {
    let (_, bad) = run_seeds(true, |s| s);
    assert!(
        bad.is_empty(),
        "{} of {} seeds failed: {:?}",
        bad.len(),
        seeds(),
        &bad[..bad.len().min(5)]
    );
}

#[test]
fn without_mcast_order_delivery_is_still_exactly_once() {
    let unordered = |s: String| {
        s.replace(", \"order\", \"data\"]", ", \"data\"]")
            .replace(", order = \"ordering\"", "")
            .replace("reliable-ordered-multicast", "reliable-multicast")
    };
    assert!(!unordered(source()).contains("\"order\", "));
    let (_, bad) = run_seeds(false, unordered);
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(5)]);
}

#[test]
fn the_checker_catches_a_planted_bug_repair_switched_off() {
    let broken = |s: String| s.replace("retain = \"30s\"", "retain = \"30s\"\nno_repair = true");
    let f = parse(&broken(source()));
    let (r, rec) = run(&f, None);
    let e = check(&r, &rec, true, 512).unwrap_err();
    assert!(!r.verdict.holds, "the run's verdict misses it too: {r}");
    assert!(
        e.contains("delivered 0 times") || e.contains("unrecoverable"),
        "{e}"
    );
}

#[test]
fn a_full_send_buffer_refuses_and_reports_and_the_rest_is_delivered() {
    // 16 packets of buffer, a message every 2 ms: the buffer fills before stability frees it.
    let small = |s: String| {
        s.replace("send_capacity = 512", "send_capacity = 16")
            .replace("interval = \"100ms\"", "interval = \"2ms\"")
    };
    let f = parse(&small(source()));
    let (r, rec) = run(&f, None);
    let refused = r.counters.get("rel.rel_refused").copied().unwrap_or(0);
    assert!(refused > 0, "{r}");
    assert_eq!(rec.notices.get("SendRefused").copied(), Some(refused));
    let key = (0u16, NodeId(0), viastack_scenario::recorder::BROADCAST);
    assert_eq!(rec.streams[&key].reported.len() as u64, refused);
    check(&r, &rec, true, 16).unwrap();
}

/// Issue 17: the seed whose host lost its IGMP answers to two general queries (its router
/// expired the membership and pruned the branch, the host silently missed the last message).
/// Its stability reports refresh the membership now; without that this seed fails.
#[test]
fn seed_302_a_joined_host_whose_igmp_answers_were_lost_keeps_its_branch() {
    let f = parse(&variant(302, |s| s));
    let (r, rec) = run(&f, None);
    assert_eq!(check(&r, &rec, true, 512), Ok(()));
    assert!(r.verdict.holds, "{r}");
    let refreshes = r.counters.get("rel.membership_refreshes").copied();
    assert!(refreshes.unwrap_or(0) > 0, "{r}");
}

/// The source's stream starts 100 packets before `u32::MAX` (`first_seq`), so its 250
/// messages cross the sequence wrap: with loss, duplication, reordering, a router crash and a
/// link failure (the seeds' faults), every host still gets every message exactly once and in
/// order, and nothing is reported lost — every comparison of the reliable layer (source
/// buffer, receivers' in-order position and held set, NACKs, stability reports, routers'
/// caches and aggregation) and of `mcast-order` is serial (RFC 1982). `MCAST_WRAP_SEEDS=n`
/// sets the seed count (default 8).
#[test]
fn a_stream_across_the_sequence_wrap_is_delivered_exactly_once_in_order() {
    let n: u64 = std::env::var("MCAST_WRAP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let near_wrap =
        |s: String| s.replace("window = 512\n", "window = 512\nfirst_seq = 4294967196\n");
    assert!(near_wrap(source()).contains("first_seq = 4294967196"));
    let mut bad = Vec::new();
    for seed in 0..n {
        let f = parse(&variant(seed, near_wrap));
        let (r, rec) = run(&f, None);
        let sent = r.counters.get("rel.rel_sent").copied().unwrap_or(0);
        if sent <= 100 {
            bad.push((
                seed,
                format!("only {sent} packets sent: the wrap was not crossed"),
            ));
        } else if let Err(e) = check(&r, &rec, true, 512) {
            bad.push((seed, e));
        } else if !r.verdict.holds {
            bad.push((seed, format!("{:?}", r.verdict.violations)));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {n} seeds failed: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
}

/// Item 2 of issue 17's leftovers: a source behind a router frees its buffer at the pace of
/// its receiver, not of the router's timer. A – R – H (one router), the reliable layer's timers
/// ×10 (stability reports every 10 s, so the first periodic report of H or R is due at ~15 s),
/// a 64-packet send buffer, `report_progress` 16; H joins at 2 s, A sends 300 messages one per
/// millisecond from 5 s, the run ends at 9 s of virtual time. H reports every 16 packets, R
/// passes the aggregate upstream as soon as it moved 16 (`Repairer` on progress), so A's
/// buffer is freed long before any timer: nothing is refused and H gets all 300 by 9 s. With
/// reports going upstream only on R's timer the buffer fills after 64 sends and every later
/// send is refused until 15 s.
#[test]
fn a_source_behind_a_router_frees_its_buffer_before_any_report_timer() {
    let src = source();
    let (head, _) = src.split_once("[[topology.node]]").unwrap();
    let head = head
        .replace(
            "send_capacity = 512",
            "send_capacity = 64\nreport_progress = 16",
        )
        .replace(
            "kind = \"mcast-reliable\"\n",
            "kind = \"mcast-reliable\"\ntime_scale = 10.0\n",
        );
    assert!(head.contains("time_scale = 10.0") && head.contains("report_progress = 16"));
    let text = format!(
        "{head}[[topology.node]]\nname = \"A\"\nrole = \"host\"\n\
         [[topology.node]]\nname = \"R\"\n\
         [[topology.node]]\nname = \"H\"\nrole = \"host\"\n\
         [[topology.link]]\nnodes = [\"A\", \"R\"]\n\
         [[topology.link]]\nnodes = [\"R\", \"H\"]\n\n\
         [scenario]\nnodes = 3\nseed = 1\nduration = \"9s\"\nexpect = \"reliable-ordered-multicast\"\n\
         [scenario.link]\nlatency = \"1ms\"\nbandwidth = \"100Mbit\"\n\
         [[scenario.group]]\nnode = 2\naction = \"join\"\ngroup = \"239.1.1.1\"\nat = \"2s\"\n\
         [[scenario.workload]]\nchannel = \"if0\"\npattern = \"multicast\"\nsenders = [0]\n\
         messages = 300\nsize = 64\ninterval = \"1ms\"\nstart = \"5s\"\n"
    );
    let f = parse(&text);
    let (r, rec) = run(&f, None);
    let c = |k: &str| r.counters.get(k).copied().unwrap_or(0);
    assert_eq!(c("rel.rel_refused"), 0, "sends refused: {r}");
    let key = (0u16, NodeId(0), viastack_scenario::recorder::BROADCAST);
    assert_eq!(rec.streams[&key].sent, 300);
    for seq in 0..300 {
        let n = rec
            .multicast
            .get(&(0, NodeId(0), seq))
            .and_then(|m| m.get(&NodeId(2)))
            .copied();
        assert_eq!(n, Some(1), "message {seq} at H: {r}");
    }
    assert!(c("rel.send_buffer_peak") <= 64);
    // The source freed (at least) the 300 − 64 packets it needed room for; reports came
    // from H's progress and R's aggregate on progress, no timer.
    assert!(c("rel.freed_stable") >= 236, "{r}");
    assert!(r.verdict.holds, "{r}");
}

/// One LAN segment, no routers (`bench multicast`'s peer lane): source `A` (node 0) and four
/// receivers, a burst of messages soon after the joins, random loss, duplication and
/// reordering per receiver. A receiver that loses the first packets while the others already
/// report used to find them freed by the source — it was not among the reporters — and open
/// its stream at the trail: the start of the stream missing, with no notice at all (seen once
/// in `bench multicast` under load). The source now counts the members whose IGMP reports it
/// heard on its link, and a receiver reports as soon as it opens a stream.
///
/// The stack is the shipped `stacks/mcast-lan.toml` with the seed's link faults (5–30 % loss,
/// up to 5 % duplication and 10 % reordering) and a send buffer of 256, so the burst also
/// meets refusals.
fn lan(seed: u64) -> String {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x1a17_0017);
    let loss: f64 = rng.gen_range(0.05..0.30);
    let dup: f64 = rng.gen_range(0.0..0.05);
    let reorder: f64 = rng.gen_range(0.0..0.10);
    let mut file: toml::Table = include_str!("../../../stacks/mcast-lan.toml")
        .parse()
        .expect("stacks/mcast-lan.toml is TOML");
    let rel = table(table(&mut file, "layers"), "rel");
    rel.insert("send_capacity".into(), 256.into());
    let scenario = table(&mut file, "scenario");
    scenario.insert("seed".into(), (seed as i64).into());
    let link = table(scenario, "link");
    link.insert("loss".into(), ((loss * 1e4).round() / 1e4).into());
    link.insert("duplicate".into(), ((dup * 1e4).round() / 1e4).into());
    link.insert("reorder".into(), ((reorder * 1e4).round() / 1e4).into());
    toml::to_string(&file).expect("a TOML table prints")
}

/// The table `key` of `t`, which `stacks/mcast-lan.toml` has.
fn table<'a>(t: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    t.get_mut(key)
        .and_then(toml::Value::as_table_mut)
        .unwrap_or_else(|| panic!("stacks/mcast-lan.toml has no [{key}]"))
}

#[test]
fn on_one_lan_a_receiver_that_lost_the_first_packets_still_gets_them() {
    let n = seeds();
    let mut bad = Vec::new();
    let mut held = 0;
    for seed in 0..n {
        let f = parse(&lan(seed));
        let (r, rec) = run(&f, None);
        held += r.counters.get("rel.held_for_members").copied().unwrap_or(0);
        if let Err(e) = check_hosts(&r, &rec, true, 256, &[1, 2, 3, 4]) {
            bad.push((seed, e));
        } else if !r.verdict.holds {
            bad.push((seed, format!("{:?}", r.verdict.violations)));
        }
    }
    assert!(bad.is_empty(), "{} of {n} seeds failed: {bad:?}", bad.len());
    // The source did hold stability for members that had not reported yet.
    assert!(held > 0);
}

/// `MCAST_SEED=n cargo test … one_seed -- --ignored --nocapture` replays one seed.
#[test]
#[ignore]
fn one_seed() {
    let seed: u64 = std::env::var("MCAST_SEED").unwrap().parse().unwrap();
    let src = variant(seed, |s| s);
    let f = parse(&src);
    let (r, rec) = run(&f, None);
    eprintln!("{}", &src[src.find("[scenario]").unwrap()..]);
    eprintln!("{r}");
    eprintln!("{:?}", rec.notices);
    eprintln!("{:?}", check(&r, &rec, true, 512));
}
