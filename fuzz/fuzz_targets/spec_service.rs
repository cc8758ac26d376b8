//! Any text as a seed-000 service specification: `Service::load` never panics, nor does
//! compiling a service that loads to Rust (`codegen::rust`), and the service runs a fixed trace (messages of every seed type, timers, node changes, timers
//! firing by themselves) through a store without panicking: a spec can never crash a node.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_spec::service::trace::{self, Options};
use viastack_spec::service::{codegen, Service, Store, StoreConfig};

const TRACE: &str = r#"{"t_ms":0,"node":{"address":1,"parent":9,"children":[2,3],"neighbours":[4]}}
{"t_ms":1,"message":{"ServiceID":SID,"MessageID":7,"MessageType":-128,"SourceAddress":9,"PreviousHopAddress":9,"Payload":"p","SequenceNumber":3}}
{"t_ms":2,"message":{"ServiceID":SID,"MessageID":7,"MessageType":2,"SourceAddress":2}}
{"t_ms":3,"message":{"ServiceID":SID,"MessageID":7,"MessageType":1,"SourceAddress":3}}
{"t_ms":4,"message":{"ServiceID":SID,"MessageID":8,"MessageType":3,"SourceAddress":9}}
{"t_ms":5,"timer":{"ServiceID":SID,"MessageID":7,"TimerIdentifier":3}}
{"t_ms":6,"node":{"address":1,"parent":9,"children":[],"neighbours":[]}}
{"t_ms":7,"message":{"ServiceID":SID,"MessageID":7,"MessageType":4,"SourceAddress":9}}
{"t_ms":8,"message":{"ServiceID":SID,"MessageID":9,"MessageType":20,"SourceAddress":2,"DestinationAddress":1}}"#;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Ok((mut svc, _warnings)) = Service::load("fuzz.scxml", src) else { return };
    let _ = codegen::rust(&svc, "fuzz.scxml");
    svc.set_step_limit(200);
    let sid = svc.id();
    let Ok(inputs) = trace::parse(&TRACE.replace("SID", &sid.to_string())) else { return };
    let mut store = Store::new(vec![Arc::new(svc)], StoreConfig { pool: 1, capacity: 16 });
    let _ = trace::run(&mut store, &inputs, Options { auto_timers: true, end_ms: Some(60_000) });
});
