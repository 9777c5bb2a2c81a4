//! The classic-BPF interpreter of `--filter` on arbitrary programs and
//! packets: it always ends (jumps go forward) and never reads out of bounds.
#![no_main]
use calliper_capture::filter::{Insn, Program};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte: instruction count; then 8 bytes each; the rest is the packet.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n).min(rest.len() / 8);
    let (code, packet) = rest.split_at(n * 8);
    let insns = code
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let program = Program { insns };
    let _ = program.accepts(packet, packet.len() as u32 + u32::from(n as u8));
});
