//! Decoding speed: one second of G.711 (8 000 bytes), of G.722 (8 000
//! bytes, 16 000 samples) and of Opus (speech-like audio encoded by libopus
//! at 32 kbit/s, 48 000 samples) per iteration, in 20 ms packets. The
//! issue's targets are 500 times real time for G.711 and 50 for G.722 and
//! Opus per core: one second of audio in under 2 ms and 20 ms.
//! `cargo bench -p calliper-audio`.

use calliper_audio::{g711, g722, opus};
use divan::Bencher;

fn main() {
    divan::main();
}

fn second() -> Vec<u8> {
    let mut seed = 7u32;
    (0..8000)
        .map(|_| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as u8
        })
        .collect()
}

#[divan::bench]
fn g711_one_second(bencher: Bencher) {
    let payload = second();
    let mut out = Vec::with_capacity(8000);
    bencher.bench_local(|| {
        out.clear();
        for p in payload.chunks(160) {
            g711::decode(g711::Law::Mu, p, &mut out);
        }
        divan::black_box(&out);
    });
}

#[divan::bench]
fn g722_one_second(bencher: Bencher) {
    let payload = second();
    let mut out = Vec::with_capacity(16000);
    let mut decoder = g722::Decoder::new();
    bencher.bench_local(|| {
        out.clear();
        for p in payload.chunks(160) {
            decoder.decode(p, &mut out);
        }
        divan::black_box(&out);
    });
}

#[divan::bench]
fn opus_one_second(bencher: Bencher) {
    // A voiced sound (harmonics of 150 Hz) with noise, encoded as VoIP.
    let mut enc =
        ::opus::Encoder::new(48_000, ::opus::Channels::Mono, ::opus::Application::Voip).unwrap();
    enc.set_bitrate(::opus::Bitrate::Bits(32_000)).unwrap();
    let noise = second();
    let pcm: Vec<i16> = (0..48_000)
        .map(|i| {
            let t = f64::from(i) / 48_000.0;
            let voiced: f64 = (1..20)
                .map(|h| {
                    (2.0 * std::f64::consts::PI * 150.0 * f64::from(h) * t).sin() / f64::from(h)
                })
                .sum();
            (4000.0 * voiced + f64::from(noise[i as usize % 8000]) * 4.0) as i16
        })
        .collect();
    let packets: Vec<Vec<u8>> =
        pcm.chunks(960).map(|frame| enc.encode_vec(frame, 1500).unwrap()).collect();
    let mut out = Vec::with_capacity(48_000);
    bencher.bench_local(|| {
        let mut decoder = opus::Decoder::default();
        out.clear();
        for p in &packets {
            decoder.decode(p, &mut out);
        }
        assert_eq!(out.len(), 48_000);
        divan::black_box(&out);
    });
}
