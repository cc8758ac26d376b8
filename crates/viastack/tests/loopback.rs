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
fn a_restarted_node_that_speaks_first_loses_nothing() {
    let stack = RELIABLE.replace("TRANSPORT", "udp");
    let addrs = free_addrs("127.0.0.1", 2);
    let a = open(&stack, &addrs, 0, 4096);
    let data = a.channel("data").expect("channel");
    let b = open(&stack, &addrs, 1, 4096);
    data.send(NodeId(1), b"to the first".to_vec())
        .expect("send");
    assert!(matches!(
        b.recv_timeout(Duration::from_secs(20)),
        Ok(NodeEvent::Message(_))
    ));
    b.channel("data")
        .expect("channel")
        .send(NodeId(0), b"first says hi".to_vec())
        .expect("send");
    assert!(matches!(
        a.recv_timeout(Duration::from_secs(20)),
        Ok(NodeEvent::Message(_))
    ));
    // Everything acknowledged: nothing is in flight when node 1 goes.
    while a.metrics().expect("metrics").unsettled > 0 {
        std::thread::yield_now();
    }
    assert_eq!(b.close().expect("close").aborted, 0);
    // The new incarnation speaks first; the survivor hears it, then sends.
    let b = open(&stack, &addrs, 1, 4096);
    b.channel("data")
        .expect("channel")
        .send(NodeId(0), b"second says hi".to_vec())
        .expect("send");
    match a.recv_timeout(Duration::from_secs(20)) {
        Ok(NodeEvent::Message(m)) => assert_eq!(m.payload, b"second says hi"),
        other => panic!("{other:?}"),
    }
    for i in 0..50u32 {
        data.send(NodeId(1), i.to_be_bytes().to_vec())
            .expect("send");
    }
    for i in 0..50u32 {
        match b.recv_timeout(Duration::from_secs(20)) {
            Ok(NodeEvent::Message(m)) => assert_eq!(m.payload, i.to_be_bytes()),
            other => panic!("message {i}: {other:?}"),
        }
    }
    assert!(a.try_recv().is_none(), "no PeerRestarted: nothing was lost");
    assert_eq!(b.close().expect("close").aborted, 0);
    let report = a.close().expect("close");
    assert_eq!(report.aborted, 0);
    assert_eq!(report.metrics.counter("rel.readdressed"), 1);
    assert_eq!(report.metrics.counter("rel.dropped_restarted"), 0);
}

