//! The fast path allocates nothing: an interned event without data, on a live instance of a
//! chart with custom actions, simple and targetless transitions (the shape of the seed's
//! services). The counting allocator counts only the test's own thread (the harness's threads
//! may allocate at any time, which made the count flaky on a loaded machine).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use viastack_kernel::time::Instant;
use viastack_spec::chart::{
    self, Chart, CustomElement, Extension, ExternalEvent, Host, Instance, Vars,
};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (a `const` cell: reading it never
    /// allocates, and it has no destructor).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

#[allow(unsafe_code)]
// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTED.try_with(Cell::get).unwrap_or(false) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Ext;
impl Extension for Ext {
    type Action = u8;
    fn compile_action(&self, _el: &CustomElement) -> Result<u8, String> {
        Ok(1)
    }
}

struct H(u64);
impl Host<u8> for H {
    fn execute(&mut self, a: &u8, vars: &mut Vars<'_>) -> Result<(), String> {
        self.0 += u64::from(*a);
        let _ = vars.get("n");
        Ok(())
    }
}

#[test]
fn symbol_events_without_data_allocate_nothing() {
    let src = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:action="urn:a" initial="idle">
      <datamodel><data id="n" expr="0"/></datamodel>
      <state id="idle"><transition event="go" target="busy"><action:send/></transition></state>
      <state id="busy">
        <transition event="tick" cond="n == 0"><action:count/></transition>
        <transition event="stop" target="idle"><action:cancel/></transition>
      </state>
    </scxml>"#;
    COUNTED.with(|c| c.set(true));
    let (c, _) = Chart::compile(&chart::parse("a.scxml", src).unwrap(), &Ext).unwrap();
    let (go, tick, stop) = (
        c.symbol("go").unwrap(),
        c.symbol("tick").unwrap(),
        c.symbol("stop").unwrap(),
    );
    let mut h = H(0);
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut h).unwrap();
    // Warm up (the per-thread scratch, if any step needs it).
    for s in [go, tick, stop] {
        i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(s), &mut h)
            .unwrap();
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1_000 {
        for s in [go, tick, tick, stop] {
            i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(s), &mut h)
                .unwrap();
        }
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations on the fast path");
    // The counter does count: a new instance allocates its configuration.
    let _other = Instance::new(&c);
    assert!(ALLOCS.load(Ordering::Relaxed) > after);
    assert_eq!(h.0, 3 + 4_000, "every action ran");
}
