//! Capture reader tests.
use super::*;

fn pcap_header(magic: u32, link: u32, big: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let w32 =
        |v: &mut Vec<u8>, x: u32| v.extend(if big { x.to_be_bytes() } else { x.to_le_bytes() });
    let w16 =
        |v: &mut Vec<u8>, x: u16| v.extend(if big { x.to_be_bytes() } else { x.to_le_bytes() });
    w32(&mut v, magic);
    w16(&mut v, 2);
    w16(&mut v, 4);
    w32(&mut v, 0);
    w32(&mut v, 0);
    w32(&mut v, 65535);
    w32(&mut v, link);
    v
}

fn record(v: &mut Vec<u8>, big: bool, sec: u32, frac: u32, data: &[u8]) {
    for x in [sec, frac, data.len() as u32, data.len() as u32] {
        v.extend(if big { x.to_be_bytes() } else { x.to_le_bytes() });
    }
    v.extend_from_slice(data);
}

#[test]
fn pcap_both_byte_orders_and_resolutions() {
    for (magic, big, nanos) in [
        (0xA1B2C3D4u32, false, false),
        (0xA1B2C3D4, true, false),
        (0xA1B23C4D, false, true),
        (0xA1B23C4D, true, true),
    ] {
        let mut f = pcap_header(magic, 1, big);
        record(&mut f, big, 10, 500, b"abc");
        record(&mut f, big, 11, 0, b"defg");
        let mut r = CaptureReader::new(&f[..]).unwrap();
        assert_eq!(r.kind(), FileKind::Pcap);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.data, b"abc");
        assert_eq!(p.link_type, 1);
        assert_eq!(p.ts_ns, 10_000_000_000 + if nanos { 500 } else { 500_000 });
        assert_eq!(r.next_packet().unwrap().unwrap().data, b"defg");
        assert!(r.next_packet().unwrap().is_none());
        // The batched reading (its own loop for each byte order and unit).
        let mut r = CaptureReader::new(&f[..]).unwrap();
        let b = r.next_batch(64).unwrap();
        let got: Vec<_> = b.iter().map(|p| (p.ts_ns, p.data.to_vec(), p.orig_len)).collect();
        let frac = if nanos { 500 } else { 500_000 };
        assert_eq!(
            got,
            [(10_000_000_000 + frac, b"abc".to_vec(), 3), (11_000_000_000, b"defg".to_vec(), 4)]
        );
    }
}

#[test]
fn truncated_record_names_offset() {
    let mut f = pcap_header(0xA1B2C3D4, 1, false);
    record(&mut f, false, 1, 0, b"abcdef");
    record(&mut f, false, 2, 0, b"0123456789");
    f.truncate(f.len() - 4);
    let mut r = CaptureReader::new(&f[..]).unwrap();
    assert!(r.next_packet().unwrap().is_some());
    match r.next_packet() {
        Err(CaptureError::Truncated { offset, needed, available }) => {
            assert_eq!(offset, 24 + 16 + 6);
            assert_eq!(needed, 26);
            assert_eq!(available, 22);
        }
        other => panic!("expected truncation, got {other:?}"),
    }
}

#[test]
fn not_a_capture() {
    assert!(matches!(
        CaptureReader::new(&b"hello world"[..]),
        Err(CaptureError::NotACapture { .. })
    ));
    // Two bytes are too few to say what they are: said as such, with no
    // padding shown as if it were the file's.
    let short = CaptureReader::new(&b"he"[..]).err().unwrap();
    assert!(matches!(short, CaptureError::Truncated { offset: 0, available: 2, .. }));
    assert_eq!(short.to_string(), "too short for a capture header: 2 bytes");
    let text = CaptureReader::new(&b"# Calliper"[..]).err().unwrap();
    assert_eq!(text.to_string(), "not a capture file (pcap or pcapng): it begins with \"# Ca\"");
}

#[test]
fn hostile_record_length_is_corrupt_not_oom() {
    let mut f = pcap_header(0xA1B2C3D4, 1, false);
    for x in [1u32, 0, u32::MAX, u32::MAX] {
        f.extend(x.to_le_bytes());
    }
    let mut r = CaptureReader::new(&f[..]).unwrap();
    assert!(matches!(r.next_packet(), Err(CaptureError::Corrupt { offset: 24, .. })));
}

fn block(v: &mut Vec<u8>, big: bool, btype: u32, body: &[u8]) {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let len = body.len() as u32 + 12;
    let w = |x: u32| {
        if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    };
    v.extend(w(btype));
    v.extend(w(len));
    v.extend(body);
    v.extend(w(len));
}

