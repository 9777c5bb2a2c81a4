//! HEP3 reading (`calliper_wire::hep`), and through the engine: any bytes
//! either parse or give an error; what parses is written back and must
//! parse to the same message; a datagram to the HEP port never panics the
//! engine.
#![no_main]
use calliper_engine::{Config, Engine};
use calliper_wire::emit;
use calliper_wire::hep::Hep;
use libfuzzer_sys::fuzz_target;

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
    let mut e = Engine::new(Config {
        hep_port: Some(9060),
        ..Config::default()
    });
    e.packet(1_700_000_000_000_000_000, 101, &ip);
    e.finish_open();
    let _ = e.drain().count();
});
