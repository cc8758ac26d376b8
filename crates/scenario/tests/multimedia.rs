//! Multi-channel coordination in the simulator (issue 3 §3, seed 001 §2.1/§5.1): audio, video
//! and data channels sharing ONE heartbeat failure detector and ONE intermedia-sync session,
//! as in `stacks/multimedia.toml`.
//!
//! - a crashed peer is suspected by every live node on all three channels, at the same event
//!   position (the three notices are consecutive in the application's stream, at the same
//!   instant, in the same order on each channel), within timeout + interval + latency of the
//!   crash; never a live node on perfect links; Alive after the restart;
//! - the sync layer presents the audio and video of one sender within its configured skew,
//!   measured at application level from the payloads' send times.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use viastack_kernel::{Duration, Instant, NodeId};
use viastack_scenario::recorder::NoticeRecord;
use viastack_scenario::{run_recorded, Recorder, Report, RunOptions};

const INTERVAL_MS: u64 = 100;
const TIMEOUT_MS: u64 = 500;
const CHANNELS: [&str; 3] = ["audio", "video", "data"];

fn run_src(src: &str, seed: u64) -> (Report, Recorder) {
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("multimedia-test.toml", src, &catalog)
        .unwrap_or_else(|d| panic!("seed {seed}: the test's stack file is invalid:\n{d}"));
    let options = RunOptions {
        seed: Some(seed),
        duration: None,
    };
    run_recorded(&file, &catalog, &options, |_| {}).unwrap_or_else(|e| panic!("seed {seed}: {e}"))
}

/// The layers and channels of `stacks/multimedia.toml` (with fifo standing in for
/// reliable-fifo on data, and no fragmentation on video), `sync_kind` at the top of the media
/// channels (`sync`, or `ghost` to show what happens without it).
fn stack(sync_kind: &str) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.fd]
kind = "heartbeat"
interval = "{INTERVAL_MS}ms"
timeout = "{TIMEOUT_MS}ms"
[layers.sync]
kind = "{sync_kind}"
[layers.order]
kind = "fifo"
[qos.audio]
layers = ["dev", "fd", "sync"]
[qos.video]
layers = ["dev", "fd", "sync"]
[qos.data]
layers = ["dev", "fd", "order"]
[channels.audio]
qos = "audio"
bind = {{ fd = "the-fd", sync = "the-sync" }}
[channels.video]
qos = "video"
bind = {{ fd = "the-fd", sync = "the-sync" }}
[channels.data]
qos = "data"
bind = {{ fd = "the-fd" }}
"#
    )
}

/// Four nodes, media and data workloads over `duration_ms`, the given link and crashes.
fn scenario(sync_kind: &str, duration_ms: u64, link: &str, crash: &str) -> String {
    let audio = duration_ms / 20;
    let video = duration_ms / 33;
    let data = duration_ms / 100;
    format!(
        r#"{}
[scenario]
nodes = 4
duration = "{duration_ms}ms"
expect = "none"
[scenario.link]
{link}
{crash}
[[scenario.workload]]
channel = "audio"
messages = {audio}
size = 160
interval = "20ms"
[[scenario.workload]]
channel = "video"
messages = {video}
size = 1200
interval = "33ms"
[[scenario.workload]]
channel = "data"
messages = {data}
size = 64
interval = "100ms"
pattern = "ring"
"#,
        stack(sync_kind)
    )
}

/// Checks that, at every node, each channel received the same failure-detector notices in the
/// same order, and
/// that the copies of each notice are consecutive events of the application at one instant
/// (the same event position on every channel). Returns, per node, the notices as seen on
/// audio: (time, name, peer).
fn same_notices_at_the_same_position(
    rec: &Recorder,
    seed: u64,
) -> BTreeMap<NodeId, Vec<(Instant, String, NodeId)>> {
    let mut out = BTreeMap::new();
    for (node, log) in &rec.notice_log {
        // The failure detector's notices only: a reliable layer on data may add its own
        // (PeerUnreachable), which concern that channel alone.
        let log: Vec<&NoticeRecord> = log
            .iter()
            .filter(|r| r.name == "Suspect" || r.name == "Alive")
            .collect();
        let per_channel: Vec<Vec<&NoticeRecord>> = CHANNELS
            .iter()
            .map(|c| log.iter().copied().filter(|r| r.channel == *c).collect())
            .collect();
        assert_eq!(
            log.len(),
            per_channel.iter().map(Vec::len).sum::<usize>(),
            "seed {seed}: {node}: a notice on a channel other than audio, video, data: {log:?}"
        );
        let n = per_channel[0].len();
        for (c, notices) in CHANNELS.iter().zip(&per_channel) {
            assert_eq!(
                notices.len(),
                n,
                "seed {seed}: {node}: {c} got {} notices, audio {n}: {log:#?}",
                notices.len()
            );
        }
        for k in 0..n {
            let copies: Vec<&NoticeRecord> = per_channel.iter().map(|v| v[k]).collect();
            let first = copies[0];
            for (i, r) in copies.iter().enumerate() {
                assert_eq!(
                    (&r.name, r.peer, r.at),
                    (&first.name, first.peer, first.at),
                    "seed {seed}: {node}: notice #{k} differs between audio and {}: {copies:#?}",
                    r.channel
                );
                assert_eq!(
                    r.position,
                    first.position + i as u64,
                    "seed {seed}: {node}: notice #{k} is not at the same event position on every \
                     channel (something came between its copies): {copies:#?}"
                );
            }
            let peer = first
                .peer
                .unwrap_or_else(|| panic!("seed {seed}: {node}: notice without a peer"));
            out.entry(*node)
                .or_insert_with(Vec::new)
                .push((first.at, first.name.clone(), peer));
        }
    }
    out
}