fn pcapng_file(big: bool, tsresol: u8) -> Vec<u8> {
    pcapng_file_offset(big, tsresol, None)
}

/// Like [`pcapng_file`], interface 1 with `if_tsoffset` (seconds) when given.
fn pcapng_file_offset(big: bool, tsresol: u8, tsoffset: Option<i64>) -> Vec<u8> {
    let w32 = |x: u32| {
        if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    };
    let w16 = |x: u16| {
        if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    };
    let mut f = Vec::new();
    let mut shb = Vec::new();
    shb.extend(w32(0x1A2B3C4D));
    shb.extend(w16(1));
    shb.extend(w16(0));
    shb.extend([0xFF; 8]);
    block(&mut f, big, 0x0A0D0D0A, &shb);
    // Interface 0: Ethernet, default µs. Interface 1: raw IP with the given resolution.
    let mut idb0 = Vec::new();
    idb0.extend(w16(1));
    idb0.extend(w16(0));
    idb0.extend(w32(0));
    block(&mut f, big, 1, &idb0);
    let mut idb1 = Vec::new();
    idb1.extend(w16(101));
    idb1.extend(w16(0));
    idb1.extend(w32(0));
    idb1.extend(w16(9));
    idb1.extend(w16(1));
    idb1.extend([tsresol, 0, 0, 0]);
    if let Some(off) = tsoffset {
        idb1.extend(w16(14));
        idb1.extend(w16(8));
        idb1.extend(if big { off.to_be_bytes() } else { off.to_le_bytes() });
    }
    idb1.extend(w16(0));
    idb1.extend(w16(0));
    block(&mut f, big, 1, &idb1);
    block(&mut f, big, 5, &[0; 8]); // interface statistics: skipped
    for (iface, ticks, data) in [(0u32, 1_500_000u64, &b"eth"[..]), (1, 3 << 30, &b"ip!!x"[..])] {
        let mut epb = Vec::new();
        epb.extend(w32(iface));
        epb.extend(w32((ticks >> 32) as u32));
        epb.extend(w32(ticks as u32));
        epb.extend(w32(data.len() as u32));
        epb.extend(w32(data.len() as u32));
        epb.extend_from_slice(data);
        block(&mut f, big, 6, &epb);
    }
    f
}

#[test]
fn pcapng_interfaces_resolutions_and_byte_orders() {
    for big in [false, true] {
        // 2^-30 s ticks: 3 << 30 ticks is 3 s.
        let f = pcapng_file(big, 0x80 | 30);
        let mut r = CaptureReader::new(&f[..]).unwrap();
        assert_eq!(r.kind(), FileKind::Pcapng);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.link_type, p.ts_ns, p.data), (1, 1_500_000_000, &b"eth"[..]));
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.link_type, p.ts_ns, p.data), (101, 3_000_000_000, &b"ip!!x"[..]));
        assert!(r.next_packet().unwrap().is_none());
        assert_eq!(r.skipped_blocks, 1);
        // 10^-9 s ticks.
        let f = pcapng_file(big, 9);
        let mut r = CaptureReader::new(&f[..]).unwrap();
        r.next_packet().unwrap();
        assert_eq!(r.next_packet().unwrap().unwrap().ts_ns, 3 << 30);
    }
}

#[test]
fn pcapng_tsoffset_is_one_64_bit_integer_in_the_sections_byte_order() {
    for big in [false, true] {
        let f = pcapng_file_offset(big, 9, Some(1_700_000_000));
        let mut r = CaptureReader::new(&f[..]).unwrap();
        r.next_packet().unwrap();
        let ts = r.next_packet().unwrap().unwrap().ts_ns;
        assert_eq!(ts, 1_700_000_000 * 1_000_000_000 + (3 << 30), "big endian: {big}");
    }
}

#[test]
fn pcapng_unknown_interface_is_corrupt() {
    let mut f = pcapng_file(false, 6);
    // Rewrite the last EPB's interface id to 7.
    let n = f.len();
    let epb_start = n - (12 + 20 + 8);
    f[epb_start + 8..epb_start + 12].copy_from_slice(&7u32.to_le_bytes());
    let mut r = CaptureReader::new(&f[..]).unwrap();
    r.next_packet().unwrap();
    assert!(matches!(r.next_packet(), Err(CaptureError::Corrupt { .. })));
}

#[test]
fn pcapng_trailing_length_must_match() {
    let mut f = pcapng_file(false, 6);
    let n = f.len();
    f[n - 4..].copy_from_slice(&1024u32.to_le_bytes());
    let mut r = CaptureReader::new(&f[..]).unwrap();
    r.next_packet().unwrap();
    let err = r.next_packet().unwrap_err().to_string();
    assert!(err.contains("at its end"), "{err}");
}

