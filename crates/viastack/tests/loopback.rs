//! The API on real loopback sockets: two nodes as threads of this process, over UDP and TCP,
//! IPv4 and IPv6; back-pressure without loss; a close that reports what it could not settle.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use viastack::{Deployment, FailureKind, Node, NodeEvent, NodeId, Notice};

const RELIABLE: &str = r#"
[layers.dev]
kind = "device"
transport = "TRANSPORT"
[layers.sum]
kind = "checksum"
[layers.rel]
kind = "reliable-fifo"
[layers.frag]
kind = "fragment"
mtu = 1200
[qos.q]
layers = ["dev", "sum", "rel", "frag"]
[channels.data]
qos = "q"
"#;

/// SP (seed 002) instead of `reliable-fifo` + `fragment`: SP cuts messages into blocks itself.
const SP: &str = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.sp]
kind = "sp"
reliability = "reliable"
[qos.q]
layers = ["dev", "sum", "sp"]
[channels.data]
qos = "q"
"#;

/// `n` addresses on `ip` with ports free a moment ago.
fn free_addrs(ip: &str, n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind(format!("{ip}:0")).expect("bind"))
        .collect();
    socks
        .iter()
        .map(|s| s.local_addr().expect("addr"))
        .collect()
}

fn open(stack: &str, addrs: &[SocketAddr], id: u32, event_queue: usize) -> Node {
    Node::builder()
        .stack_text("test.toml", stack)
        .deployment(Deployment::new(addrs.to_vec()).with_id(NodeId(id)))
        .event_queue(event_queue)
        .linger(Duration::from_secs(5))
        .open()
        .expect("open")
}

/// Node 0 sends `count` messages of varied sizes (some fragmented) to node 1, which reads
/// them all: each exactly once, in order, intact.
fn transfer(transport: &str, ip: &str, count: u32, event_queue: usize, read_late: bool) {
    let stack = RELIABLE.replace("TRANSPORT", transport);
    let addrs = free_addrs(ip, 2);
    let a = open(&stack, &addrs, 0, 4096);
    let b = open(&stack, &addrs, 1, event_queue);
    let data = a.channel("data").expect("channel");
    let sender = std::thread::spawn(move || {
        for i in 0..count {
            data.send(NodeId(1), payload(i)).expect("send");
        }
        a
    });
    if read_late {
        // The receiver reads nothing until its small event queue is full: it must stop
        // reading the socket (the sender's stack then waits for acknowledgements and its
        // `send` blocks), and lose nothing.
        let mut waiting = 0;
        while waiting < event_queue as u64 {
            waiting = b.metrics().expect("metrics").events_waiting;
            std::thread::yield_now();
        }
        check_all(&b, count);
        let a = sender.join().expect("sender");
        let report = a.close().expect("close");
        assert_eq!(report.aborted, 0);
    } else {
        check_all(&b, count);
        let a = sender.join().expect("sender");
        let report = a.close().expect("close");
        assert_eq!(report.aborted, 0, "a clean close settles everything");
    }
    b.close().expect("close");
}

/// Message `i` of a transfer: its number, then up to 3000 bytes (some fragmented).
fn payload(i: u32) -> Vec<u8> {
    let len = 8 + (i as usize * 37) % 3000;
    let mut v = i.to_be_bytes().to_vec();
    v.resize(len, (i % 251) as u8);
    v
}

fn check_all(b: &Node, count: u32) {
    for i in 0..count {
        match b.recv_timeout(Duration::from_secs(20)) {
            Ok(NodeEvent::Message(m)) => {
                assert_eq!(m.from, NodeId(0));
                assert_eq!(&*m.channel, "data");
                assert_eq!(m.payload, payload(i), "message {i} out of order or damaged");
            }
            other => panic!("message {i}: expected a message, got {other:?}"),
        }
    }
    assert!(b.try_recv().is_none(), "a message arrived twice");
}

#[test]
fn udp_ipv4_every_message_once_in_order() {
    transfer("udp", "127.0.0.1", 3000, 4096, false);
}

#[test]
fn tcp_ipv4_every_message_once_in_order() {
    transfer("tcp", "127.0.0.1", 2000, 4096, false);
}

#[test]
fn udp_ipv6() {
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("skipped: this machine has no IPv6 loopback");
        return;
    }
    transfer("udp", "[::1]", 1000, 4096, false);
}

#[test]
fn a_slow_reader_pauses_the_node_and_loses_nothing() {
    transfer("udp", "127.0.0.1", 3000, 16, true);
}

#[test]
fn sp_close_lingers_until_everything_is_acknowledged() {
    let addrs = free_addrs("127.0.0.1", 2);
    let a = open(SP, &addrs, 0, 4096);
    let b = open(SP, &addrs, 1, 4096);
    let data = a.channel("data").expect("channel");
    // More messages than `max_unsettled` (512): sends are held back while SP holds that many
    // unacknowledged; the close right after the last one waits until SP has them all
    // acknowledged, and only then closes the channel.
    let count = 3000;
    for i in 0..count {
        data.send(NodeId(1), payload(i)).expect("send");
    }
    let report = a.close().expect("close");
    assert_eq!(report.aborted, 0, "a clean close settles everything");
    assert_eq!(report.metrics.unsettled, 0);
    check_all(&b, count);
    b.close().expect("close");
}

