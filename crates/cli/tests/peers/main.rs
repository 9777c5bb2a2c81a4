//! The command against real peers in real time: network namespaces with
//! Kamailio, rtpengine, SIPp, baresip and nftables; live capture; a real
//! browser. One binary, so the suite links it once.
//!
//! Its tests take turns ([`turn`]): each measures what happens in real time,
//! and on two cores a neighbour's load made them fail (Kamailio's HEP late
//! for the collector's reorder window, a relay rig's timers).

#[path = "../console/browser.rs"]
mod browser;
#[path = "../common/mod.rs"]
mod common;
#[path = "../console/flow.rs"]
mod flow;
#[path = "../console/server.rs"]
mod server;

mod console_browser;
mod hep_netns;
mod kpi_sipp;
mod loss_by_leg_netns;
mod netns;
mod probe_filter;
mod probe_live;
mod relay_netns;
mod relay_path_netns;
mod speech_netns;

/// One test of this binary at a time (a failed test does not stop the rest).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
