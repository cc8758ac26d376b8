//! What the examples' tests share: free ports on loopback.
#![allow(dead_code)]

use std::net::UdpSocket;

/// A UDP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
