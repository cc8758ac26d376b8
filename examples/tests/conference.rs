//! `conference` between processes on loopback, read from their `--json` reports: every
//! participant receives the others' audio and video (nearly all: they are unreliable) and their
//! text exactly once in order, with audio and video in step; a participant that leaves is
//! suspected on all three channels, by the one failure detector they share; and the `sync`
//! layer keeps video that the network delays in step with audio.
//!
//! No test waits on the clock: each process ends by itself (`--duration`, then the goodbyes),
//! and the bounds are loose (90 % of unreliable media, the stack's own `max_skew`).

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

const STACK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../stacks/conference.toml");
/// `max_skew` of stacks/conference.toml.
const MAX_SKEW_MS: f64 = 80.0;

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts participant `id` of the nodes listening on `ports`.
fn participant(stack: &Path, ports: &[u16], id: usize, extra: &[&str]) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_conference"));
    c.arg("--stack").arg(stack);
    c.args(["--id", &id.to_string(), "--json"]);
    c.args(["--addr", &format!("127.0.0.1:{}", ports[id])]);
    for (peer, port) in ports.iter().enumerate().filter(|&(p, _)| p != id) {
        c.args(["--peer", &format!("{peer}=127.0.0.1:{port}")]);
    }
    c.args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start conference")
}

/// Starts one participant per entry of `extra` (its own arguments) and returns their reports.
fn conference(stack: &Path, extra: &[&[&str]]) -> Vec<Value> {
    let ports: Vec<u16> = extra.iter().map(|_| free_port()).collect();
    let children: Vec<Child> = extra
        .iter()
        .enumerate()
        .map(|(id, e)| participant(stack, &ports, id, e))
        .collect();
    children
        .into_iter()
        .enumerate()
        .map(|(id, child)| {
            let out = child.wait_with_output().expect("wait");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "n{id} failed: {stderr}");
            serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("n{id}: no JSON report ({e}): {stderr}"))
        })
        .collect()
}

