//! Any bytes as an SCXML document: reading, validation, verification and compilation return
//! a chart or diagnostics, never panic; a compiled chart then runs (start, every event it
//! names, its timers) under a small step limit without panicking. Inputs that use the W3C
//! conformance placeholders also go through the conformance rewriter and runner (seed the
//! corpus with `../shared/conformance/scxml-w3c/txml/*.txml`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_kernel::time::Instant;
use viastack_spec::chart::{self, Chart, ExternalEvent, Instance, NoHost, OpaqueActions};

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    if src.contains("scxml-conformance") {
        let _ = chart::conformance::run_document("fuzz.txml", &src);
    }
    let Ok(doc) = chart::parse("fuzz.scxml", &src) else {
        return;
    };
    let Ok((mut c, _)) = Chart::compile(&doc, &OpaqueActions) else {
        return;
    };
    let _ = chart::dot::to_dot(&doc);
    c.set_step_limit(200);
    let mut i = Instance::new(&c);
    let mut now = Instant::ZERO;
    let _ = i.start(&c, now, &mut NoHost);
    let symbols: Vec<_> = c.symbols().map(|(s, _)| s).take(16).collect();
    for s in symbols {
        let _ = i.handle_event(&c, now, ExternalEvent::symbol(s), &mut NoHost);
    }
    for _ in 0..16 {
        let Some(t) = i.poll_timeout() else { break };
        now = now.max(t);
        let _ = i.handle_timeout(&c, now, &mut NoHost);
    }
});
