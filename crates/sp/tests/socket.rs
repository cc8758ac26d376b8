//! The blocking endpoint on real loopback UDP: connect / accept / send_message / recv_message /
//! set_reliability / stats / close, and the typed refusal of a message beyond 255 blocks.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use viastack_sp::socket::{SpError, SpSocket};
use viastack_sp::{CloseReason, Config, Event, Reliability, SendError};

#[test]
fn loopback_transfer_with_a_reliability_change() {
    let config = Config {
        block_size: 1000,
        echo_interval: viastack_kernel::Duration::from_millis(20),
        ..Config::default()
    };
    let mut server = SpSocket::bind("127.0.0.1:0", config.clone(), true).unwrap();
    let addr = server.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let h = server.accept(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        while got.len() < 3 {
            let m = server.recv_message(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(m.handle, h);
            got.push(m.data);
        }
        let notices = server.take_notices();
        server.run_for(Duration::from_millis(300)).unwrap();
        (got, notices)
    });
    let mut client = SpSocket::bind("127.0.0.1:0", config, false).unwrap();
    let h = client.connect(addr, Duration::from_secs(5)).unwrap();
    let big: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    client.send_message(h, big.clone(), 1).unwrap();
    client.flush(h, Duration::from_secs(5)).unwrap();
    client.set_reliability(h, Reliability::Checksummed).unwrap();
    client.send_message(h, b"after".to_vec(), 0).unwrap();
    client.send_message(h, b"last".to_vec(), 3).unwrap();
    client.flush(h, Duration::from_secs(5)).unwrap();
    // A message beyond 255 blocks is refused with a typed error, not truncated. In
    // CHECKSUMMED mode parity blocks use PBLOCKs too: 204 data + 51 parity (k = 4).
    let too_big = vec![0u8; 255 * 1000 + 1];
    match client.send_message(h, too_big, 0) {
        Err(SpError::Send(SendError::TooLarge { len, max })) => {
            assert_eq!((len, max), (255_001, 204_000))
        }
        other => panic!("{other:?}"),
    }
    client.run_for(Duration::from_millis(100)).unwrap();
    let stats = client.stats(h).unwrap();
    assert!(stats.rtt.is_some(), "{stats:?}");
    assert_eq!(stats.messages_sent, 3);
    assert_eq!(
        client.close(h, Duration::from_secs(2)).unwrap(),
        CloseReason::Local
    );
    let (got, notices) = t.join().unwrap();
    assert_eq!(got[0], big);
    assert_eq!(got[1..], [b"after".to_vec(), b"last".to_vec()]);
    assert!(notices
        .iter()
        .any(|(_, e)| *e == Event::ReliabilityChanged(Reliability::Checksummed)));
}

#[test]
fn connecting_to_nobody_fails_with_the_conn_timer() {
    let config = Config {
        conn_timeout: viastack_kernel::Duration::from_millis(20),
        ..Config::default()
    };
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut client = SpSocket::bind("127.0.0.1:0", config, false).unwrap();
    match client.connect(silent.local_addr().unwrap(), Duration::from_secs(5)) {
        Err(SpError::Failed(viastack_sp::FailReason::ConnectTimeout)) => {}
        other => panic!("{other:?}"),
    }
}

/// A socket dedicated to its peer (a connected UDP socket) sends without addresses, refuses
/// other peers and never sees their datagrams; the receiver takes in-order blocks in place,
/// also into the buffers the application gives back.
#[test]
fn a_dedicated_socket_talks_to_its_peer_only() {
    let config = Config {
        block_size: 1000,
        ..Config::default()
    };
    let mut server = SpSocket::bind("127.0.0.1:0", config.clone(), true).unwrap();
    let addr = server.local_addr().unwrap();
    let messages: Vec<Vec<u8>> = (0..6u32)
        .map(|k| (0..4_500 + k).map(|i| (i * 7 + k) as u8).collect())
        .collect();
    let want = messages.clone();
    // Polls briefly between the blocks of a message instead of sleeping.
    server.set_busy_poll(Duration::from_micros(50));
    let t = std::thread::spawn(move || {
        server.accept(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let m = server.recv_message(Some(Duration::from_secs(5))).unwrap();
            got.push(m.data.clone());
            server.recycle(m);
        }
        server.run_for(Duration::from_millis(300)).unwrap();
        assert_eq!(got, want);
        server.endpoint_stats().clone()
    });
    let mut client = SpSocket::bind("127.0.0.1:0", config, false).unwrap();
    client.dedicate(addr).unwrap();
    let h = client.connect(addr, Duration::from_secs(5)).unwrap();
    // A stranger's datagram never reaches a connected socket.
    let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger
        .send_to(&[0u8; 7], client.local_addr().unwrap())
        .unwrap();
    for m in &messages {
        client.send_message(h, m.clone(), 0).unwrap();
        client.flush(h, Duration::from_secs(5)).unwrap();
    }
    match client.connect(stranger.local_addr().unwrap(), Duration::from_secs(1)) {
        Err(SpError::Dedicated(p)) => assert_eq!(p, addr),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client.dedicate(stranger.local_addr().unwrap()),
        Err(SpError::Dedicated(_))
    ));
    client.close(h, Duration::from_secs(2)).unwrap();
    assert_eq!(client.endpoint_stats().bad_packets(), 0);
    let stats = t.join().unwrap();
    // 6 messages of 5 blocks: all but the very first block (nothing predicted yet) land in
    // place on a clean loopback (29); a little room for a datagram lost to a full buffer.
    assert!(stats.in_place >= 27, "{stats:?}");
}