#[test]
fn a_crash_is_suspected_on_all_three_channels_at_the_same_position_then_alive() {
    let latency = Duration::from_millis(3); // 2 ms + up to 1 ms of jitter
    let timeout = Duration::from_millis(TIMEOUT_MS);
    let interval = Duration::from_millis(INTERVAL_MS);
    let seeds = 1000u64;
    let mut positions_differ = 0;
    for seed in 0..seeds {
        let crashed = NodeId((seed % 4) as u32);
        let crash_at = Instant::from_millis(600 + (seed * 37) % 500);
        let restart_at = crash_at + Duration::from_millis(1000);
        let duration_ms = restart_at.as_nanos() / 1_000_000 + 700;
        let src = scenario(
            "sync",
            duration_ms,
            "latency = \"2ms\"\njitter = \"1ms\"",
            &format!(
                "[[scenario.crash]]\nnode = {}\nat = \"{}ms\"\nrestart = \"{}ms\"",
                crashed.0,
                crash_at.as_nanos() / 1_000_000,
                restart_at.as_nanos() / 1_000_000
            ),
        );
        let (report, rec) = run_src(&src, seed);
        let seen = same_notices_at_the_same_position(&rec, seed);
        for n in 0..4 {
            let node = NodeId(n);
            let got = seen.get(&node).cloned().unwrap_or_default();
            if node == crashed {
                // Before its crash nobody failed; after its restart everybody is alive.
                assert!(
                    got.is_empty(),
                    "seed {seed}: {node} (crashed) reported {got:?}"
                );
                continue;
            }
            let names: Vec<(&str, NodeId)> = got.iter().map(|(_, n, p)| (n.as_str(), *p)).collect();
            assert_eq!(
                names,
                vec![("Suspect", crashed), ("Alive", crashed)],
                "seed {seed}: {node}: crash of {crashed} at {crash_at}, restart at {restart_at}: \
                 {got:?}"
            );
            let suspected = got[0].0;
            assert!(
                suspected >= crash_at && suspected <= crash_at + timeout + interval + latency,
                "seed {seed}: {node} suspected {crashed} at {suspected}; crash at {crash_at}"
            );
            let alive = got[1].0;
            assert!(
                alive >= restart_at && alive <= restart_at + interval + latency,
                "seed {seed}: {node} saw {crashed} alive at {alive}; restart at {restart_at}"
            );
        }
        // Each channel saw the notices after different numbers of its own deliveries: the
        // position is the same in the application's single event stream, not by luck.
        for log in rec.notice_log.values() {
            if log.iter().any(|r| r.channel_index != log[0].channel_index) {
                positions_differ += 1;
            }
        }
        assert_eq!(
            report.notices.get("Suspect"),
            Some(&9),
            "seed {seed}: 3 live nodes x 3 channels: {:?}",
            report.notices
        );
        assert_eq!(report.counters.get("fd.suspected"), Some(&3), "seed {seed}");
        assert_eq!(report.counters.get("fd.alive"), Some(&3), "seed {seed}");
    }
    assert!(
        positions_differ > 0,
        "the channels' own delivery counts never differed"
    );
}

#[test]
fn live_nodes_are_never_suspected_on_perfect_links() {
    for seed in 0..500u64 {
        // Jitter up to 2 intervals: heartbeats arrive irregularly but never 500 ms apart.
        let jitter = seed % 200;
        let src = scenario(
            "sync",
            1500,
            &format!("latency = \"1ms\"\njitter = \"{jitter}ms\""),
            "",
        );
        let (report, rec) = run_src(&src, seed);
        assert!(
            rec.notice_log.is_empty(),
            "seed {seed}: jitter {jitter} ms: {:#?}",
            rec.notice_log
        );
        assert!(
            report.notices.is_empty(),
            "seed {seed}: {:?}",
            report.notices
        );
        assert!(
            report.counters.get("fd.sent").copied().unwrap_or(0) > 4 * 3 * 14,
            "seed {seed}"
        );
    }
}

