//! The socket layer's fixed costs: what a busy-polling node pays per empty
//! poll, and one datagram's trip through loopback.
use calliper_relay::batch_io::{RecvBatch, SendBatch};
use divan::Bencher;
use std::net::UdpSocket;

fn main() {
    divan::main();
}

/// `recvmmsg` on an empty socket: the busy-poll loop's idle turn.
#[divan::bench]
fn empty_poll(b: Bencher) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rx = RecvBatch::new(&s);
    b.bench_local(|| rx.recv(&s, false).unwrap());
}

/// One datagram sent and received over loopback through the batch layer.
#[divan::bench]
fn loopback_round(b: Bencher) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = s.local_addr().unwrap();
    let mut rx = RecvBatch::new(&s);
    let mut tx = SendBatch::default();
    let payload = [7u8; 172];
    b.bench_local(|| {
        tx.push(&s, to, &payload);
        tx.flush(&s);
        let mut n = 0;
        while n == 0 {
            n = rx.recv(&s, false).unwrap();
        }
        n
    });
}

/// A keyed link's cost per datagram (a 172-byte voice datagram): the
/// sender's seal and the receiver's check, BLAKE3 keyed, one each way.
#[divan::bench]
fn link_mac_seal_and_open(b: Bencher) {
    use calliper_relay::udp::auth::LinkAuth;
    let key = [9u8; 32];
    let now = 1_800_000_000_000_000_000;
    let (mut tx, mut rx) = (LinkAuth::new(key, 1, 2, now), LinkAuth::new(key, 2, 1, now));
    let mut sealed = vec![7u8; 172 + calliper_relay::udp::auth::TRAILER];
    b.bench_local(|| {
        let t = tx.seal(now, &sealed[..172]);
        sealed[172..].copy_from_slice(&t);
        rx.open(&sealed).map(<[u8]>::len)
    });
}
