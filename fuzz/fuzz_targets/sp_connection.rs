//! Arbitrary datagrams into SP endpoints with an open connection: the first byte of each chunk
//! picks the receiving side, how far time jumps and whether the datagram is received in place
//! (into the region the endpoint lends, as `SpSocket` receives it), the rest is the datagram
//! (its ids patched to the live connection half the time, so the state machine is reached, not
//! just the demultiplexer). Nothing panics and nothing loops: every call returns.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_kernel::{Duration, Instant};
use viastack_sp::{Config, Endpoint};

fuzz_target!(|data: &[u8]| {
    let config = Config {
        block_size: 16,
        fec_group: 2,
        ..Config::default()
    };
    let mut eps = [
        Endpoint::<u8>::new(config.clone(), false),
        Endpoint::new(config, true),
    ];
    let mut now = Instant::ZERO;
    let h = eps[0].connect(now, 1).expect("an id");
    let mut buf = Vec::new();
    // Handshake and one message each way, honestly.
    let mut pump = |eps: &mut [Endpoint<u8>; 2], now: Instant| {
        for _ in 0..64 {
            let mut moved = false;
            for from in 0..2 {
                buf.clear();
                if let Some((to, _)) = eps[from].poll_transmit(now, &mut buf) {
                    let pkt = buf.clone();
                    eps[usize::from(to)].handle_datagram(now, from as u8, &pkt);
                    moved = true;
                }
            }
            while eps[0].poll_event().is_some() || eps[1].poll_event().is_some() {}
            if !moved {
                break;
            }
        }
    };
    if let Some(c) = eps[0].connection_mut(h) {
        let _ = c.send_message(b"hello, fuzz".to_vec(), 1);
    }
    pump(&mut eps, now);
    let mut scratch = Vec::new();
    let ids = [
        eps[0].handles().next().map(|h| h.0),
        eps[1].handles().next().map(|h| h.0),
    ];
    for chunk in data.split(|b| *b == 0xfe).take(64) {
        let Some((&ctl, bytes)) = chunk.split_first() else {
            continue;
        };
        let to = usize::from(ctl & 1);
        now += Duration::from_millis(u64::from(ctl >> 4) * 20);
        let mut pkt = bytes.to_vec();
        if ctl & 2 != 0 && pkt.len() >= 4 {
            // Address the live connection: DEST_ID = receiver's id, SRC_ID = sender's.
            if let (Some(d), Some(s)) = (ids[to], ids[1 - to]) {
                pkt[..2].copy_from_slice(&d.to_be_bytes());
                pkt[2..4].copy_from_slice(&s.to_be_bytes());
                if let Ok(mut p) = viastack_sp::wire::Packet::new_checked(&mut pkt[..]) {
                    p.fill_checksum();
                }
            }
        }
        if ctl & 4 != 0 {
            eps[to].handle_split(now, (1 - to) as u8, &pkt, ctl & 8 != 0, &mut scratch);
        } else {
            eps[to].handle_datagram_ecn(now, (1 - to) as u8, &pkt, ctl & 8 != 0);
        }
        for ep in eps.iter_mut() {
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
        }
        pump(&mut eps, now);
    }
});
