//! SIGTERM and SIGINT ask the probe to stop (it writes every open call and
//! drains its queues first); a second one stops it at once, should the
//! first find it blocked (reading a FIFO that stays quiet). SIGHUP asks it
//! to reload its rules. The handlers only set flags the probe's loop reads.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe.
    if sig == libc::SIGHUP {
        RELOAD.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
        // The next one takes the default action (sigaction is async-signal-safe).
        // SAFETY: a zeroed sigaction is SIG_DFL with no flags.
        unsafe {
            let dfl: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
}

/// Installs the handlers (without SA_RESTART, so a wait for packets returns).
pub fn install() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only stores atomics.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once SIGTERM or SIGINT arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// True once per SIGHUP received since the last call.
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::Relaxed)
}
