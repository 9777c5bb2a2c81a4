//! Socket set-up helpers: interface names, socket options, the interface filter.
#![allow(unsafe_code)]

use super::LiveError;
use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

pub(super) fn os(what: &'static str) -> LiveError {
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => LiveError::NotPermitted,
        _ => LiveError::Os { what, error },
    }
}

/// The interfaces this machine has, by name.
pub fn interfaces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The index of interface `name`.
pub fn interface_index(name: &str) -> Result<u32, LiveError> {
    let missing = || LiveError::NoInterface { name: name.to_string(), existing: interfaces() };
    if name.is_empty() || name.len() > 15 || name.contains(['/', '\0']) || name.starts_with('.') {
        return Err(missing());
    }
    let c = std::ffi::CString::new(name).map_err(|_| missing())?;
    // SAFETY: `c` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(missing()),
        i => Ok(i),
    }
}

pub(super) fn set_option<T>(
    fd: &OwnedFd,
    level: i32,
    name: i32,
    value: &T,
    what: &'static str,
) -> Result<(), LiveError> {
    // SAFETY: `value` points at a live `T` of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<c_void>(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os(what));
    }
    Ok(())
}

/// Plain C data: any bytes the kernel writes make a valid value (so not
/// `bool`, `char`, references, enums or non-zero integers).
///
/// # Safety
/// Implement only for integers and `repr(C)` structs of integers.
pub(super) unsafe trait PlainData: Copy {}
// SAFETY: an integer; every bit pattern is one.
unsafe impl PlainData for libc::c_int {}
// SAFETY: three `u32` counters.
unsafe impl PlainData for libc::tpacket_stats_v3 {}

/// Reads option `name` of `level` into `value`.
pub(super) fn get_option<T: PlainData>(
    fd: &OwnedFd,
    level: i32,
    name: i32,
    value: &mut T,
    what: &'static str,
) -> Result<(), LiveError> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live `T` of `len` bytes; the kernel writes at most `len`.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), level, name, (value as *mut T).cast::<c_void>(), &mut len)
    };
    if r != 0 {
        return Err(os(what));
    }
    Ok(())
}

/// A classic BPF program accepting packets of these interfaces only
/// (`ld ifidx`, one compare each).
pub(super) fn interface_filter(indexes: &[u32]) -> Vec<libc::sock_filter> {
    const SKF_AD_IFINDEX: u32 = 8;
    let ins = |code: u32, jt: usize, jf: usize, k: u32| libc::sock_filter {
        code: code as u16,
        jt: jt as u8,
        jf: jf as u8,
        k,
    };
    let n = indexes.len();
    let mut prog = vec![ins(
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        0,
        0,
        (libc::SKF_AD_OFF as u32).wrapping_add(SKF_AD_IFINDEX),
    )];
    for (i, &ix) in indexes.iter().enumerate() {
        // Match: jump to "accept" (after the remaining compares and "reject").
        prog.push(ins(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, n - i, 0, ix));
    }
    prog.push(ins(libc::BPF_RET | libc::BPF_K, 0, 0, 0));
    prog.push(ins(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX));
    prog
}

/// The program the socket runs: the interface filter when several
/// interfaces share the ring, then the user's filter (its jumps are
/// relative, so it runs where the interface filter would accept).
pub(super) fn socket_filter(
    indexes: &[u32],
    user: Option<&crate::filter::Program>,
) -> Vec<libc::sock_filter> {
    let mut prog = if indexes.len() > 1 { interface_filter(indexes) } else { Vec::new() };
    if let Some(user) = user {
        // In place of the interface filter's final "accept everything".
        prog.pop();
        prog.extend(user.insns.iter().map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }));
    }
    prog
}

/// The link type a filter is compiled for: the one every interface has
/// (as the ring reports them: Ethernet and loopback alike, or raw IP).
pub(super) fn filter_link_type(names: &[String]) -> Result<u16, LiveError> {
    let mut common = None;
    for name in names {
        let path = format!("/sys/class/net/{name}/type");
        let hatype: u16 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| LiveError::Config(format!("cannot read {path}")))?;
        let link = match hatype {
            super::ARPHRD_ETHER | super::ARPHRD_LOOPBACK => crate::linktype::ETHERNET,
            super::ARPHRD_NONE => crate::linktype::RAW,
            other => {
                return Err(LiveError::Config(format!(
                    "cannot filter on `{name}`: its link type ({other}) is not captured"
                )))
            }
        };
        if common.is_some_and(|c| c != link) {
            return Err(LiveError::Config(
                "--filter needs interfaces of one link type (Ethernet or raw IP)".into(),
            ));
        }
        common = Some(link);
    }
    common.ok_or_else(|| LiveError::Config("no interface to capture on".into()))
}
