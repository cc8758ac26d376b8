//! Any text as a composite event's first-order-logic expression (viastack_spec::service::logic):
//! parsing, type checking and the incremental compilation never panic, and whatever compiles
//! evaluates the same incrementally and by rescanning a small history.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_kernel::Instant;
use viastack_spec::service::data::ServiceData;
use viastack_spec::service::logic::{self, Entry};
use viastack_spec::service::{Addr, Message, NodeInfo};

const SRC: &str = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" initial="a"><datamodel>
<data name="service"><ServiceID>1</ServiceID></data>
<data name="events"><Basic>
  <Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
  <Event name="nack"><Message><MessageType>1</MessageType></Message></Event>
  <Event name="to"><Timer/></Event>
</Basic></data></datamodel><state id="a"/></scxml>"#;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = logic::parse(text);
    let Ok(mut d) = ServiceData::read("f.scxml", SRC) else { return };
    d.composite.push(viastack_spec::service::data::CompositeDef {
        name: "c".into(),
        pos: Default::default(),
        constituents: vec![0],
        expr: text.to_string(),
        expr_pos: Default::default(),
        xquery: None,
    });
    let Ok(prog) = logic::compile(&d) else { return };
    let node = NodeInfo { address: Addr(1), parent: Addr(2), children: vec![Addr(1), Addr(3)], neighbours: vec![Addr(2)] };
    let msgs: Vec<(u16, u64, Message)> = (0..6u64)
        .map(|i| ((i % 3) as u16, i * 7, Message { message_type: 2, source: Addr(i % 4), seq: i, ..Message::default() }))
        .collect();
    let mut st = prog.new_state();
    for (k, (e, t, m)) in msgs.iter().enumerate() {
        let now = Instant::from_millis(*t);
        prog.record(&mut st, *e, now, (*e != 2).then_some(m), 3);
        let hist: Vec<Entry<'_>> = msgs[..=k]
            .iter()
            .map(|(e, t, m)| Entry { event: *e, time: Instant::from_millis(*t), message: (*e != 2).then_some(m), timer: 3 })
            .collect();
        assert_eq!(prog.eval(0, &st, &node, now), prog.eval_naive(0, &hist, &node, now), "{text}");
    }
});
