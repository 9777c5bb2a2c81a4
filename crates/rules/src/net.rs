//! Networks and port ranges. Addresses are compared as 128-bit numbers, an
//! IPv4 address as its IPv4-mapped IPv6 form, so one table holds both.

use crate::{error, RuleError};
use std::net::IpAddr;

/// An address as 128 bits (IPv4 mapped into `::ffff:0:0/96`).
#[inline]
pub(crate) fn bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => 0xffff_0000_0000u128 | u32::from(v) as u128,
        IpAddr::V6(v) => u128::from(v),
    }
}

/// The mask of a prefix length (0..=128).
#[inline]
pub(crate) fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        n => u128::MAX << (128 - n as u32),
    }
}

/// A network: address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network's address bits (host bits zero).
    pub(crate) addr: u128,
    /// Prefix length over 128 bits (an IPv4 /24 is 120).
    pub(crate) len: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `2001:db8::/32` or a single address.
    pub fn parse(s: &str) -> Result<Cidr, RuleError> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let Ok(ip) = a.trim().parse::<IpAddr>() else {
            return error(format!("`{s}` is not an address or network (e.g. 10.1.0.0/16)"));
        };
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => match l.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return error(format!("`{s}`: prefix length must be 0 to {max}")),
            },
        };
        let len = len + (128 - max);
        let addr = bits(ip);
        if addr & !mask(len) != 0 {
            return error(format!("`{s}` has host bits set after the prefix"));
        }
        Ok(Cidr { addr, len })
    }

    /// True when the address is in the network.
    #[inline]
    pub fn contains(&self, a: u128) -> bool {
        a & mask(self.len) == self.addr
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.addr >> 32 == 0xffff && self.len >= 96 {
            let v4 = std::net::Ipv4Addr::from(self.addr as u32);
            write!(f, "{v4}/{}", self.len - 96)
        } else {
            write!(f, "{}/{}", std::net::Ipv6Addr::from(self.addr), self.len)
        }
    }
}

/// Ports `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Parses `5060` or `10000-20000`.
    pub fn parse(s: &str) -> Result<PortRange, RuleError> {
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| RuleError(format!("`{s}` is not a port or range (e.g. 10000-20000)")))
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if lo > hi {
            return error(format!("`{s}`: the range is empty"));
        }
        Ok(PortRange { lo, hi })
    }

    /// True when `p` is in the range.
    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        (self.lo..=self.hi).contains(&p)
    }

    pub(crate) fn single(&self) -> Option<u16> {
        (self.lo == self.hi).then_some(self.lo)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.single() {
            Some(p) => write!(f, "{p}"),
            None => write!(f, "{}-{}", self.lo, self.hi),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let n = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(n.contains(bits("10.1.200.3".parse().unwrap())));
        assert!(!n.contains(bits("10.2.0.1".parse().unwrap())));
        // An IPv4 network never contains an IPv6 address with the same low bits.
        assert!(!n.contains(bits("::a01:c803".parse().unwrap())));
        assert_eq!(n.to_string(), "10.1.0.0/16");
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(bits("2001:db8::1".parse().unwrap())));
        assert_eq!(v6.to_string(), "2001:db8::/32");
        assert!(Cidr::parse("10.1.0.1/16").is_err());
        assert!(Cidr::parse("10.1.0.0/33").is_err());
        assert!(Cidr::parse("example.com").is_err());
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(bits("1.2.3.4".parse().unwrap())));
    }

    #[test]
    fn ports() {
        let r = PortRange::parse("10000-20000").unwrap();
        assert!(r.contains(10000) && r.contains(20000) && !r.contains(9999));
        assert_eq!(PortRange::parse("5060").unwrap().single(), Some(5060));
        assert!(PortRange::parse("20-10").is_err());
        assert!(PortRange::parse("70000").is_err());
    }
}