#[test]
fn a_restart_faster_than_the_timeout_is_still_reported_on_every_channel() {
    let latency = Duration::from_millis(3);
    for seed in 0..300u64 {
        let crashed = NodeId((seed % 4) as u32);
        let crash_at = Instant::from_millis(400 + (seed * 13) % 300);
        // Back within the timeout: only the new incarnation's heartbeats tell.
        let restart_at = crash_at + Duration::from_millis(50 + (seed * 7) % 300);
        let src = scenario(
            "sync",
            restart_at.as_nanos() / 1_000_000 + 400,
            "latency = \"2ms\"\njitter = \"1ms\"",
            &format!(
                "[[scenario.crash]]\nnode = {}\nat = \"{}ms\"\nrestart = \"{}ms\"",
                crashed.0,
                crash_at.as_nanos() / 1_000_000,
                restart_at.as_nanos() / 1_000_000
            ),
        );
        let (_, rec) = run_src(&src, seed);
        let seen = same_notices_at_the_same_position(&rec, seed);
        for n in (0..4).map(NodeId).filter(|n| *n != crashed) {
            let got = seen.get(&n).cloned().unwrap_or_default();
            let names: Vec<(&str, NodeId)> = got.iter().map(|(_, n, p)| (n.as_str(), *p)).collect();
            assert_eq!(
                names,
                vec![("Suspect", crashed), ("Alive", crashed)],
                "seed {seed}: {n}: crash {crash_at}, restart {restart_at}: {got:?}"
            );
            for (t, ..) in &got {
                assert!(
                    *t >= restart_at && *t <= restart_at + latency,
                    "seed {seed}: {n}: reported at {t}, restart at {restart_at}"
                );
            }
        }
    }
}

/// Per (sender, receiver): the spread of audio and video latencies together (workloads 0 and
/// 1), i.e. the worst skew between the two streams, in ns.
fn media_skews(rec: &Recorder) -> Vec<((NodeId, NodeId), u64)> {
    let mut ranges: BTreeMap<(NodeId, NodeId), (u64, u64)> = BTreeMap::new();
    for ((w, src, dst), s) in &rec.streams {
        if *w > 1 {
            continue;
        }
        if let Some((lo, hi)) = s.latency_range {
            let r = ranges.entry((*src, *dst)).or_insert((lo, hi));
            *r = (r.0.min(lo), r.1.max(hi));
        }
    }
    ranges
        .into_iter()
        .map(|(k, (lo, hi))| (k, hi - lo))
        .collect()
}

#[test]
fn sync_presents_audio_and_video_within_its_skew() {
    let max_skew = Duration::from_millis(80).as_nanos() as u64;
    let mut too_late = 0;
    let mut worst = 0;
    for seed in 0..500u64 {
        // Jitter from 0 to 250 ms: beyond playout delay + skew (180 ms), media are dropped.
        let jitter = (seed * 17) % 250;
        let loss = (seed % 4) as f64 * 0.05;
        let src = scenario(
            "sync",
            1200,
            &format!("latency = \"5ms\"\njitter = \"{jitter}ms\"\nloss = {loss}"),
            "",
        );
        let (report, rec) = run_src(&src, seed);
        let skews = media_skews(&rec);
        assert_eq!(
            skews.len(),
            12,
            "seed {seed}: every ordered pair exchanged media"
        );
        for (pair, skew) in skews {
            assert!(
                skew <= max_skew,
                "seed {seed}: jitter {jitter} ms: {pair:?}: audio/video skew {} ms > 80 ms",
                skew as f64 / 1e6
            );
            worst = worst.max(skew);
        }
        too_late += report.counters.get("sync.too_late").copied().unwrap_or(0);
        assert_eq!(
            report.corrupted + report.misdelivered + report.duplicated,
            0,
            "seed {seed}"
        );
    }
    assert!(too_late > 0, "no seed exercised the too-late drop");
    assert!(worst > 0, "no seed had any skew to bound");
}

#[test]
fn without_sync_the_same_links_exceed_the_skew() {
    // The control: a ghost in place of sync; the jittery links alone spread audio and video
    // by more than 80 ms, so the bound above is the sync layer's doing.
    let max_skew = Duration::from_millis(80).as_nanos() as u64;
    let mut exceeded = 0;
    for seed in 0..20u64 {
        let src = scenario("ghost", 1200, "latency = \"5ms\"\njitter = \"200ms\"", "");
        let (_, rec) = run_src(&src, seed);
        if media_skews(&rec).iter().any(|(_, s)| *s > max_skew) {
            exceeded += 1;
        }
    }
    assert_eq!(
        exceeded, 20,
        "the links should spread latency beyond 80 ms on every seed"
    );
}

#[test]
fn the_shipped_multimedia_stack_holds_its_property_and_reports_the_crash_everywhere() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../stacks/multimedia.toml"
    ))
    .unwrap();
    for seed in 0..50u64 {
        let (report, rec) = run_src(&src, seed);
        assert!(report.verdict.holds, "seed {seed}: {:?}", report.verdict);
        let seen = same_notices_at_the_same_position(&rec, seed);
        for n in 0..3 {
            let names: Vec<(&str, NodeId)> = seen
                .get(&NodeId(n))
                .map(|v| v.iter().map(|(_, n, p)| (n.as_str(), *p)).collect())
                .unwrap_or_default();
            assert_eq!(
                names,
                vec![("Suspect", NodeId(3)), ("Alive", NodeId(3))],
                "seed {seed}: n{n}"
            );
        }
        assert_eq!(report.counters.get("sync.too_late"), None, "seed {seed}");
    }
}