#[test]
fn a_peer_that_never_answers_is_reported_unreachable() {
    // Patient defaults would take minutes; these give up after 3 timeouts of 50-100 ms.
    let stack = RELIABLE.replace("TRANSPORT", "udp").replace(
        "kind = \"reliable-fifo\"",
        "kind = \"reliable-fifo\"\nrto_initial = \"50ms\"\nrto_min = \"50ms\"\nrto_max = \"100ms\"\nmax_retries = 3",
    );
    // Node 1's address is bound by nobody.
    let addrs = free_addrs("127.0.0.1", 2);
    let a = open(&stack, &addrs, 0, 64);
    let data = a.channel("data").expect("channel");
    let tags: Vec<_> = (0..3u8)
        .map(|i| data.send(NodeId(1), vec![i; 10]).expect("send"))
        .collect();
    match a.recv_timeout(Duration::from_secs(30)) {
        Ok(NodeEvent::Notice(Notice::SendFailed {
            kind: FailureKind::PeerUnreachable,
            peer,
            tags: reported,
            channel,
        })) => {
            assert_eq!((peer, &*channel), (NodeId(1), "data"));
            assert_eq!(reported, tags, "every message named, in send order");
        }
        other => panic!("expected PeerUnreachable, got {other:?}"),
    }
    assert_eq!(
        a.close().expect("close").aborted,
        0,
        "nothing left to abort"
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

/// Both nodes' loops as tasks of one single-threaded runtime (no thread of their own): the
/// application's sends, both loops and the receiver share that one thread. With
/// `read_late`, the receiver first lets its event queue fill (the loop must stop reading).
fn on_a_runtime(transport: &str, count: u32, event_queue: usize, read_late: bool) {
    let stack = RELIABLE.replace("TRANSPORT", transport);
    let addrs = free_addrs("127.0.0.1", 2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let open_on = |id: u32| {
        Node::builder()
            .stack_text("test.toml", &stack)
            .deployment(Deployment::new(addrs.clone()).with_id(NodeId(id)))
            .event_queue(event_queue)
            .open_on(rt.handle())
            .expect("open")
    };
    let (a, b) = (open_on(0), open_on(1));
    rt.block_on(async move {
        let data = a.channel("data").expect("channel");
        let payload = |i: u32| -> Vec<u8> {
            let mut v = i.to_be_bytes().to_vec();
            v.resize(8 + (i as usize * 53) % 2500, i as u8);
            v
        };
        let sender = tokio::spawn(async move {
            for i in 0..count {
                data.send_async(NodeId(1), payload(i)).await.expect("send");
            }
        });
        if read_late {
            while b.metrics_async().await.expect("metrics").events_waiting < event_queue as u64 {
                tokio::task::yield_now().await;
            }
        }
        for i in 0..count {
            match b.recv_async().await {
                Some(NodeEvent::Message(m)) => {
                    assert_eq!(m.payload, payload(i), "message {i} out of order or damaged")
                }
                other => panic!("message {i}: {other:?}"),
            }
        }
        sender.await.expect("sender");
        let m = b.metrics_async().await.expect("metrics");
        assert_eq!(m.channels["data"].received, u64::from(count));
        let report = a.close_async().await.expect("close");
        assert_eq!(report.aborted, 0, "a clean close settles everything");
        assert!(
            b.close().is_err(),
            "a blocking close inside the runtime that drives the node is refused"
        );
    });
}

#[test]
fn udp_node_on_the_callers_runtime() {
    on_a_runtime("udp", 3000, 4096, false);
}

#[test]
fn tcp_node_on_the_callers_runtime() {
    on_a_runtime("tcp", 2000, 4096, false);
}

#[test]
fn a_slow_reader_on_the_callers_runtime_loses_nothing() {
    on_a_runtime("udp", 2000, 16, true);
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
    assert_eq!(m.channels["data"].received, 10, "{m:?}");
    let text = m.to_prometheus();
    assert!(
        text.contains("viastack_transport_received_total{node=\"1\"}"),
        "{text}"
    );
    assert!(
        text.contains(
            "viastack_channel_messages_total{node=\"1\",channel=\"data\",kind=\"received\"} 10\n"
        ),
        "{text}"
    );
    let m = a.metrics().expect("metrics");
    assert_eq!(m.channels["data"].sent, 10, "{m:?}");
    assert_eq!(m.channels["data"].failed, 0, "{m:?}");
    a.close().expect("close");
    b.close().expect("close");
}

#[test]
fn try_send_says_full_when_the_queue_is_full() {
    let stack = RELIABLE.replace("TRANSPORT", "udp");
    // Node 1 is bound by nobody: the first message stays unsettled, the stack has no room
    // (max_unsettled 1), the second waits in the queue (1 entry), the third finds it full.
    let addrs = free_addrs("127.0.0.1", 2);
    let a = Node::builder()
        .stack_text("test.toml", &stack)
        .deployment(Deployment::new(addrs).with_id(NodeId(0)))
        .send_queue(1)
        .max_unsettled(1)
        .linger(Duration::from_millis(100))
        .open()
        .expect("open");
    let data = a.channel("data").expect("channel");
    let first = data.try_send(NodeId(1), b"one".to_vec()).expect("room");
    while a.metrics().expect("metrics").unsettled < 1 {
        std::thread::yield_now();
    }
    let second = data.try_send(NodeId(1), b"two".to_vec()).expect("room");
    assert_eq!(
        data.try_send(NodeId(1), b"three".to_vec()),
        Err(viastack::SendError::Full)
    );
    assert_eq!(
        data.send_timeout(NodeId(1), b"three".to_vec(), Duration::from_millis(20)),
        Err(viastack::SendError::Full),
        "a bounded wait gives up"
    );
    let m = a.metrics().expect("metrics");
    assert_eq!((m.unsettled, m.sends_waiting), (1, 1), "{m:?}");
    let events = a.events();
    let report = a.close().expect("close");
    assert_eq!(report.aborted, 2, "the unsettled one and the queued one");
    let mut reported = Vec::new();
    loop {
        match events.recv_timeout(Duration::from_secs(10)) {
            Ok(NodeEvent::Notice(Notice::SendFailed { tags, .. })) => reported.extend(tags),
            Ok(_) => {}
            Err(e) => {
                assert_eq!(
                    e,
                    viastack::RecvError::Closed,
                    "all read once the loop ended"
                );
                break;
            }
        }
    }
    reported.sort();
    assert_eq!(reported, vec![first, second]);
    assert_eq!(report.metrics.channels["data"].failed, 2);
}

#[test]
fn a_restarted_node_rejoins() {
    let stack = RELIABLE.replace("TRANSPORT", "udp");
    let addrs = free_addrs("127.0.0.1", 2);
    let a = open(&stack, &addrs, 0, 4096);
    let data = a.channel("data").expect("channel");
    let batch = |round: u32, part: u32| -> Vec<(viastack::Tag, Vec<u8>)> {
        (0..50u32)
            .map(|i| {
                let p = (round * 1_000_000 + part * 1000 + i).to_be_bytes().to_vec();
                (data.send(NodeId(1), p.clone()).expect("send"), p)
            })
            .collect()
    };
    for round in 1..=3 {
        // A new process at the same address: a new incarnation (a fresh random seed).
        let b = open(&stack, &addrs, 1, 4096);
        // First contact after the restart: what the survivor had addressed to the old
        // incarnation may have reached it, so each message is either delivered to the new one
        // (once, in order) or reported to the survivor as `PeerRestarted` — never both, never
        // neither.
        let sent = batch(round, 0);
        let (mut delivered, mut reported) = (Vec::new(), Vec::new());
        // At most 3000 waits of 10 ms for the accounts to balance.
        let mut waits = 0;
        while delivered.len() + reported.len() < sent.len() {
            waits += 1;
            assert!(
                waits < 3000,
                "round {round}: {delivered:?} delivered, {reported:?} reported"
            );
            if let Ok(NodeEvent::Message(m)) = b.recv_timeout(Duration::from_millis(10)) {
                delivered.push(m.payload);
            }
            while let Some(e) = a.try_recv() {
                if let NodeEvent::Notice(Notice::SendFailed { kind, tags, .. }) = e {
                    assert_eq!(kind, FailureKind::PeerRestarted, "round {round}");
                    reported.extend(tags);
                }
            }
        }
        let expected: Vec<Vec<u8>> = sent
            .iter()
            .filter(|(t, _)| !reported.contains(t))
            .map(|(_, p)| p.clone())
            .collect();
        assert_eq!(
            delivered, expected,
            "round {round}: the rest, once, in order"
        );
        // Once introduced, everything arrives, both ways.
        for (_, p) in batch(round, 1) {
            match b.recv_timeout(Duration::from_secs(20)) {
                Ok(NodeEvent::Message(m)) => assert_eq!(m.payload, p, "round {round}"),
                other => panic!("round {round}: {other:?}"),
            }
        }
        let back = b.channel("data").expect("channel");
        back.send(NodeId(0), round.to_be_bytes().to_vec())
            .expect("send");
        match a.recv_timeout(Duration::from_secs(20)) {
            Ok(NodeEvent::Message(m)) => assert_eq!(m.payload, round.to_be_bytes()),
            other => panic!("round {round}: {other:?}"),
        }
        assert_eq!(b.close().expect("close").aborted, 0);
    }
    assert_eq!(a.close().expect("close").aborted, 0);
}
