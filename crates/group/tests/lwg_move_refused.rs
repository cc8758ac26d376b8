//! Light-group moves under `primary = "majority"` (crates/group/src/lwg.rs, "Mapping light
//! groups to heavy groups"; issue 18): a move asked while the group's heavy view carries no
//! messages (a minority view) is refused — an `LwgRefused` notice up the channel carrying
//! [`LwgError::MoveRefused`] with the reason, counted `lwg.move_refused`, no `Switch` sent —
//! and the same move asked in a primary view goes ahead (`lwg.switch_sent`).
//!
//! One kernel, node 0, two heavy groups (`vs`, `vs2`: two `vsync` layers over one device and
//! one failure detector, as in stacks/lwg-move.toml) and one `lwg` session bound into light
//! channels `a` (on `vs`) and `d` (on `vs2`). Alone, node 0 installs a view of itself: a
//! minority of 3 nodes, a majority of 1.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use viastack_group::lwg::{move_command, LwgError, LWG_REFUSED};
use viastack_group::vsync::{view_notice, Config, Primary};
use viastack_group::{Lwg, Vsync};
use viastack_kernel::layers::Device;
use viastack_kernel::{Duration, Instant, Kernel, KernelConfig, LayerRef, NodeId, Output, Qos};
use viastack_protocols::heartbeat::{self, Heartbeat};

/// What came up: (light views on `a`, refusals on `a`), after running `k` to `until`.
fn run_to(k: &mut Kernel, now: &mut Instant, until: Instant) -> (usize, Vec<Option<LwgError>>) {
    let mut views = 0;
    let mut refusals = Vec::new();
    loop {
        while let Some(out) = k.poll_output() {
            if let Output::Deliver(ev) = out {
                if ev.ty() == LWG_REFUSED.id() {
                    refusals.push(ev.custom::<LwgError>().cloned());
                } else if view_notice(&ev).is_some() {
                    views += 1;
                }
            }
        }
        match k.poll_timeout() {
            Some(t) if t <= until => {
                *now = t.max(*now);
                k.handle_timeout(*now);
            }
            _ => break,
        }
    }
    *now = until;
    (views, refusals)
}

/// Node 0 of `nodes`, alone, with both heavy groups under `primary = "majority"`; asks to
/// move `a` to `d`'s heavy group once its views are installed. Returns the refusals and the
/// kernel's counters `lwg.move_refused` and `lwg.switch_sent`.
fn move_alone(nodes: u32) -> (usize, Vec<Option<LwgError>>, Option<u64>, Option<u64>) {
    let dev: LayerRef = Arc::new(Device::new("dev", 0));
    let fd: LayerRef = Arc::new(Heartbeat::new(
        "fd",
        NodeId(0),
        nodes,
        heartbeat::Config::default(),
    ));
    let config = Config {
        primary: Primary::Majority,
        ..Config::default()
    };
    let vs: LayerRef = Arc::new(Vsync::new("vs", NodeId(0), nodes, config));
    let vs2: LayerRef = Arc::new(Vsync::new("vs2", NodeId(0), nodes, config));
    let lwg: LayerRef = Arc::new(Lwg::new("lwg", NodeId(0), 64));
    let light = Qos::new("light", vec![dev.clone(), fd.clone(), vs, lwg.clone()]).unwrap();
    let light2 = Qos::new("light2", vec![dev, fd, vs2, lwg.clone()]).unwrap();
    let mut k = Kernel::new(KernelConfig::default());
    let session = k.create_session(&lwg);
    let mut now = Instant::ZERO;
    let open = |k: &mut Kernel, name: &str, qos: &Arc<Qos>| {
        let ch = k.create_channel(name, qos);
        k.cursor(ch).unwrap().top().set_session(session).unwrap();
        k.start_channel(ch, now).unwrap();
        ch
    };
    let a = open(&mut k, "a", &light);
    let _d = open(&mut k, "d", &light2);
    let (views, mut refusals) = run_to(&mut k, &mut now, Instant::ZERO + Duration::from_secs(2));
    k.inject(now, move_command(a, "d")).unwrap();
    let (_, more) = run_to(&mut k, &mut now, Instant::ZERO + Duration::from_secs(3));
    refusals.extend(more);
    let c = k.counters();
    (
        views,
        refusals,
        c.get("lwg.move_refused").copied(),
        c.get("lwg.switch_sent").copied(),
    )
}

#[test]
fn a_move_asked_in_a_minority_view_is_refused_with_its_reason() {
    let (views, refusals, refused, sent) = move_alone(3);
    assert!(views >= 1, "no light view on `a` in the minority view");
    assert_eq!(
        refusals,
        vec![Some(LwgError::MoveRefused {
            channel: "a".into(),
            to: "d".into(),
            reason: "the group's heavy group has no view that carries messages",
        })]
    );
    assert_eq!(refused, Some(1));
    assert_eq!(sent, None);
}

#[test]
fn the_same_move_in_a_majority_view_goes_ahead() {
    let (views, refusals, refused, sent) = move_alone(1);
    assert!(views >= 1);
    assert_eq!(refusals, vec![]);
    assert_eq!(refused, None);
    assert_eq!(sent, Some(1));
}
