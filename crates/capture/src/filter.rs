//! Capture filters in tcpdump's language (`udp port 5060 or portrange
//! 10000-20000`), compiled by libpcap into classic BPF.
//!
//! libpcap is loaded at run time (`dlopen`), only when a filter is given, so
//! the binary runs without it otherwise. Live, the kernel runs the program
//! on the socket; on capture files [`Program::accepts`] runs the same
//! program here, so `probe --read` and `probe -i` filter alike.
#![allow(unsafe_code)]

use crate::linktype;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;

/// One classic BPF instruction (the layout of `struct bpf_insn` and the
/// kernel's `struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    /// Operation.
    pub code: u16,
    /// Jump offset when the test holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// Constant.
    pub k: u32,
}

/// A compiled filter for one link type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The instructions, as libpcap produced them.
    pub insns: Vec<Insn>,
}

/// Why a filter could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilterError {}

/// The libpcap data-link type for a pcap link type (they differ for raw IP).
fn dlt(link_type: u16) -> c_int {
    match link_type {
        linktype::RAW => 12,
        other => c_int::from(other),
    }
}

#[repr(C)]
struct BpfProgram {
    len: c_uint,
    insns: *mut Insn,
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type GetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type Close = unsafe extern "C" fn(*mut c_void);

/// libpcap's names on Debian and elsewhere.
const LIBRARIES: [&CStr; 3] = [c"libpcap.so.0.8", c"libpcap.so.1", c"libpcap.so"];

/// Compiles `expr` for packets of `link_type` (a [`linktype`] value).
pub fn compile(expr: &str, link_type: u16) -> Result<Program, FilterError> {
    let text =
        CString::new(expr).map_err(|_| FilterError("a filter cannot contain a NUL byte".into()))?;
    // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to
    // the signature libpcap documents for it.
    unsafe {
        let lib = LIBRARIES
            .iter()
            .map(|name| libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL))
            .find(|h| !h.is_null())
            .ok_or_else(|| {
                FilterError(
                    "--filter needs libpcap to compile the expression \
                     (Debian: apt-get install libpcap0.8)"
                        .into(),
                )
            })?;
        let sym = |name: &CStr| {
            let p = libc::dlsym(lib, name.as_ptr());
            (!p.is_null())
                .then_some(p)
                .ok_or_else(|| FilterError(format!("libpcap has no {}", name.to_string_lossy())))
        };
        let open_dead: OpenDead = std::mem::transmute(sym(c"pcap_open_dead")?);
        let compile: Compile = std::mem::transmute(sym(c"pcap_compile")?);
        let free_code: FreeCode = std::mem::transmute(sym(c"pcap_freecode")?);
        let get_err: GetErr = std::mem::transmute(sym(c"pcap_geterr")?);
        let close: Close = std::mem::transmute(sym(c"pcap_close")?);
        let handle = open_dead(dlt(link_type), 262_144);
        if handle.is_null() {
            return Err(FilterError(format!("libpcap cannot filter link type {link_type}")));
        }
        let mut prog = BpfProgram { len: 0, insns: std::ptr::null_mut() };
        const NETMASK_UNKNOWN: u32 = 0xffff_ffff;
        let result = if compile(handle, &mut prog, text.as_ptr(), 1, NETMASK_UNKNOWN) != 0 {
            let why = CStr::from_ptr(get_err(handle)).to_string_lossy().into_owned();
            Err(FilterError(format!("bad filter `{expr}`: {why}")))
        } else {
            let insns = if prog.insns.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(prog.insns, prog.len as usize).to_vec()
            };
            free_code(&mut prog);
            Ok(Program { insns })
        };
        close(handle);
        // The library stays loaded: dlclose of libpcap gains nothing.
        result
    }
}

const BPF_LD: u16 = 0x00;
const BPF_LDX: u16 = 0x01;
const BPF_ST: u16 = 0x02;
const BPF_STX: u16 = 0x03;
const BPF_ALU: u16 = 0x04;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_MISC: u16 = 0x07;
/// Scratch memory words.
const MEMWORDS: usize = 16;

fn load(data: &[u8], at: u32, size: u16) -> Option<u32> {
    let at = at as usize;
    let len = match size {
        0x00 => 4,
        0x08 => 2,
        0x10 => 1,
        _ => return None,
    };
    let bytes = data.get(at..at.checked_add(len)?)?;
    Some(bytes.iter().fold(0u32, |v, &b| (v << 8) | u32::from(b)))
}

impl Program {
    /// Whether the program keeps a packet (`wire_len` is its length on the
    /// wire). Runs as libpcap's `bpf_filter` does: a load past the captured
    /// bytes, a division by zero or an invalid instruction rejects. Jumps
    /// only go forward, so it always ends.
    pub fn accepts(&self, data: &[u8], wire_len: u32) -> bool {
        self.run(data, wire_len) != 0
    }

    fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        let mut m = Machine { a: 0, x: 0, mem: [0; MEMWORDS], data, wire_len };
        let mut pc = 0usize;
        while let Some(i) = self.insns.get(pc) {
            pc += 1;
            match m.execute(i) {
                Some(Next::Skip(n)) => pc = pc.saturating_add(n),
                Some(Next::Return(v)) => return v,
                // A failed load, a division by zero, an invalid instruction.
                None => return 0,
            }
        }
        // Ran off the end: not a valid program.
        0
    }
}

