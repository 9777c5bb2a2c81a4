//! Batch socket layer tests.
use super::*;
use std::time::Duration;

fn receive_all(rx: &mut RecvBatch, socket: &UdpSocket, want: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut got = Vec::new();
    while got.len() < want {
        let n = rx.recv(socket, true).unwrap();
        assert!(n > 0, "timed out after {} of {want}", got.len());
        for i in 0..n {
            let (from, bytes) = rx.get(i).unwrap();
            got.push((from, bytes.to_vec()));
        }
    }
    got
}

/// Datagrams of many sizes to both families arrive whole, in order, with
/// their sender; an oversize one is counted, not sent.
#[test]
fn batches_cross_loopback_both_families() {
    for local in ["127.0.0.1:0", "[::1]:0"] {
        let a = UdpSocket::bind(local).unwrap();
        let b = UdpSocket::bind(local).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = b.local_addr().unwrap();
        let mut tx = SendBatch::default();
        for i in 0..100u8 {
            tx.push_parts(&a, to, &[i], &vec![i; i as usize]);
        }
        tx.push(&a, to, &vec![0; MAX_DATAGRAM + 1]);
        tx.flush(&a);
        assert_eq!((tx.sent, tx.errors, tx.oversize), (100, 0, 1));
        let got = receive_all(&mut RecvBatch::new(&b), &b, 100);
        for (i, (from, d)) in got.iter().enumerate() {
            assert_eq!(*from, a.local_addr().unwrap());
            assert_eq!(d.len(), i + 1);
            assert!(d.iter().all(|&x| x == i as u8));
        }
        assert_eq!(kernel_drops(&b).unwrap(), 0);
    }
}

/// Same-sized datagrams to one address go through the stack as a few
/// segmented sends; a GRO socket gets them coalesced and splits them, a
/// plain socket gets them one by one: the same bytes either way.
#[test]
fn runs_are_segmented_and_split_again() {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let gro = UdpSocket::bind("127.0.0.1:0").unwrap();
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    for s in [&gro, &plain] {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    }
    let mut rx = RecvBatch::new(&gro);
    let mut tx = SendBatch::default();
    for i in 0..300u32 {
        let to = if i % 100 < 50 { &gro } else { &plain };
        let mut d = [0u8; 172];
        d[..4].copy_from_slice(&i.to_be_bytes());
        tx.push(&a, to.local_addr().unwrap(), &d);
    }
    tx.flush(&a);
    assert_eq!((tx.sent, tx.errors), (300, 0));
    assert!(tx.segmented > 0 && tx.segmented < 20, "{} segmented sends", tx.segmented);
    let got = receive_all(&mut rx, &gro, 150);
    assert!(rx.coalesced > 0);
    let seqs: Vec<u32> =
        got.iter().map(|(_, d)| u32::from_be_bytes(d[..4].try_into().unwrap())).collect();
    let want: Vec<u32> = (0..300).filter(|i| i % 100 < 50).collect();
    assert_eq!(seqs, want);
    assert!(got.iter().all(|(_, d)| d.len() == 172));
    let mut buf = [0u8; 2048];
    for i in (0..300u32).filter(|i| i % 100 >= 50) {
        let (n, _) = plain.recv_from(&mut buf).unwrap();
        assert_eq!((n, u32::from_be_bytes(buf[..4].try_into().unwrap())), (172, i));
    }
}

/// Overflowing a small receive buffer shows up in the kernel drop count.
#[test]
fn kernel_drops_are_seen() {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    set_buffers(&b, 4096);
    let to = b.local_addr().unwrap();
    let mut tx = SendBatch::default().without_segmentation();
    for _ in 0..500 {
        tx.push(&a, to, &[0; 1000]);
    }
    tx.flush(&a);
    assert!(kernel_drops(&b).unwrap() > 0);
}
