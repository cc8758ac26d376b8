//! Random service traces for comparing two runners of the same service input by input (the
//! flat machine against the general engine in `tests/flat.rs`, compiled services against the
//! store in `crates/services/tests/against_store.rs`, which includes this file by path).

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_kernel::time::Instant;
use viastack_spec::service::trace::Input;
use viastack_spec::service::{Addr, InstanceKey, Message, NodeInfo};

pub fn node(children: Vec<Addr>) -> NodeInfo {
    NodeInfo {
        address: Addr(1),
        parent: Addr(9),
        children,
        neighbours: vec![Addr(7)],
    }
}

/// Messages of every type the shipped services filter on (and one none does), from a few
/// sources, with payloads, now and then of another service; timers 1…10; node changes; four
/// message ids interleaved.
pub fn random_trace(service: u32, seed: u64) -> Vec<Input> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![Input::Node(Instant::ZERO, node(vec![Addr(2), Addr(3)]))];
    let mut t = 0u64;
    let payload: Arc<[u8]> = Arc::from(&b"data"[..]);
    for _ in 0..rng.gen_range(5..90) {
        t += rng.gen_range(0..700);
        let at = Instant::from_millis(t);
        let id = rng.gen_range(1..5);
        match rng.gen_range(0..10) {
            0..=5 => {
                let types = [0x80u8, 0x80, 1, 2, 2, 3, 4, 5, 6, 20, 21, 22, 23, 99];
                let ty = types[rng.gen_range(0..types.len())];
                out.push(Input::Message(
                    at,
                    Message {
                        service_id: if rng.gen_bool(0.02) { 77 } else { service },
                        message_id: id,
                        message_type: ty,
                        delivery_mode: rng.gen_range(1..4),
                        hop_limit: 255,
                        source: Addr(rng.gen_range(1..7)),
                        previous_hop: Addr(rng.gen_range(1..7)),
                        destination: Addr(rng.gen_range(0..3)),
                        root: Addr(9),
                        seq: rng.gen_range(0..4),
                        payload: (ty == 0x80).then(|| Arc::clone(&payload)),
                        ..Message::default()
                    },
                ));
            }
            6..=8 => out.push(Input::Timer(
                at,
                InstanceKey {
                    service,
                    message: id,
                },
                rng.gen_range(1..11),
            )),
            _ => {
                let children = (2..6).filter(|_| rng.gen_bool(0.5)).map(Addr).collect();
                out.push(Input::Node(at, node(children)));
            }
        }
    }
    out
}
