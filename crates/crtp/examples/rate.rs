//! Compresses then decompresses every IPv4/UDP/RTP datagram of a raw-IP
//! pcap (link type 101 or 228, little-endian; `calliper crtp
//! decompress` writes one) ROUNDS times, in memory:
//! header bytes per packet (the compressed packet less the RTP payload,
//! first round) and packets per second, to set beside another compressor
//! run on the same file (BENCHMARKS.md: the ROHC library).
//!
//! `cargo run --release -p calliper-crtp --example rate -- FILE [ROUNDS]`
//! `... --example rate -- --write-g729 FILE` writes the steady input: 100
//! G.729 flows of 500 packets 20 ms apart, interleaved, no UDP checksum,
//! IPv4 IDs stepping by one.

use calliper_crtp::{Compressor, Config, Decompressor};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: rate FILE.pcap [ROUNDS]  (raw-IP pcap of IPv4/UDP/RTP datagrams)");
        std::process::exit(2);
    };
    if path == "--write-g729" {
        let out = args.next().expect("--write-g729 FILE");
        std::fs::write(&out, steady_g729()).unwrap_or_else(|e| panic!("{out}: {e}"));
        return;
    }
    let rounds: u32 = args.next().map_or(1, |r| r.parse().expect("ROUNDS: a number"));
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let link = u32::from_le_bytes(file[20..24].try_into().unwrap());
    let unit = match file[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] => 1000,
        [0x4d, 0x3c, 0xb2, 0xa1] => 1,
        _ => 0,
    };
    assert!(
        unit > 0 && (link == 101 || link == 228),
        "{path}: not a little-endian raw-IP pcap (write one with `calliper crtp decompress`)"
    );
    let mut packets = Vec::new();
    let mut at = 24;
    while at + 16 <= file.len() {
        let field = |i: usize| u32::from_le_bytes(file[at + i..at + i + 4].try_into().unwrap());
        let (seconds, fraction, len) = (field(0) as u64, field(4) as u64, field(8) as usize);
        let p = &file[at + 16..at + 16 + len];
        if is_rtp(p) {
            packets.push((seconds * 1_000_000_000 + fraction * unit, p));
        }
        at += 16 + len;
    }
    let config = Config::default();
    let mut c = Compressor::new(config).unwrap();
    let mut d = Decompressor::new(config).unwrap();
    let (mut link, mut back) = (Vec::with_capacity(2048), Vec::with_capacity(2048));
    let (mut header_in, mut header_out, mut wrong) = (0usize, 0usize, 0u64);
    let start = Instant::now();
    for round in 0..rounds {
        for &(at, p) in &packets {
            // The capture's clock, a round 1 000 s after the last.
            let now = round as u64 * 1_000_000_000_000 + at;
            let kind = c.compress(p, now, &mut link);
            let ok = d.decompress(kind.protocol(&config), &link, now, &mut back).is_ok();
            wrong += (!ok || back != p) as u64;
            if round == 0 {
                let ihl = (p[0] & 15) as usize * 4;
                let header = ihl + 8 + 12 + 4 * (p[ihl + 8] & 15) as usize;
                header_in += header;
                header_out += link.len() - (p.len() - header);
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let n = packets.len() as f64;
    println!(
        "calliper {path}: {} packets, header bytes {:.2} per packet (from {:.2}), compress+decompress {:.2} M packets/s, {wrong} not restored",
        packets.len(),
        header_out as f64 / n,
        header_in as f64 / n,
        n * rounds as f64 / seconds / 1e6
    );
}

/// The steady input as a raw-IP pcap.
fn steady_g729() -> Vec<u8> {
    let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&101u32.to_le_bytes());
    for i in 0..500u32 {
        for f in 0..100u8 {
            let mut p = vec![0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, f, 10, 0, 1, 1];
            p[4..6].copy_from_slice(&(i as u16).to_be_bytes());
            calliper_crtp::set_ip_checksum(&mut p, 20);
            p.extend_from_slice(&(4000 + 2 * f as u16).to_be_bytes());
            p.extend_from_slice(&[0x13, 0x88, 0, 40, 0, 0, 0x80, 18]);
            p.extend_from_slice(&(i as u16).to_be_bytes());
            p.extend_from_slice(&(160 * i).to_be_bytes());
            p.extend_from_slice(&(0x1000 + f as u32).to_be_bytes());
            p.extend_from_slice(&[0x55; 20]);
            let micros = i as u64 * 20_000;
            pcap.extend_from_slice(&((micros / 1_000_000) as u32).to_le_bytes());
            pcap.extend_from_slice(&((micros % 1_000_000) as u32).to_le_bytes());
            pcap.extend_from_slice(&(p.len() as u32).to_le_bytes());
            pcap.extend_from_slice(&(p.len() as u32).to_le_bytes());
            pcap.extend_from_slice(&p);
        }
    }
    pcap
}

/// Unfragmented IPv4/UDP whose payload starts like RTP (version 2, not RTCP).
fn is_rtp(p: &[u8]) -> bool {
    if p.len() < 40
        || p[0] >> 4 != 4
        || p[9] != 17
        || u16::from_be_bytes([p[6], p[7]]) & 0x3FFF != 0
    {
        return false;
    }
    let ihl = (p[0] & 15) as usize * 4;
    let rtp = &p[(ihl + 8).min(p.len())..];
    rtp.len() >= 12 && rtp[0] >> 6 == 2 && !(200..=204).contains(&rtp[1])
}
