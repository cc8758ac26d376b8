//! Profiling aid for the flat machine (issue 15 §2): `specs/h2hack.scxml` loaded at run time
//! in a [`Store`] against the hand-written h2hack, under `viastack bench spec`'s load, without
//! building the CLI. `cargo run --release -p viastack-spec --example flat_speed -- [table|handwritten] [ids] [rounds] [phases]`
//! (run it under `valgrind --tool=callgrind` to count instructions).
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]
use std::sync::Arc;
use viastack_kernel::time::Instant;
use viastack_spec::service::h2hack_handwritten::H2hack;
use viastack_spec::service::{
    Addr, InstanceKey, Message, Network, NodeInfo, Primitive, Runner, Service, Store, StoreConfig,
};

#[derive(Default)]
struct Sink(u64, u64);
impl Network for Sink {
    fn perform(&mut self, _now: Instant, key: InstanceKey, p: Primitive<'_>) {
        self.0 += 1;
        self.1 = self.1.wrapping_add(key.message);
        if let Primitive::SendControl(m) | Primitive::SendData(m) | Primitive::ToApplication(m) = p
        {
            self.1 = self.1.wrapping_add(u64::from(m.message_type));
        }
    }
}

enum In {
    M(Instant, Message),
    T(Instant, InstanceKey, u32),
}

fn load(messages: u64, concurrent: u64, phases: u32) -> Vec<In> {
    let payload: Arc<[u8]> = vec![0u8; 1024].into();
    let mut out = Vec::new();
    let mut t = 0u64;
    let mk = |id: u64, ty: u8, src: u64| Message {
        service_id: 1,
        message_id: id,
        message_type: ty,
        delivery_mode: 1,
        hop_limit: 255,
        source: Addr(src),
        previous_hop: Addr(src),
        root: Addr(9),
        payload: (ty == 0x80).then(|| Arc::clone(&payload)),
        ..Message::default()
    };
    let mut first = 1;
    while first <= messages {
        let ids = first..(first + concurrent).min(messages + 1);
        let key = |id| InstanceKey {
            service: 1,
            message: id,
        };
        for phase in 0..phases {
            t += 1;
            let at = Instant::from_micros(t);
            for id in ids.clone() {
                out.push(match phase {
                    0 => In::M(at, mk(id, 0x80, 9)),
                    1 => In::M(at, mk(id, 3, 9)),
                    2 => In::T(at, key(id), 3),
                    3 => In::M(at, mk(id, 1, 2)),
                    4 => In::M(at, mk(id, 2, 2)),
                    5 => In::M(at, mk(id, 2, 3)),
                    6 => In::M(at, mk(id, 2, 4)),
                    7 => In::T(at, key(id), 1),
                    8 => In::M(at, mk(id, 2, 4)),
                    _ => In::T(at, key(id), 5),
                });
            }
        }
        first += concurrent;
    }
    out
}

#[inline(never)]
fn drive<R: Runner>(mut r: R, inputs: &[In], complete: bool) -> (f64, u64) {
    r.set_node(NodeInfo {
        address: Addr(1),
        parent: Addr(9),
        children: vec![Addr(2), Addr(3), Addr(4)],
        neighbours: vec![],
    });
    let mut sink = Sink::default();
    let start = std::time::Instant::now();
    for i in inputs {
        match i {
            In::M(t, m) => r.handle_message(*t, m, &mut sink).unwrap(),
            In::T(t, k, id) => r.handle_timer(*t, *k, *id, &mut sink).unwrap(),
        }
    }
    let s = start.elapsed().as_secs_f64();
    if complete {
        assert_eq!(r.live(), 0);
    } else {
        // Not dropped here: the counts by difference leave out the live instances' drop.
        std::mem::forget(r);
    }
    (inputs.len() as f64 / s, sink.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map_or("both", String::as_str);
    let ids: u64 = args.get(2).map_or(200_000, |s| s.parse().unwrap());
    let rounds: usize = args.get(3).map_or(7, |s| s.parse().unwrap());
    let src = include_str!("../../../specs/h2hack.scxml");
    let (svc, _) = Service::load("h2hack.scxml", src).unwrap();
    let svc = Arc::new(svc);
    // The first PHASES inputs of each id only (per-phase instruction counts by difference).
    let phases: u32 = args.get(4).map_or(10, |s| s.parse().unwrap());
    let inputs = load(ids, 1000, phases);
    let table = || {
        Store::new(
            vec![Arc::clone(&svc)],
            StoreConfig {
                pool: 0,
                capacity: usize::MAX,
            },
        )
    };
    let mut t = Vec::new();
    let mut h = Vec::new();
    for _ in 0..rounds {
        if which != "handwritten" {
            t.push(drive(table(), &inputs, phases >= 10));
        }
        if which != "table" {
            h.push(drive(H2hack::new(1), &inputs, phases >= 10));
        }
    }
    let med = |v: &mut Vec<(f64, u64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.get(v.len() / 2).copied().unwrap_or((0.0, 0))
    };
    let (te, ta) = med(&mut t);
    let (he, ha) = med(&mut h);
    println!(
        "table {te:.0} ev/s ({ta} actions), handwritten {he:.0} ev/s ({ha} actions), ratio {:.3}",
        te / he
    );
}
