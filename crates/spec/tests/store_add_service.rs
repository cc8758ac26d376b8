//! `Store::add_service` (issue 16 §4: a service deployed into a running store): the new
//! service's messages get instances keyed by its ServiceID, the live instances of the others
//! are kept, and a ServiceID already present is not added twice.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use viastack_kernel::time::Instant;
use viastack_spec::service::{
    Addr, InstanceKey, Message, Network, Primitive, Runner, RunnerError, Service, Store,
    StoreConfig,
};

fn load(name: &str) -> Arc<Service> {
    let path = format!("{}/../../specs/{name}.scxml", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    Arc::new(Service::load(name, &src).unwrap().0)
}

#[derive(Default)]
struct Count(usize);

impl Network for Count {
    fn perform(&mut self, _: Instant, _: InstanceKey, _: Primitive<'_>) {
        self.0 += 1;
    }
}

fn payload(service: u32, id: u64) -> Message {
    Message {
        service_id: service,
        message_id: id,
        message_type: 0x80,
        delivery_mode: 1,
        source: Addr(3),
        previous_hop: Addr(3),
        root: Addr(3),
        hop_limit: 255,
        payload: Some(Arc::from(&b"hi"[..])),
        ..Message::default()
    }
}

#[test]
fn a_service_added_at_run_time_runs_beside_the_others() {
    let h2hack = load("h2hack");
    let dupelim = load("dupelim");
    let (h, d) = (h2hack.id(), dupelim.id());
    assert_ne!(h, d);
    let mut store = Store::new(vec![h2hack.clone()], StoreConfig::default());
    let t = Instant::ZERO;
    let mut net = Count::default();
    store.handle_message(t, &payload(h, 7), &mut net).unwrap();
    let h_state = store
        .state(InstanceKey {
            service: h,
            message: 7,
        })
        .map(str::to_string);
    assert!(h_state.is_some());
    assert_eq!(
        store.handle_message(t, &payload(d, 7), &mut net),
        Err(RunnerError::UnknownService(d))
    );

    assert!(store.add_service(dupelim.clone()));
    assert!(!store.add_service(dupelim), "a ServiceID is added once");
    assert!(!store.add_service(h2hack), "nor one configured at start");
    assert_eq!(store.services().len(), 2);
    let before = net.0;
    store.handle_message(t, &payload(d, 7), &mut net).unwrap();
    assert!(net.0 > before, "dupelim's instance did nothing");
    // The h2hack instance of message 7 lives on, in the same state.
    assert_eq!(
        store
            .state(InstanceKey {
                service: h,
                message: 7,
            })
            .map(str::to_string),
        h_state
    );
    assert_eq!(
        store.live(),
        1 + usize::from(
            store
                .state(InstanceKey {
                    service: d,
                    message: 7
                })
                .is_some()
        )
    );
}