#[test]
fn small_reads_are_reassembled() {
    // A reader that returns one byte at a time must give the same packets.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || b.is_empty() {
                return Ok(0);
            }
            b[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }
    let f = pcapng_file(true, 9);
    let mut r = CaptureReader::new(Trickle(&f)).unwrap();
    let mut n = 0;
    while r.next_packet().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 2);
}

/// Reads `chunk` bytes per call, so records straddle reads everywhere.
struct Chunky<'a>(&'a [u8], usize);
impl Read for Chunky<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let n = self.0.len().min(b.len()).min(self.1);
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

type Seen = Vec<(i64, u16, Vec<u8>, u64)>;

fn by_packet(f: &[u8], chunk: usize) -> (Seen, Option<String>) {
    let mut r = CaptureReader::new(Chunky(f, chunk)).unwrap();
    let mut v = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(p)) => v.push((p.ts_ns, p.link_type, p.data.to_vec(), p.file_offset)),
            Ok(None) => return (v, None),
            Err(e) => return (v, Some(e.to_string())),
        }
    }
}

fn by_batch(f: &[u8], chunk: usize, max: usize) -> (Seen, Option<String>) {
    let mut r = CaptureReader::new(Chunky(f, chunk)).unwrap();
    let mut v = Vec::new();
    loop {
        match r.next_batch(max) {
            Ok(b) if b.is_empty() => return (v, None),
            Ok(b) => {
                assert!(b.len() <= max);
                v.extend(b.iter().map(|p| (p.ts_ns, p.link_type, p.data.to_vec(), p.file_offset)))
            }
            Err(e) => return (v, Some(e.to_string())),
        }
    }
}

#[test]
fn batches_give_the_same_packets_and_errors() {
    let mut pcap = pcap_header(0xA1B2C3D4, 1, false);
    for i in 0..500u32 {
        let data: Vec<u8> = (0..(i * 7) % 300).map(|b| (b ^ i) as u8).collect();
        record(&mut pcap, false, i, i * 3, &data);
    }
    let mut ng = Vec::new();
    for _ in 0..50 {
        ng.extend(pcapng_file(false, 9));
    }
    let mut truncated = pcap.clone();
    truncated.truncate(pcap.len() - 5);
    for (name, f, packets, error) in [
        ("pcap", &pcap, 500, false),
        ("pcapng", &ng, 100, false),
        ("truncated", &truncated, 499, true),
    ] {
        for chunk in [1, 97, 1 << 20] {
            let want = by_packet(f, chunk);
            assert_eq!(want.0.len(), packets, "{name}");
            assert_eq!(want.1.is_some(), error, "{name}");
            for max in [1, 2, 64] {
                assert_eq!(by_batch(f, chunk, max), want, "{name}, chunk {chunk}, max {max}");
            }
        }
    }
}

/// Another reader of the same files reads what the first opened: a file
/// that grew is read to its length then, and one that is gone ends the
/// reading with the reason (shards reading for themselves must agree).
#[test]
fn a_reopened_file_is_read_as_it_was_opened_or_not_at_all() {
    let dir = std::env::temp_dir().join(format!("calliper-reopen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("growing.pcap");
    let mut v = pcap_header(0xa1b2c3d4, 1, false);
    record(&mut v, false, 1, 0, &[0u8; 60]);
    record(&mut v, false, 2, 0, &[1u8; 60]);
    std::fs::write(&path, &v).unwrap();
    let first = crate::files::Inputs::open(std::slice::from_ref(&path)).unwrap();
    let files = first.reopenable().expect("a regular file can be read again");
    // Written on after it was opened: the later packet is not read.
    record(&mut v, false, 3, 0, &[2u8; 60]);
    std::fs::write(&path, &v).unwrap();
    let mut again = crate::files::Inputs::reopen(&files);
    let mut read = 0;
    while let Some(b) = again.next_batch(64, &mut |m| panic!("{m}")) {
        read += b.len();
    }
    assert_eq!((read, again.open_failure().is_none()), (2, true));
    std::fs::remove_file(&path).unwrap();
    let mut gone = crate::files::Inputs::reopen(&files);
    assert!(gone.next_batch(64, &mut |m| panic!("{m}")).is_none());
    let why = gone.open_failure().expect("the missing file is the reason").to_string();
    assert!(why.contains("growing.pcap"), "{why}");
    std::fs::remove_dir_all(&dir).ok();
}
