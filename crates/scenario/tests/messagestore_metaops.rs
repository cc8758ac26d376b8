//! The metaops of a service (seed 000 §5.1.2.1) acted on by the `messagestore` layer, in the
//! simulator over seeds (brief h-hc item 5). The overlay hands every unicast passing through a
//! node up to its store (`unicast = "hop"`); a ring of unicasts on a DT overlay crosses
//! intermediate nodes. A probe service delivers a payload and forwards it (`forwardMessage`).
//!
//! - `processIntermediateUnicastMessage`: true, the intermediate nodes run the service for
//!   the message (`store.transit_processed`); false, they only pass it on
//!   (`store.transit_forwarded`), the service never sees it.
//! - `messageStoreWillForwardMessage`: true, forwarding is the service's (its
//!   `forwardMessage`), the layer forwards nothing; false, the layer forwards a copy at once
//!   and the service gets a clone (seed: "a cloned copy of the message will be processed in
//!   MessageStore") — with a service that forwards too, the addressee gets two copies, the
//!   second suppressed (`store.duplicate_suppressed`).
//!
//! Each metaop flipped changes the counters, so a layer that ignored one fails a test; every
//! ring message reaches its addressee exactly once either way.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counter, run_src};
use viastack_scenario::Report;

fn spec(will_forward: bool, intermediate: bool) -> std::path::PathBuf {
    let text = format!(
        r#"<?xml version="1.0"?>
<scxml version="1.0" xmlns="http://www.w3.org/2005/07/scxml"
       xmlns:action="http://my.custom-actions.domain/action" initial="new">
  <datamodel>
    <data name="service">
      <Name>probe</Name><ServiceID>77</ServiceID><Delivery>message</Delivery>
      <DeliveryModes>unicast multicast</DeliveryModes>
    </data>
    <data name="metaops">
      <messageStoreWillForwardMessage>{will_forward}</messageStoreWillForwardMessage>
      <processIntermediateUnicastMessage>{intermediate}</processIntermediateUnicastMessage>
    </data>
    <data name="events">
      <Basic>
        <Event name="payloadmessage"><Message><MessageType>-128</MessageType></Message></Event>
      </Basic>
    </data>
  </datamodel>
  <state id="new">
    <transition event="payloadmessage" target="done">
      <action:toApplication message="last(payloadmessage)"/>
      <action:forwardMessage message="last(payloadmessage)"/>
    </transition>
  </state>
  <final id="done"/>
</scxml>
"#
    );
    let dir = std::env::temp_dir().join(format!("viastack-metaops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("probe-{will_forward}-{intermediate}.scxml"));
    // Tests run in parallel: write aside, then rename (a reader never sees a partial file).
    let tmp = dir.join(format!("{:?}.tmp", std::thread::current().id()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

fn run(will_forward: bool, intermediate: bool, seed: u64) -> Report {
    let nodes = 8 + (seed as u32 * 3) % 9;
    let src = format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "dt"
buddies = "0,1"
unicast = "hop"
[layers.store]
kind = "messagestore"
service = "{}"
[qos.o]
layers = ["dev", "sum", "net", "store"]
[channels.data]
qos = "o"
[scenario]
nodes = {nodes}
seed = 1
duration = "50s"
expect = "reliable"
[scenario.link]
latency = "5ms"
jitter = "2ms"
[[scenario.workload]]
channel = "data"
pattern = "ring"
messages = 5
size = 32
interval = "200ms"
start = "35s"
"#,
        spec(will_forward, intermediate).display()
    );
    let r = run_src(&src, seed);
    let what = format!("seed {seed}, will_forward {will_forward}, intermediate {intermediate}");
    assert!(r.verdict.holds, "{what}: {r}");
    assert_eq!(r.delivered, u64::from(nodes) * 5, "{what}: {r}");
    assert_eq!(r.duplicated + r.misdelivered, 0, "{what}: {r}");
    r
}

const SEEDS: u64 = 10;

#[test]
fn intermediate_nodes_run_the_service_only_when_the_metaop_says_so() {
    let (mut with, mut without) = (0, 0);
    for seed in 0..SEEDS {
        let r = run(true, true, seed);
        assert_eq!(
            counter(&r, "store.transit_forwarded"),
            0,
            "seed {seed}: {r}"
        );
        with += counter(&r, "store.transit_processed");
        let r = run(true, false, seed);
        assert_eq!(
            counter(&r, "store.transit_processed"),
            0,
            "seed {seed}: {r}"
        );
        without += counter(&r, "store.transit_forwarded");
    }
    // Not vacuous: the rings crossed intermediate nodes.
    assert!(
        with > 0 && without > 0,
        "{with} processed, {without} passed on"
    );
}

#[test]
fn the_layer_forwards_unless_the_store_will() {
    let (mut store_forwards, mut layer_forwards) = (0, 0);
    for seed in 0..SEEDS {
        let r = run(true, true, seed);
        assert_eq!(
            counter(&r, "store.duplicate_suppressed"),
            0,
            "seed {seed}: {r}"
        );
        store_forwards += counter(&r, "store.transit_processed");
        let r = run(false, true, seed);
        layer_forwards += counter(&r, "store.transit_forwarded");
        // The service forwards its clone too: the addressee's second copy is suppressed.
        if counter(&r, "store.transit_forwarded") > 0 {
            assert!(
                counter(&r, "store.duplicate_suppressed") > 0,
                "seed {seed}: {r}"
            );
        }
    }
    assert!(store_forwards > 0 && layer_forwards > 0);
}
