//! What capture agents said of a call's media over HEP, for media the
//! probe itself may never see: RTCP reports (HEP type 5, as rtpengine
//! sends them) and quality reports (type 34), summed per reporting pair.

use serde::Serialize;
use std::net::IpAddr;

/// The kind of HEP report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentReportKind {
    /// RTCP report blocks as JSON (type 5).
    Rtcp,
    /// A quality report as JSON (type 34).
    Quality,
}

/// The reports of one agent about one stream of a call: for RTCP, one
/// reporter SSRC about one source SSRC; for quality, one stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentReport {
    /// RTCP or quality.
    pub kind: AgentReportKind,
    /// The packet's or stream's source, as the agent gives it.
    pub src: IpAddr,
    /// Its source port.
    pub src_port: u16,
    /// Its destination.
    pub dst: IpAddr,
    /// Its destination port.
    pub dst_port: u16,
    /// RTCP: the reporter's SSRC; quality: the stream's (when given).
    pub ssrc: Option<u32>,
    /// RTCP: the SSRC reported on.
    pub source_ssrc: Option<u32>,
    /// Reports summed here.
    pub reports: u32,
    /// The first and the last report's time (the agent's), ns since the epoch.
    pub first_ns: i64,
    /// See `first_ns`.
    pub last_ns: i64,
    /// RTCP: the largest fraction lost, percent.
    pub max_fraction_lost_percent: Option<f64>,
    /// RTCP: cumulative packets lost at the last report.
    pub cumulative_lost: Option<i64>,
    /// RTCP: the largest interarrival jitter, in RTP timestamp units as
    /// RFC 3550 reports it (the stream's clock rate gives milliseconds).
    pub max_jitter_units: Option<u32>,
    /// Quality: the last report's MOS.
    pub mos: Option<f64>,
    /// Quality: the lowest MOS reported.
    pub min_mos: Option<f64>,
    /// Quality: the last report's packets received, expected and lost.
    pub packets: Option<u64>,
    /// See `packets`.
    pub expected: Option<u64>,
    /// See `packets`.
    pub lost: Option<i64>,
}
