//! Property: the incremental evaluation of composite events (per-instance indexes updated on
//! arrival) agrees with a naive rescan of the whole history, over random histories, random node
//! information (changing mid-history) and time windows.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use viastack_kernel::time::Instant;
use viastack_spec::service::data::ServiceData;
use viastack_spec::service::logic::{self, Entry};
use viastack_spec::service::{Addr, Message, NodeInfo};

const EXPRS: &[&str] = &[
    "forall d in node.children : exists m in ack : m.source == d",
    "exists d in node.children : exists m in ack within 50ms : m.source == d",
    "not exists m in nack : m.source == node.parent",
    "forall m in ack : m.seq < 5",
    "forall m in ack within 30ms : m.seq != 3 or m.source == 1",
    "exists t in to within 20ms",
    "forall d in node.neighbours : (exists m in ack : m.source == d) implies not exists n in nack : n.source == d",
    "exists m in ack : m.seq >= 2 and m.type == 2 and m.source == node.address",
    "exists t in to : t.timer == 3 and not (exists m in nack within 10ms)",
    "forall d in node.children : forall m in nack within 40ms : m.source != d or m.seq > 2",
];

fn data() -> ServiceData {
    let comps: String = EXPRS
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "<Event name=\"c{i}\"><ConstituentBasicEvent>ack</ConstituentBasicEvent><Expression>{}</Expression></Event>",
                c.replace('<', "&lt;").replace('>', "&gt;")
            )
        })
        .collect();
    let src = format!(
        r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" initial="a"><datamodel>
        <data name="service"><ServiceID>1</ServiceID></data>
        <data name="events"><Basic>
          <Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
          <Event name="nack"><Message><MessageType>1</MessageType></Message></Event>
          <Event name="to"><Timer/></Event>
        </Basic><Composite>{comps}</Composite></data></datamodel><state id="a"/></scxml>"#
    );
    ServiceData::read("t.scxml", &src).unwrap()
}

#[derive(Clone, Debug)]
enum Step {
    Arrive {
        event: u16,
        dt_ms: u64,
        source: u64,
        seq: u64,
        timer: u32,
    },
    Node {
        address: u64,
        parent: u64,
        children: Vec<u64>,
        neighbours: Vec<u64>,
    },
    Wait {
        dt_ms: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u16..3, 0u64..20, 1u64..5, 0u64..7, 1u32..5)
            .prop_map(|(event, dt_ms, source, seq, timer)| Step::Arrive { event, dt_ms, source, seq, timer }),
        1 => (1u64..5, 0u64..5, proptest::collection::vec(1u64..5, 0..4), proptest::collection::vec(1u64..5, 0..4))
            .prop_map(|(address, parent, children, neighbours)| Step::Node { address, parent, children, neighbours }),
        1 => (0u64..60).prop_map(|dt_ms| Step::Wait { dt_ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn incremental_equals_naive(steps in proptest::collection::vec(step(), 1..40)) {
        let d = data();
        let prog = logic::compile(&d).unwrap();
        let mut state = prog.new_state();
        let mut node = NodeInfo { address: Addr(1), parent: Addr(2), children: vec![Addr(1), Addr(3)], neighbours: vec![Addr(2)] };
        let mut now = 0u64;
        let mut msgs: Vec<(u16, u64, Message, u32)> = Vec::new();
        for s in &steps {
            match s {
                Step::Arrive { event, dt_ms, source, seq, timer } => {
                    now += dt_ms;
                    let m = Message { message_type: if *event == 0 { 2 } else { 1 }, source: Addr(*source), seq: *seq, ..Message::default() };
                    let t = Instant::from_millis(now);
                    prog.record(&mut state, *event, t, (*event != 2).then_some(&m), *timer);
                    msgs.push((*event, now, m, *timer));
                }
                Step::Node { address, parent, children, neighbours } => {
                    node = NodeInfo {
                        address: Addr(*address),
                        parent: Addr(*parent),
                        children: children.iter().map(|&c| Addr(c)).collect(),
                        neighbours: neighbours.iter().map(|&c| Addr(c)).collect(),
                    };
                }
                Step::Wait { dt_ms } => now += dt_ms,
            }
            let history: Vec<Entry<'_>> = msgs
                .iter()
                .map(|(e, t, m, timer)| Entry { event: *e, time: Instant::from_millis(*t), message: (*e != 2).then_some(m), timer: *timer })
                .collect();
            let t = Instant::from_millis(now);
            for (i, expr) in EXPRS.iter().enumerate() {
                prop_assert_eq!(prog.eval(i, &state, &node, t), prog.eval_naive(i, &history, &node, t), "expr `{}` after {:?}", expr, s);
            }
        }
    }
}
