//! Jitter within restart segments against tshark: SIPp's replay restarts
//! its numbering and timestamps on resume, and tshark's jitter (which
//! ours equals) takes the timestamp jump as 616 ms of jitter. The figures
//! "within segments" must be tshark's on each segment alone: the capture
//! is cut at the restart (editcap) and tshark run on each part. The
//! restart's time must be that of the packet where tshark sees the
//! numbering jump.

use calliper_testkit::captures::{repo_root, scratch};
use calliper_testkit::oracle::{tshark_fields, tshark_streams, wireshark_tool};
use calliper_testkit::probe::analyze;
use calliper_testkit::probe::of_type;
use serde_json::Value;

#[test]
fn jitter_within_segments_is_tsharks_on_each_segment() {
    let capture = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    let lines = analyze(&capture).lines();
    let streams: Vec<&Value> = of_type(&lines, "call")
        .flat_map(|l| l["streams"].as_array().unwrap())
        .filter(|s| s["seq_resets"] == 1)
        .collect();
    assert_eq!(streams.len(), 6, "SIPp's six PCMA streams restart once");
    let dir = scratch("restart-jitter");
    std::fs::create_dir_all(&dir).unwrap();
    // Frame number, time (ns), ports, sequence number and SSRC of each RTP packet.
    let frames: Vec<(u64, i64, u16, u16, u16, u32)> = tshark_fields(
        &capture,
        &["-o", "rtp.heuristic_rtp:TRUE"],
        "rtp",
        &["frame.number", "frame.time_epoch", "udp.srcport", "udp.dstport", "rtp.seq", "rtp.ssrc"],
    )
    .lines()
    .map(|l| {
        let f: Vec<&str> = l.split('\t').collect();
        let ns = calliper_testkit::oracle::epoch_ns(f[1]);
        (
            f[0].parse().unwrap(),
            ns,
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
            u32::from_str_radix(f[5].trim_start_matches("0x"), 16).unwrap(),
        )
    })
    .collect();
    for s in streams {
        let (sport, dport) =
            (s["src_port"].as_u64().unwrap() as u16, s["dst_port"].as_u64().unwrap() as u16);
        let ssrc = s["ssrc"].as_u64().unwrap() as u32;
        let mine: Vec<_> =
            frames.iter().filter(|f| (f.2, f.3, f.5) == (sport, dport, ssrc)).collect();
        let at = s["restarts_ns"][0].as_i64().expect("the restart's time");
        let i = mine.iter().position(|f| f.1 == at).expect("a packet at the restart's time");
        let jump = mine[i].4.wrapping_sub(mine[i - 1].4);
        assert!(jump > 100 && jump < 65_436, "tshark sees no jump at the restart: {jump}");
        // tshark on the capture cut before the restart packet, and from it on.
        let frame = mine[i].0;
        let parts =
            [("before", format!("1-{}", frame - 1)), ("after", format!("{frame}-{}", u32::MAX))];
        let mut max = 0f64;
        for (name, range) in parts {
            let part = dir.join(format!("{sport}-{name}.pcap"));
            wireshark_tool(
                "editcap",
                &["-r", capture.to_str().unwrap(), part.to_str().unwrap(), &range],
            );
            let t = tshark_streams(&part, true);
            let t = t
                .iter()
                .find(|t| (t.key.1, t.key.3, t.key.4) == (sport, dport, ssrc))
                .expect("the stream in the part");
            max = max.max(t.max_jitter);
        }
        let (whole, within) =
            (s["max_jitter_ms"].as_f64().unwrap(), s["segment_max_jitter_ms"].as_f64().unwrap());
        assert!(
            (within - max).abs() < 0.0015,
            "{sport}: within segments {within}, tshark on the parts {max}"
        );
        assert!(whole > 600.0 && within < 5.0, "{sport}: whole {whole}, within {within}");
        let mean = s["segment_mean_jitter_ms"].as_f64().unwrap();
        assert!(mean > 0.0 && mean <= within, "{sport}: mean {mean}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
