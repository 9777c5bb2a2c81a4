use super::super::bencode::{self, Value};
use super::super::sdp;
use super::{addr, OFFER_SDP};
use std::net::{IpAddr, SocketAddr};

/// BEP 3's examples, and rtpengine's documented ping.
#[test]
fn bencode_reads_the_specifications_examples() {
    assert_eq!(bencode::parse(b"4:spam"), Ok(Value::Bytes(b"spam")));
    assert_eq!(bencode::parse(b"i3e"), Ok(Value::Int(3)));
    assert_eq!(bencode::parse(b"i-3e"), Ok(Value::Int(-3)));
    assert_eq!(
        bencode::parse(b"l4:spam4:eggse"),
        Ok(Value::List(vec![Value::Bytes(b"spam"), Value::Bytes(b"eggs")]))
    );
    let d = bencode::parse(b"d3:cow3:moo4:spam4:eggse").unwrap();
    assert_eq!(d.str("cow"), Some("moo"));
    assert_eq!(d.str("spam"), Some("eggs"));
    assert_eq!(bencode::parse(b"0:"), Ok(Value::Bytes(b"")));
    assert_eq!(bencode::parse(b"i0e"), Ok(Value::Int(0)));
    assert_eq!(bencode::parse(b"de"), Ok(Value::Dict(vec![])));
}

#[test]
fn bencode_refuses_what_is_not_a_whole_document() {
    for bad in [
        &b""[..],
        b"i3",
        b"ie",
        b"i-e",
        b"i3x4e",
        b"5:spam",
        b"4spam",
        b"l",
        b"d3:cowe",
        b"d3:cow3:moo",
        b"i3ei4e",
        b"e",
        b"x",
        b"99999999999999999999:a",
        b"d1:ai1e1:ae",
        b"i03e",
        b"i-0e",
    ] {
        assert!(bencode::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    // A repeated key is taken as sent (the first is read).
    let d = bencode::parse(b"d1:ai1e1:ai2ee").unwrap();
    assert_eq!(d.get("a"), Some(&Value::Int(1)));
}

#[test]
fn bencode_nesting_and_size_are_capped_without_recursion() {
    let deep = [vec![b'l'; 100_000], vec![b'e'; 100_000]].concat();
    assert_eq!(bencode::parse(&deep).unwrap_err().what, "nested too deeply");
    let ok = [vec![b'l'; bencode::MAX_DEPTH], vec![b'e'; bencode::MAX_DEPTH]].concat();
    assert!(bencode::parse(&ok).is_ok());
    let mut many = b"l".to_vec();
    for _ in 0..bencode::MAX_ITEMS {
        many.extend_from_slice(b"i1e");
    }
    many.push(b'e');
    assert_eq!(bencode::parse(&many).unwrap_err().what, "too many values");
}

#[test]
fn sdp_audio_is_read_from_media_and_session_lines() {
    let a = sdp::audio(OFFER_SDP).unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].rtp, a[0].rtcp), (addr("10.0.0.1:30000"), addr("10.0.0.1:30001")));
    let own = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 0\r\nc=IN IP4 10.0.0.9\r\n\
a=rtcp:5001 IN IP4 10.0.0.8\r\nm=audio 0 RTP/AVP 0\r\n";
    let a = sdp::audio(own).unwrap();
    assert_eq!((a[0].rtp, a[0].rtcp), (addr("10.0.0.9:4000"), addr("10.0.0.8:5001")));
    assert!(a[1].rejected && !a[0].rejected);
    assert!(sdp::audio("v=0\r\nm=audio 4000 RTP/AVP 0\r\n").is_err(), "no address");
    assert!(sdp::audio("c=IN IP4 nonsense\r\n").is_err());
    let many: String = (0..=sdp::MAX_AUDIO).map(|_| "m=audio 1 RTP/AVP 0\r\n").collect();
    assert!(sdp::audio(&format!("c=IN IP4 1.2.3.4\r\n{many}")).is_err());
}

#[test]
fn sdp_rewrite_moves_audio_and_keeps_the_rest() {
    let edge: IpAddr = "192.0.2.7".parse().unwrap();
    let out = sdp::rewrite(OFFER_SDP, edge, &[40000], false);
    assert!(out.contains("\r\nc=IN IP4 192.0.2.7\r\n"), "{out}");
    assert!(out.contains("m=audio 40000 RTP/AVP 8 101\r\n"), "{out}");
    assert!(out.contains("a=rtcp:40001 IN IP4 192.0.2.7\r\n"), "{out}");
    // Video keeps its address as a c= line of its own, and its port.
    assert!(out.contains("m=video 30002 RTP/AVP 96\r\nc=IN IP4 10.0.0.1\r\n"), "{out}");
    assert!(out.contains("o=- 1 1 IN IP4 10.0.0.1\r\n"), "origin kept: {out}");
    let a = sdp::audio(&out).unwrap();
    assert_eq!(a[0].rtp, addr("192.0.2.7:40000"));
    let refused = sdp::rewrite(OFFER_SDP, edge, &[40000], true);
    assert!(refused.contains("m=video 0 RTP/AVP 96\r\n"), "{refused}");
    // Lines other than those are the sender's, byte for byte.
    let kept = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with("c=") && !l.starts_with("m=") && !l.starts_with("a=rtcp"))
            .map(String::from)
            .collect()
    };
    assert_eq!(kept(&out), kept(OFFER_SDP));
}

/// Found by the fuzzer: odd spacing and zero-padded ports are read alike
/// when relaying and when rewriting, so no audio keeps its sender's address.
#[test]
fn odd_m_lines_are_read_alike_by_both_sides() {
    let body = "c=IN IP4 10.0.0.2\r\nm= audio 003 RTP/AVP 0\r\nm=audio 00 RTP/AVP 0\r\n";
    let edge: IpAddr = "192.0.2.1".parse().unwrap();
    let before = sdp::audio(body).unwrap();
    assert_eq!((before.len(), before[1].rejected), (2, true));
    let after = sdp::audio(&sdp::rewrite(body, edge, &[40000, 40002], false)).unwrap();
    assert_eq!(after[0].rtp, SocketAddr::new(edge, 40000));
    assert!(after[1].rejected);
}