#[test]
fn close_reports_what_no_peer_acknowledged() {
    close_reports_unacknowledged(&RELIABLE.replace("TRANSPORT", "udp"));
}

#[test]
fn sp_close_reports_what_no_peer_acknowledged() {
    close_reports_unacknowledged(SP);
}

fn close_reports_unacknowledged(stack: &str) {
    // Node 1's address is bound by nobody: nothing will be acknowledged.
    let addrs = free_addrs("127.0.0.1", 2);
    let a = Node::builder()
        .stack_text("test.toml", stack)
        .deployment(Deployment::new(addrs).with_id(NodeId(0)))
        .linger(Duration::from_millis(300))
        .open()
        .expect("open");
    let data = a.channel("data").expect("channel");
    let tags: Vec<_> = (0..5u8)
        .map(|i| data.send(NodeId(1), vec![i; 100]).expect("send"))
        .collect();
    let events = a.events();
    let report = a.close().expect("close");
    assert_eq!(report.aborted, 5);
    let mut reported = Vec::new();
    while let Some(e) = events.recv() {
        if let NodeEvent::Notice(Notice::SendFailed {
            kind: FailureKind::SendAborted,
            peer,
            tags,
            ..
        }) = e
        {
            assert_eq!(peer, NodeId(1));
            reported.extend(tags);
        }
    }
    assert_eq!(reported, tags, "every unsettled message is named at close");
    assert!(
        data.send(NodeId(1), b"late".to_vec()).is_err(),
        "a closed node takes no sends"
    );
}

#[test]
fn mistakes_are_errors_not_panics() {
    let stack = RELIABLE.replace("TRANSPORT", "udp");
    let addrs = free_addrs("127.0.0.1", 2);
    let node = open(&stack, &addrs, 0, 64);
    assert!(node.channel("nope").is_err());
    let data = node.channel("data").expect("channel");
    assert!(matches!(
        data.send(NodeId(7), b"x".to_vec()),
        Err(viastack::SendError::UnknownPeer(7, 2))
    ));
    node.close().expect("close");
    // An address this machine does not have.
    let e = Node::builder()
        .stack_text("test.toml", &stack)
        .deployment(
            Deployment::new(vec!["192.0.2.1:7000".parse().expect("addr"), addrs[1]])
                .with_id(NodeId(0)),
        )
        .open()
        .expect_err("cannot bind");
    assert!(e.to_string().contains("cannot bind 192.0.2.1:7000"), "{e}");
    // A stack with a mistake says where.
    let e = Node::builder()
        .stack_text("bad.toml", "[layers.x]\nkind = \"nosuch\"\n")
        .deployment(Deployment::new(addrs).with_id(NodeId(0)))
        .open()
        .expect_err("bad stack");
    assert!(e.to_string().contains("bad.toml:"), "{e}");
}

#[test]
fn async_send_and_receive() {
    let stack = RELIABLE.replace("TRANSPORT", "udp");
    let addrs = free_addrs("127.0.0.1", 2);
    let a = open(&stack, &addrs, 0, 4096);
    let b = open(&stack, &addrs, 1, 4096);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let data = a.channel("data").expect("channel");
        for i in 0..500u32 {
            data.send_async(NodeId(1), i.to_be_bytes().to_vec())
                .await
                .expect("send");
        }
        for i in 0..500u32 {
            match b.recv_async().await {
                Some(NodeEvent::Message(m)) => assert_eq!(m.payload, i.to_be_bytes()),
                other => panic!("{other:?}"),
            }
        }
    });
    a.close().expect("close");
    b.close().expect("close");
}

#[test]
fn metrics_count_the_traffic() {
    let stack = RELIABLE.replace("TRANSPORT", "udp");
    let addrs = free_addrs("127.0.0.1", 2);
    let a = open(&stack, &addrs, 0, 4096);
    let b = open(&stack, &addrs, 1, 4096);
    let data = a.channel("data").expect("channel");
    for _ in 0..10 {
        data.send(NodeId(1), vec![1; 3000]).expect("send");
    }
    for _ in 0..10 {
        assert!(matches!(
            b.recv_timeout(Duration::from_secs(10)),
            Ok(NodeEvent::Message(_))
        ));
    }
    let m = b.metrics().expect("metrics");
    assert!(m.transport.received >= 30, "3 fragments per message: {m:?}");
    let text = m.to_prometheus();
    assert!(
        text.contains("viastack_transport_received_total{node=\"1\"}"),
        "{text}"
    );
    a.close().expect("close");
    b.close().expect("close");
}
