//! The transport layer of a decoded IP packet: UDP (opening the tunnels it
//! carries, VXLAN and GTP-U), TCP, the IP protocols that are tunnels
//! (IP-in-IP, GRE), and the finished [`Frame`] for anything else.

use crate::{
    be16, be32, enter_tunnel, gre, ipproto, tunnel, Ctx, DecodeError, Frame, Layer, Next, Step,
    Transport, VXLAN_PORT,
};
use std::net::IpAddr;

#[inline(always)]
pub(crate) fn frame<'a>(ctx: &Ctx, src: IpAddr, dst: IpAddr, transport: Transport<'a>) -> Next<'a> {
    Next::Done(Frame {
        src,
        dst,
        vlan: ctx.vlan,
        tunnels: ctx.tunnels,
        depth: ctx.depth,
        ip_id: ctx.ip_id,
        transport,
    })
}

#[inline(always)]
pub(crate) fn transport<'a>(
    ctx: &mut Ctx,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    p: &'a [u8],
) -> Step<'a> {
    match proto {
        ipproto::UDP => {
            let (sport, dport, payload) = udp_parts(p).ok_or(DecodeError::Truncated("udp"))?;
            if let Some(inner) = vxlan_inner(dport, payload) {
                enter_tunnel(ctx)?;
                return Ok(Next::Layer(Layer::Ethernet(inner)));
            }
            if dport == tunnel::GTPU_PORT {
                if let Some(step) = tunnel::gtpu(payload) {
                    enter_tunnel(ctx)?;
                    return step;
                }
            }
            Ok(frame(ctx, src, dst, Transport::Udp { sport, dport, payload }))
        }
        ipproto::TCP => {
            if p.len() < 20 {
                return Err(DecodeError::Truncated("tcp"));
            }
            let off = (p[12] >> 4) as usize * 4;
            if off < 20 || p.len() < off {
                return Err(DecodeError::Truncated("tcp"));
            }
            Ok(frame(
                ctx,
                src,
                dst,
                Transport::Tcp {
                    sport: be16(p, 0),
                    dport: be16(p, 2),
                    seq: be32(p, 4),
                    flags: p[13],
                    payload: &p[off..],
                },
            ))
        }
        ipproto::IPIP => {
            enter_tunnel(ctx)?;
            Ok(Next::Layer(Layer::Ipv4(p)))
        }
        ipproto::IPV6 => {
            enter_tunnel(ctx)?;
            Ok(Next::Layer(Layer::Ipv6(p)))
        }
        ipproto::GRE => {
            enter_tunnel(ctx)?;
            gre(p)
        }
        protocol => Ok(frame(ctx, src, dst, Transport::Other { protocol, payload: p })),
    }
}

/// The Ethernet frame a UDP payload carries when it is VXLAN (to its port,
/// with the I flag set).
#[inline(always)]
pub(crate) fn vxlan_inner(dport: u16, payload: &[u8]) -> Option<&[u8]> {
    (dport == VXLAN_PORT && payload.len() >= 8 && payload[0] & 0x08 != 0).then(|| &payload[8..])
}

/// A UDP datagram's ports and payload, or None when its header is cut.
#[inline(always)]
pub(crate) fn udp_parts(p: &[u8]) -> Option<(u16, u16, &[u8])> {
    if p.len() < 8 {
        return None;
    }
    let ulen = be16(p, 4) as usize;
    // A UDP length below 8 is bogus (or 0 for jumbograms): use the IP payload.
    let end = if ulen < 8 { p.len() } else { ulen.min(p.len()) };
    Some((be16(p, 0), be16(p, 2), &p[8..end]))
}