/// What `report` received from `peer`.
fn from_peer(report: &Value, peer: usize) -> &Value {
    report["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["peer"] == peer)
        .unwrap_or_else(|| panic!("no peer {peer} in {report}"))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn skew_ms(p: &Value) -> f64 {
    p["skew"]["skew_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no skew: {p}"))
}

/// `to` received `from`'s text exactly once and in order: every line `from` sent.
fn assert_text_complete(reports: &[Value], to: usize, from: usize) {
    let p = from_peer(&reports[to], from);
    let sent = &reports[from]["sent"];
    let text = &p["text"];
    assert!(
        n(&sent["text"]) >= 2,
        "n{from} sent too little text: {sent}"
    );
    assert_eq!(text["received"], sent["text"], "n{to} from n{from}: {p}");
    for field in ["lost", "duplicates", "out_of_order"] {
        assert_eq!(n(&text[field]), 0, "n{to} from n{from}, text {field}: {p}");
    }
    // Its goodbye, last on text, says what it sent.
    assert_eq!(p["announced"], *sent, "n{to} from n{from}");
}

#[test]
fn three_participants_receive_each_others_streams_in_step() {
    let reports = conference(
        Path::new(STACK),
        &[
            &["--duration", "3s"],
            &["--duration", "3s"],
            &["--duration", "3s"],
        ],
    );
    for (to, report) in reports.iter().enumerate() {
        for from in (0..3).filter(|&f| f != to) {
            let p = from_peer(report, from);
            let sent = &reports[from]["sent"];
            // 3 s of 50 audio and 30 video frames a second, less scheduling slack.
            assert!(
                n(&sent["audio"]) >= 120 && n(&sent["video"]) >= 70,
                "{sent}"
            );
            for medium in ["audio", "video"] {
                let got = &p[medium];
                assert!(
                    n(&got["received"]) * 10 >= n(&sent[medium]) * 9,
                    "n{to} got {} of n{from}'s {} {medium} frames: {p}",
                    got["received"],
                    sent[medium]
                );
                assert_eq!(n(&got["duplicates"]), 0, "n{to} from n{from}: {p}");
            }
            assert_text_complete(&reports, to, from);
            assert!(skew_ms(p) <= MAX_SKEW_MS, "n{to} from n{from}: {p}");
            assert_eq!(n(&p["malformed"]), 0, "n{to} from n{from}: {p}");
        }
    }
}

/// The last three notices about `peer` at `report`: `Suspect` on audio, video and text, one
/// after another (the shared detector raises them on every channel in one step).
fn assert_suspected_everywhere(report: &Value, peer: usize) {
    let about: Vec<&Value> = report["notices"]
        .as_array()
        .expect("notices")
        .iter()
        .filter(|x| x["peer"] == peer && (x["kind"] == "suspect" || x["kind"] == "alive"))
        .collect();
    let last: Vec<(&str, &str)> = about
        .iter()
        .rev()
        .take(3)
        .map(|x| {
            (
                x["kind"].as_str().unwrap_or(""),
                x["channel"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let mut channels: Vec<&str> = last
        .iter()
        .filter(|(kind, _)| *kind == "suspect")
        .map(|(_, channel)| *channel)
        .collect();
    channels.sort_unstable();
    assert_eq!(
        channels,
        ["audio", "text", "video"],
        "n{}'s notices about n{peer}: {about:?}",
        report["node"]
    );
    // ONE detector: each suspicion it raised (counted once, by the layer `fd`) reached all three
    // channels. Three detectors, one per channel, would count each suspicion three times.
    let notices = report["notices"].as_array().expect("notices");
    let suspects = notices.iter().filter(|x| x["kind"] == "suspect").count() as u64;
    let raised = n(&report["counters"]["fd.suspected"]);
    assert!(raised >= 1, "{}", report["counters"]);
    assert_eq!(suspects, 3 * raised, "{notices:?}");
}

#[test]
fn a_participant_that_leaves_is_suspected_on_every_channel() {
    // n2 talks for 1 s and leaves without waiting for the others; n0 and n1 talk for 5 s.
    let reports = conference(
        Path::new(STACK),
        &[
            &["--duration", "5s"],
            &["--duration", "5s"],
            &["--duration", "1s", "--drain", "0s"],
        ],
    );
    for stayer in [0, 1] {
        assert_suspected_everywhere(&reports[stayer], 2);
        // What n2 said before leaving arrived whole, and the stayers still hear each other.
        assert_text_complete(&reports, stayer, 2);
        assert_text_complete(&reports, stayer, 1 - stayer);
    }
}

/// `stacks/conference.toml` with video delayed by 120 ms at the sender (a `delay` layer below
/// `frag`); `without_sync`: audio and video also lose their `sync` layer.
fn delayed_video_stack(dir: &Path, without_sync: bool) -> PathBuf {
    fn replace(text: &str, from: &str, to: &str) -> String {
        assert!(text.contains(from), "`{from}` is not in the stack");
        text.replace(from, to)
    }
    let mut text = std::fs::read_to_string(STACK).expect("read the stack");
    text = replace(
        &text,
        r#"layers = ["dev", "fd", "frag", "sync"]"#,
        r#"layers = ["dev", "fd", "late", "frag", "sync"]"#,
    );
    text += "\n[layers.late]\nkind = \"delay\"\ndelay = \"120ms\"\n";
    if without_sync {
        for (from, to) in [
            (r#"["dev", "fd", "sync"]"#, r#"["dev", "fd"]"#),
            (
                r#"["dev", "fd", "late", "frag", "sync"]"#,
                r#"["dev", "fd", "late", "frag"]"#,
            ),
            (
                r#"{ fd = "the-fd", sync = "the-sync" }"#,
                r#"{ fd = "the-fd" }"#,
            ),
            (r#"{ sync = "the-sync" }"#, r#"{ fd = "the-fd" }"#),
            ("[sessions.the-sync]\nlayer = \"sync\"\n", ""),
        ] {
            text = replace(&text, from, to);
        }
    }
    let name = if without_sync {
        "unsynced.toml"
    } else {
        "synced.toml"
    };
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the stack");
    path
}

#[test]
fn sync_keeps_video_delayed_by_the_network_in_step_with_audio() {
    let dir = std::env::temp_dir().join(format!("viastack-conference-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let args: &[&[&str]] = &[&["--duration", "2s"], &["--duration", "2s"]];
    let (synced, unsynced) = std::thread::scope(|s| {
        let synced = s.spawn(|| conference(&delayed_video_stack(&dir, false), args));
        let unsynced = s.spawn(|| conference(&delayed_video_stack(&dir, true), args));
        (
            synced.join().expect("synced"),
            unsynced.join().expect("unsynced"),
        )
    });
    let _ = std::fs::remove_dir_all(&dir);
    for (to, from) in [(0, 1), (1, 0)] {
        // Without sync the receiver sees the network's 120 ms between the streams...
        let p = from_peer(&unsynced[to], from);
        assert!(skew_ms(p) >= 100.0, "without sync, n{to} from n{from}: {p}");
        // ...with sync, audio waits for video: at most max_skew apart, and video not dropped.
        let p = from_peer(&synced[to], from);
        assert!(
            skew_ms(p) <= MAX_SKEW_MS,
            "with sync, n{to} from n{from}: {p}"
        );
        let sent = &synced[from]["sent"]["video"];
        assert!(n(&p["video"]["received"]) * 10 >= n(sent) * 9, "{p}");
    }
}