/// The BPF machine while a program runs over one packet: its registers,
/// its scratch memory and the packet.
struct Machine<'a> {
    a: u32,
    x: u32,
    mem: [u32; MEMWORDS],
    data: &'a [u8],
    wire_len: u32,
}

/// Where a program goes after an instruction.
enum Next {
    /// On, past this many more instructions (0 for the next).
    Skip(usize),
    /// The program ends with this verdict.
    Return(u32),
}

impl Machine<'_> {
    /// Runs one instruction; `None` rejects the packet.
    fn execute(&mut self, i: &Insn) -> Option<Next> {
        let class = i.code & 0x07;
        match class {
            BPF_LD => self.a = self.load_a(i)?,
            BPF_LDX => self.x = self.load_x(i)?,
            BPF_ST | BPF_STX => {
                let v = if class == BPF_ST { self.a } else { self.x };
                *self.mem.get_mut(i.k as usize)? = v;
            }
            BPF_ALU => self.a = alu(i.code & 0xf0, self.a, self.source(i))?,
            BPF_JMP => return self.jump(i).map(Next::Skip),
            BPF_RET => {
                return Some(Next::Return(match i.code & 0x18 {
                    0x00 => i.k,
                    0x10 => self.a,
                    _ => 0,
                }))
            }
            BPF_MISC => match i.code & 0xf8 {
                0x00 => self.x = self.a,
                0x80 => self.a = self.x,
                _ => return None,
            },
            _ => return None,
        }
        Some(Next::Skip(0))
    }

    /// The operand: X or the constant, by the instruction's source bit.
    fn source(&self, i: &Insn) -> u32 {
        if i.code & 0x08 != 0 {
            self.x
        } else {
            i.k
        }
    }

    fn load_a(&self, i: &Insn) -> Option<u32> {
        let size = i.code & 0x18;
        match i.code & 0xe0 {
            0x00 => Some(i.k),
            0x20 => load(self.data, i.k, size),
            // libpcap rejects an offset that overflows; so do we.
            0x40 => load(self.data, self.x.checked_add(i.k)?, size),
            0x60 => self.mem.get(i.k as usize).copied(),
            0x80 => Some(self.wire_len),
            _ => None,
        }
    }

    fn load_x(&self, i: &Insn) -> Option<u32> {
        match i.code & 0xe0 {
            0x00 => Some(i.k),
            0x60 => self.mem.get(i.k as usize).copied(),
            0x80 => Some(self.wire_len),
            0xa0 => Some(u32::from(self.data.get(i.k as usize)? & 0x0f) << 2),
            _ => None,
        }
    }

    /// How many instructions a jump skips.
    fn jump(&self, i: &Insn) -> Option<usize> {
        let src = self.source(i);
        let taken = match i.code & 0xf0 {
            0x00 => return Some(i.k as usize),
            0x10 => self.a == src,
            0x20 => self.a > src,
            0x30 => self.a >= src,
            0x40 => self.a & src != 0,
            _ => return None,
        };
        Some(usize::from(if taken { i.jt } else { i.jf }))
    }
}

/// An ALU operation (`op`, the code's high nibble) on A and the operand.
fn alu(op: u16, a: u32, src: u32) -> Option<u32> {
    Some(match op {
        0x00 => a.wrapping_add(src),
        0x10 => a.wrapping_sub(src),
        0x20 => a.wrapping_mul(src),
        0x30 if src != 0 => a / src,
        0x40 => a | src,
        0x50 => a & src,
        0x60 => a.checked_shl(src).unwrap_or(0),
        0x70 => a.checked_shr(src).unwrap_or(0),
        0x80 => a.wrapping_neg(),
        0x90 if src != 0 => a % src,
        0xa0 => a ^ src,
        _ => return None,
    })
}

/// A filter expression, compiled for each link type as packets of it come.
#[derive(Debug)]
pub struct Filter {
    expr: String,
    programs: Vec<(u16, Program)>,
    /// Packets the filter left out.
    pub rejected: u64,
}

impl Filter {
    /// Checks the expression (compiling it for Ethernet).
    pub fn new(expr: &str) -> Result<Filter, FilterError> {
        let ethernet = compile(expr, linktype::ETHERNET)?;
        Ok(Filter {
            expr: expr.to_string(),
            programs: vec![(linktype::ETHERNET, ethernet)],
            rejected: 0,
        })
    }

    /// The expression.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Whether the filter keeps this packet. A link type the expression
    /// cannot be compiled for keeps nothing: the first packet of it returns
    /// the error (to be reported once), later ones are rejected quietly.
    pub fn accepts(
        &mut self,
        link_type: u16,
        data: &[u8],
        wire_len: u32,
    ) -> Result<bool, FilterError> {
        let program = match self.programs.iter().position(|(t, _)| *t == link_type) {
            Some(i) => &self.programs[i].1,
            None => {
                let (program, error) = match compile(&self.expr, link_type) {
                    Ok(p) => (p, None),
                    // `ret #0`: nothing of this link type is kept.
                    Err(e) => {
                        (Program { insns: vec![Insn { code: 0x06, jt: 0, jf: 0, k: 0 }] }, Some(e))
                    }
                };
                self.programs.push((link_type, program));
                if let Some(e) = error {
                    self.rejected += 1;
                    return Err(e);
                }
                &self.programs[self.programs.len() - 1].1
            }
        };
        let keep = program.accepts(data, wire_len);
        self.rejected += u64::from(!keep);
        Ok(keep)
    }
}

#[cfg(test)]
mod tests;
