//! Light-group id collisions (crates/group/src/lwg.rs, "Binding"): a light group's id is the
//! FNV-1a 32 hash of its channel's name, so two names can share one. The `lwg` session refuses
//! the second channel of a colliding pair — an `LwgRefused` notice carrying
//! [`LwgError::IdCollision`] up that channel, the counter `lwg.id_collision`, and its sends
//! refused (`SendRefused`, `lwg.refused`) — instead of mixing the two groups' messages.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use viastack_group::lwg::{group_id, LwgError, LWG_REFUSED};
use viastack_group::{Lwg, Vsync};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::Device;
use viastack_kernel::{
    Dest, Direction, Event, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Output, Qos,
    Sendable,
};
use viastack_protocols::events::SEND_REFUSED;
use viastack_protocols::heartbeat::{self, Heartbeat};

/// Two distinct channel names with one FNV-1a 32 id, found by brute force (a birthday search
/// over `g0`, `g1`, …: a few hundred thousand names at most).
fn colliding_pair() -> (String, String) {
    let mut seen: HashMap<u32, String> = HashMap::new();
    for i in 0u32.. {
        let name = format!("g{i}");
        let id = group_id(&name);
        if let Some(other) = seen.insert(id, name.clone()) {
            return (other, name);
        }
    }
    unreachable!()
}

#[test]
fn a_second_channel_with_a_colliding_id_is_refused() {
    let (first, second) = colliding_pair();
    assert_ne!(first, second);
    assert_eq!(group_id(&first), group_id(&second));

    let dev: LayerRef = Arc::new(Device::new("dev", 0));
    let fd: LayerRef = Arc::new(Heartbeat::new(
        "fd",
        NodeId(0),
        3,
        heartbeat::Config::default(),
    ));
    let vs: LayerRef = Arc::new(Vsync::new("vs", NodeId(0), 3, Default::default()));
    let lwg: LayerRef = Arc::new(Lwg::new("lwg", NodeId(0), 64));
    let qos = Qos::new("light", vec![dev, fd, vs, lwg.clone()]).unwrap();
    let mut k = Kernel::new(KernelConfig::default());
    let session = k.create_session(&lwg);
    let open = |k: &mut Kernel, name: &str| {
        let ch = k.create_channel(name, &qos);
        k.cursor(ch).unwrap().top().set_session(session).unwrap();
        k.start_channel(ch, Instant::ZERO).unwrap();
        ch
    };
    let a = open(&mut k, &first);
    let b = open(&mut k, &second);
    let mut refusals = Vec::new();
    while let Some(out) = k.poll_output() {
        if let Output::Deliver(ev) = out {
            if ev.ty() == LWG_REFUSED.id() {
                refusals.push((ev.channel(), ev.custom::<LwgError>().cloned()));
            }
        }
    }
    assert_eq!(
        refusals,
        vec![(
            b,
            Some(LwgError::IdCollision {
                id: group_id(&first),
                channel: second.clone(),
                holder: first.clone(),
            })
        )]
    );
    assert_eq!(k.counters().get("lwg.id_collision").copied(), Some(1));

    // A send on the refused channel is refused; one on the first goes out.
    for ch in [b, a] {
        let s = Sendable::new(NodeId(0), Dest::Broadcast, Message::from_payload(b"x"));
        k.inject(
            Instant::ZERO,
            Event::sendable(SENDABLE.id(), Direction::Down, ch, s),
        )
        .unwrap();
    }
    let mut refused_on = Vec::new();
    while let Some(out) = k.poll_output() {
        if let Output::Deliver(ev) = out {
            if ev.ty() == SEND_REFUSED.id() {
                refused_on.push(ev.channel());
            }
        }
    }
    assert_eq!(refused_on, vec![b]);
    assert_eq!(k.counters().get("lwg.refused").copied(), Some(1));
}
