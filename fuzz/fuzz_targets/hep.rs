//! HEP3 reading (`calliper_wire::hep`), and through the engine: any bytes
//! either parse or give an error; what parses is written back and must
//! parse to the same message; a datagram to the HEP port never panics the
//! engine, with a call open for its RTCP or quality reports to join (the
//! seeds carry its Call-ID, compressed payloads and rtpengine's JSON).
#![no_main]
use calliper_engine::{Config, Engine};
use calliper_wire::emit;
use calliper_wire::hep::Hep;
use libfuzzer_sys::fuzz_target;

const INVITE: &[u8] = b"INVITE sip:b@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1\r\nFrom: <sip:a@10.0.0.1>;tag=1\r\nTo: <sip:b@10.0.0.2>\r\nCall-ID: fuzz@calliper\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Hep::parse(data) {
        if let Ok(bytes) = h.emit() {
            assert_eq!(Hep::parse(&bytes).as_ref(), Ok(&h));
        }
    }
    let mut hep = b"HEP3".to_vec();
    hep.extend_from_slice(data);
    let ip = emit::Ipv4::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 17)
        .emit(&emit::udp(40000, 9060, &hep));
    let mut e = Engine::new(Config { hep_port: Some(9060), ..Config::default() });
    // A call for reports to join (its Call-ID is the seeds' correlation id).
    let invite = emit::Ipv4::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 17)
        .emit(&emit::udp(5060, 5060, INVITE));
    e.packet(1_700_000_000_000_000_000, 101, &invite);
    e.packet(1_700_000_000_000_000_000, 101, &ip);
    e.finish_open();
    let _ = e.drain().count();
});
