//! What the `messagestore` layer keeps per message (issue 16 "Figures", `services_vs_base`:
//! every byte a live instance holds is memory a node must fault in and zero while a burst
//! grows). One node (node 5, below node 3, above nodes 7 and 8) runs h2hack for a wave of
//! payloads, each acknowledged by both children (the instance waits in `done` for
//! Timeout_Delete, 10 s); a counting allocator (this thread's allocations only) measures the
//! bytes held per live instance — 1 KiB of it the payload h2hack keeps to answer a NACK — and
//! what stays once the instances are deleted: the layer forgets each ended instance (held
//! payload, root, timers — h2hack's 30 s `finaldelete` outlives it), keeping only the delivery
//! record, and the store keeps the histories for reuse, so a second wave costs less than the
//! first.
#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common::{advance, counter, drain, node, FixedTree};
use viastack_kernel::{Duration, LayerRef, Message, NodeId};
use viastack_protocols::messagestore::{
    addr, encode, Config, Deploy, LocalService, MessageStore, MessageStoreSession,
};
use viastack_spec::service::Message as SMsg;

struct Counting;
static BYTES: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (a `const` cell: reading it never
    /// allocates, and it has no destructor).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

#[allow(unsafe_code)]
// SAFETY: forwards to the system allocator, adding up the bytes of this thread's blocks.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted() {
            BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if counted() {
            BYTES.fetch_add(new as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// h2hack's payload `id` (1 KiB) from node 3, or the H2H ACK of it from child `from`.
fn message(id: u64, from: u32) -> Vec<u8> {
    let payload = from == 3;
    encode(&SMsg {
        service_id: 1,
        message_id: id,
        message_type: if payload { 0x80 } else { 2 },
        delivery_mode: if payload { 1 } else { 3 },
        hop_limit: 255,
        source: addr(NodeId(from)),
        destination: if payload {
            addr(NodeId(0))
        } else {
            addr(NodeId(5))
        },
        root: addr(NodeId(3)),
        payload: payload.then(|| Arc::from(vec![id as u8; 1024])),
        ..SMsg::default()
    })
}

fn feed(n: &mut common::Node, from: u32, frame: Vec<u8>) {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(&frame);
    let now = n.now;
    n.kernel
        .handle_datagram(now, n.device, NodeId(from), Message::from_wire(b));
    drain(n);
}

/// Payloads `ids`, each acknowledged by both children.
fn wave(n: &mut common::Node, ids: std::ops::Range<u64>) {
    for id in ids {
        feed(n, 3, message(id, 3));
        feed(n, 7, message(id, 7));
        feed(n, 8, message(id, 8));
    }
}

fn live(n: &common::Node) -> usize {
    (0..16)
        .filter_map(|i| {
            n.kernel
                .session::<MessageStoreSession>(viastack_kernel::SessionId(i))
        })
        .map(MessageStoreSession::live)
        .sum()
}

#[test]
fn a_live_instance_holds_its_payload_and_little_else_and_an_ended_one_a_few_bytes() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../specs/h2hack.scxml"
    ))
    .unwrap();
    let h2hack = LocalService::load("h2hack.scxml", &text, None).unwrap();
    let store: LayerRef = Arc::new(MessageStore::new(
        "store",
        NodeId(5),
        Config {
            default_service: 1,
            services: vec![h2hack],
            deploy: Deploy::default(),
            capacity: 100_000,
            queue: 1000,
            flood: false,
            failure_state: None,
            stream: false,
            store_forwards: false,
            batch_window: viastack_kernel::Duration::ZERO,
        },
    ));
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[7, 8])), store], 1);
    // Warm-up (tables and buffers of their first sizes), not counted.
    wave(&mut n, 0..100);
    const K: u64 = 5_000;
    COUNTED.with(|c| c.set(true));
    let before = BYTES.load(Ordering::Relaxed);
    wave(&mut n, 1_000..1_000 + K);
    let grown = BYTES.load(Ordering::Relaxed) - before;
    assert_eq!(live(&n), 100 + K as usize);
    assert_eq!(counter(&n, "store.to_application"), 100 + K);
    let per_live = grown as f64 / K as f64;
    // Timeout_Delete (10 s): every instance is deleted.
    let later = n.now + Duration::from_secs(11);
    advance(&mut n, later);
    assert_eq!(live(&n), 0);
    // 5,100 msgtimeouts at once, through a control buffer of 1,000: none pushed out.
    assert_eq!(counter(&n, "store.control_queue_evicted"), 0);
    assert_eq!(counter(&n, "store.timers_evicted"), 0);
    let kept = BYTES.load(Ordering::Relaxed) - before;
    let per_ended = kept as f64 / K as f64;
    // A second wave reuses what the first left (histories, tables).
    let before2 = BYTES.load(Ordering::Relaxed);
    wave(&mut n, 100_000..100_000 + K);
    let per_reused = (BYTES.load(Ordering::Relaxed) - before2) as f64 / K as f64;
    COUNTED.with(|c| c.set(false));
    eprintln!(
        "bytes per live instance {per_live:.0}, per ended instance {per_ended:.0}, \
         per live instance of the second wave {per_reused:.0}"
    );
    assert!(per_live < 2_600.0, "{per_live:.0} bytes per live instance");
    assert!(
        per_ended < 700.0,
        "{per_ended:.0} bytes kept per ended instance"
    );
    assert!(
        per_reused < per_live - 300.0,
        "the second wave ({per_reused:.0}) reused nothing of the first ({per_live:.0})"
    );
}
