//! cRTP both ways. Link packets into a decompressor (8- and 16-bit context
//! ids, plain and RFC 3545): malformed or damaged, never a panic. And datagrams into a
//! compressor whose output goes straight to a decompressor: every datagram
//! the decompressor gives back is the one compressed.
//! Each record: protocol selector (1 byte), length (2), bytes.
#![no_main]
use calliper_crtp::{protocol, Compressor, Config, Decompressor};
use calliper_fuzz::{be16, records};
use libfuzzer_sys::fuzz_target;

const PROTOCOLS: [u16; 8] = [
    protocol::FULL_HEADER,
    protocol::COMPRESSED_RTP_8,
    protocol::COMPRESSED_RTP_16,
    protocol::COMPRESSED_UDP_8,
    protocol::COMPRESSED_UDP_16,
    protocol::CONTEXT_STATE,
    protocol::IPV4,
    0x1234,
];

fuzz_target!(|data: &[u8]| {
    for contexts in [4, 300] {
        // The wide table also runs RFC 3545: header checksums and repeats.
        let wide = contexts > 256;
        let config = Config {
            contexts,
            max_period: 16,
            max_time_ns: 0,
            header_checksum: wide,
            repeats: if wide { 2 } else { 0 },
        };
        let mut d = Decompressor::new(config).unwrap();
        let mut c = Compressor::new(config).unwrap();
        let mut check = Decompressor::new(config).unwrap();
        let (mut out, mut link, mut back) = (Vec::new(), Vec::new(), Vec::new());
        let mut now = 0u64;
        for (h, bytes) in records(data, 3, be16(1)) {
            let selector = h[0];
            now += 20_000_000;
            let _ = d.decompress(PROTOCOLS[selector as usize % 8], bytes, now, &mut out);
            if d.context_state(&mut out) {
                c.context_state(&out);
            }
            c.context_state(bytes);
            let kind = c.compress(bytes, now, &mut link);
            if check.decompress(kind.protocol(&config), &link, now, &mut back).is_ok() {
                assert_eq!(back, bytes);
            }
        }
    }
});
