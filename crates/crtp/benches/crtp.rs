//! cRTP speed: 100 G.729 flows (20-byte payloads), their packets
//! interleaved, compressed, and compressed then decompressed. The issue's
//! target is 10 million packets per second per core for both together.
//! `cargo bench -p calliper-crtp`.

use calliper_crtp::{Compressor, Config, Decompressor};
use divan::counter::ItemsCount;
use divan::Bencher;

fn main() {
    divan::main();
}

const FLOWS: usize = 100;
const PER_FLOW: usize = 100;

/// IPv4/UDP/RTP datagrams, flow after flow in turn, checksums correct.
fn packets() -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(FLOWS * PER_FLOW);
    for i in 0..PER_FLOW {
        for f in 0..FLOWS {
            let mut p =
                vec![0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, f as u8, 10, 0, 1, 1];
            p[4..6].copy_from_slice(&(i as u16).to_be_bytes());
            calliper_crtp::set_ip_checksum(&mut p, 20);
            p.extend_from_slice(&(4000 + 2 * f as u16).to_be_bytes());
            p.extend_from_slice(&[0x13, 0x88, 0, 40, 0, 0, 0x80, 18]);
            p.extend_from_slice(&(i as u16).to_be_bytes());
            p.extend_from_slice(&(160 * i as u32).to_be_bytes());
            p.extend_from_slice(&(0x1000 + f as u32).to_be_bytes());
            p.extend_from_slice(&[0x55; 20]);
            out.push(p);
        }
    }
    out
}

#[divan::bench]
fn compress(bencher: Bencher) {
    let packets = packets();
    let mut c = Compressor::new(Config::default()).unwrap();
    let mut link = Vec::with_capacity(256);
    bencher.counter(ItemsCount::new(packets.len())).bench_local(|| {
        for p in &packets {
            divan::black_box(c.compress(p, 0, &mut link));
        }
    });
}

#[divan::bench]
fn compress_and_decompress(bencher: Bencher) {
    round_trip(bencher, Config::default());
}

/// The same with RFC 3545's repeats (N = 2) and header checksum on.
#[divan::bench]
fn robust_compress_and_decompress(bencher: Bencher) {
    round_trip(bencher, Config { repeats: 2, header_checksum: true, ..Config::default() });
}

/// Compresses each packet and decompresses it at once, with `config`.
fn round_trip(bencher: Bencher, config: Config) {
    let packets = packets();
    let mut c = Compressor::new(config).unwrap();
    let mut d = Decompressor::new(config).unwrap();
    let (mut link, mut back) = (Vec::with_capacity(256), Vec::with_capacity(256));
    bencher.counter(ItemsCount::new(packets.len())).bench_local(|| {
        for p in &packets {
            let kind = c.compress(p, 0, &mut link);
            let _ = divan::black_box(d.decompress(kind.protocol(&config), &link, 0, &mut back));
        }
    });
}
