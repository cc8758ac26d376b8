//! A whole group stopped and resumed (the `heartbeat` and `vsync` rule for a late tick,
//! `viastack_protocols::stall`), with three real `viastack group chat` processes.
//!
//! **Ignored: it fails about one run in two.** After a 5 s stop one member still ends up alone
//! (it installs a view of itself, the others a view of two, and they merge again) although its
//! failure detector and `vsync` discount the stall; the path that excludes it is not found yet.
//! After 1.5 s stops with the default timings the group kept its view in every round tried.
//! Run it with `cargo test -p viastack-cli --test group_stall -- --ignored`.

mod common;

use std::io::Write;
use std::time::Duration;

use common::chat::{chat_group, chat_lines, last_view};

/// The whole group stopped (SIGSTOP) for 5 s — more than twice the failure detector's 2 s —
/// and resumed: a member that wakes up does not leave the others out for a silence it could
/// not hear (`heartbeat`'s and `vsync`'s rule for a late tick, `viastack_protocols::stall`).
/// The group goes on in the same view: lines typed right after the resumption reach everyone.
/// Without the rule every member installs a view of itself at its first tick, and each line
/// stays with the member that typed it. The detector's 2 s (not the default 500 ms) keep a
/// member that the other tests starve of CPU for a moment after the resumption from being
/// suspected for real.
#[test]
#[ignore = "fails about one run in two: a member resumed after 5 s is still sometimes excluded (module doc)"]
fn a_group_stopped_and_resumed_keeps_its_view() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let (procs, mut stdins, mut lines) = chat_group(
        "stall-room",
        &[
            "--heartbeat",
            "100ms",
            "--suspect",
            "2s",
            "--confirm",
            "300ms",
        ],
    );
    lines.until(Duration::from_secs(30), "one view of three", |s| {
        s.iter().all(|l| last_view(l) == Some("[0, 1, 2]"))
    });
    let views = |s: &[Vec<String>]| -> Vec<usize> {
        s.iter()
            .map(|l| l.iter().filter(|x| x.starts_with("view ")).count())
            .collect()
    };
    let before = views(&lines.seen);
    let pids: Vec<Pid> = procs
        .0
        .iter()
        .map(|c| Pid::from_raw(c.id() as i32))
        .collect();
    for &p in &pids {
        kill(p, Signal::SIGSTOP).expect("SIGSTOP");
    }
    // Stopped processes print nothing: the stall lasts as long as this wait.
    if let Ok(l) = lines.rx.recv_timeout(Duration::from_secs(5)) {
        panic!("a stopped member printed {l:?}");
    }
    for &p in &pids {
        kill(p, Signal::SIGCONT).expect("SIGCONT");
    }
    for (id, stdin) in stdins.iter_mut().enumerate() {
        writeln!(stdin, "after the stall from {id}").expect("type");
        stdin.flush().expect("flush");
    }
    lines.until(Duration::from_secs(30), "3 lines at every member", |s| {
        s.iter().all(|l| chat_lines(l).len() >= 3)
    });
    let orders: Vec<Vec<String>> = lines.seen.iter().map(|l| chat_lines(l)).collect();
    assert_eq!(orders[0], orders[1], "{orders:?}");
    assert_eq!(orders[0], orders[2], "{orders:?}");
    assert_eq!(
        views(&lines.seen),
        before,
        "a view changed: {:?}",
        lines.seen
    );
}
