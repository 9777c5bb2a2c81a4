//! The generator's truth against its own capture, read back through the
//! reader and the decoder: each stream's RTP packets in the capture are
//! those sent, less those dropped, plus the duplicates.

use calliper_capture::CaptureReader;
use calliper_generate::{write_pcap, Spec};
use calliper_wire::{decode, Transport};
use std::collections::HashMap;

#[test]
fn every_stream_holds_what_the_truth_says_was_delivered() {
    let spec = Spec {
        calls: 40,
        concurrent: 10.0,
        hold_mean: 20.0,
        loss: 3.0,
        duplicate: 2.0,
        reorder: 2.0,
        seed: 11,
        ..Spec::default()
    };
    let (mut pcap, mut truth) = (Vec::new(), Vec::new());
    let made = write_pcap(&spec, &mut pcap, Some(&mut truth)).unwrap();
    assert_eq!(made.calls, 40);
    let mut reader = CaptureReader::new(&pcap[..]).unwrap();
    let (mut read, mut by_ssrc) = (0u64, HashMap::<u32, u64>::new());
    loop {
        let batch = reader.next_batch(64).unwrap();
        if batch.is_empty() {
            break;
        }
        for p in batch.iter() {
            read += 1;
            let f = decode(p.link_type, p.data).unwrap();
            let Transport::Udp { sport, payload, .. } = f.transport else {
                panic!("only UDP is generated");
            };
            // RTP on the even media ports (RTCP is on the odd ones, SIP on 5060).
            if sport != 5060 && sport % 2 == 0 {
                let ssrc = u32::from_be_bytes(payload[8..12].try_into().unwrap());
                *by_ssrc.entry(ssrc).or_default() += 1;
            }
        }
    }
    assert_eq!(read, made.packets);
    let lines: Vec<&str> = std::str::from_utf8(&truth).unwrap().lines().collect();
    assert_eq!(lines.len(), 80, "two streams per call");
    let field = |line: &str, name: &str| -> u64 {
        let at = line.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
        line[at..].split([',', '}']).next().unwrap().parse().unwrap()
    };
    let mut dropped = 0;
    for line in lines {
        let delivered = field(line, "sent") - field(line, "dropped") + field(line, "duplicated");
        assert_eq!(by_ssrc[&(field(line, "ssrc") as u32)], delivered, "{line}");
        dropped += field(line, "dropped");
    }
    assert!(dropped > 0, "3 % loss drops packets");
}

#[test]
fn a_parameter_out_of_range_is_refused_by_name() {
    for (spec, option) in [
        (Spec { loss: 100.0, ..Spec::default() }, "--loss"),
        (Spec { concurrent: f64::NAN, ..Spec::default() }, "--concurrent"),
        (Spec { duration: Some(f64::INFINITY), ..Spec::default() }, "--duration"),
        (Spec { duration: Some(0.0), ..Spec::default() }, "--duration"),
        (Spec { codecs: "pcmu:-5".into(), ..Spec::default() }, "--codecs"),
        (Spec { codecs: "pcmu:0".into(), ..Spec::default() }, "--codecs"),
        (Spec { codecs: "foo".into(), ..Spec::default() }, "--codecs"),
    ] {
        let e = spec.check().unwrap_err();
        assert!(e.contains(option), "{option}: {e}");
    }
}
