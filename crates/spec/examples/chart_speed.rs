#![allow(clippy::unwrap_used, clippy::disallowed_methods)]
use viastack_kernel::time::Instant;
use viastack_spec::chart::{
    self, Chart, CustomElement, Extension, ExternalEvent, Host, Instance, Vars,
};
struct Ext;
impl Extension for Ext {
    type Action = u32;
    fn compile_action(&self, _el: &CustomElement) -> Result<u32, String> {
        Ok(1)
    }
}
struct H(u64);
impl Host<u32> for H {
    fn execute(&mut self, a: &u32, _v: &mut Vars<'_>) -> Result<(), String> {
        self.0 += u64::from(*a);
        Ok(())
    }
}
fn main() {
    let src = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" xmlns:action="http://x/action" initialstate="init">
    <state id="init"><transition event="payload" target="waitack"><action:send/><action:setTimer/></transition></state>
    <state id="waitack">
      <transition event="ack" target="done"><action:cancelTimer/></transition>
      <transition event="nack"><action:send/></transition>
      <transition event="timeout.ack" target="reset"><action:send/></transition>
    </state>
    <state id="reset"><transition event="reset.ok" target="init"/></state>
    <final id="done"/></scxml>"#;
    let doc = chart::parse("h.scxml", src).unwrap();
    let (c, _) = Chart::compile(&doc, &Ext).unwrap();
    let (p, a, n) = (
        c.symbol("payload").unwrap(),
        c.symbol("ack").unwrap(),
        c.symbol("nack").unwrap(),
    );
    let mut h = H(0);
    let t = std::time::Instant::now();
    let mut events = 0u64;
    for _ in 0..200_000 {
        let mut i = Instance::new(&c);
        i.start(&c, Instant::ZERO, &mut h).unwrap();
        for s in [p, n, n, a] {
            i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(s), &mut h)
                .unwrap();
            events += 1;
        }
        assert!(i.is_final());
    }
    let dt = t.elapsed().as_secs_f64();
    println!(
        "{:.2} M events/s (incl. instance create+start), size_of Instance {} heap {}",
        events as f64 / dt / 1e6,
        std::mem::size_of::<Instance>(),
        {
            let i = Instance::new(&c);
            i.heap_bytes()
        }
    );
    let t = std::time::Instant::now();
    for _ in 0..1_000_000 {
        let mut i = Instance::new(&c);
        i.start(&c, Instant::ZERO, &mut h).unwrap();
        std::hint::black_box(&i);
    }
    println!("{:.0} ns per new+start", t.elapsed().as_secs_f64() * 1e3);
    // steady-state: one instance bouncing nack
    let mut i = Instance::new(&c);
    i.start(&c, Instant::ZERO, &mut h).unwrap();
    i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(p), &mut h)
        .unwrap();
    let t = std::time::Instant::now();
    for _ in 0..5_000_000 {
        i.handle_event(&c, Instant::ZERO, ExternalEvent::symbol(n), &mut h)
            .unwrap();
    }
    println!(
        "{:.2} M events/s steady targetless",
        5.0 / t.elapsed().as_secs_f64()
    );
}
