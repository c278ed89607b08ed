//! [`IpRange`]: an address or a CIDR range, as `server.trusted_proxies` and the client caps name them.

use std::fmt;
use std::net::IpAddr;

/// A range of addresses, `10.0.0.0/8`, `fd00::/8`, or one address (`127.0.0.1`, a `/32` or `/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    network: IpAddr,
    prefix_len: u8,
}

/// Why a string is not an [`IpRange`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIpRange {
    /// Neither an address nor `address/prefix`.
    #[error("{0:?} is not an IP address or a CIDR range (such as 10.0.0.0/8 or fd00::/8)")]
    Syntax(String),
    /// The prefix is longer than the address.
    #[error("{0:?}: the prefix length is longer than the address ({1} bits at most)")]
    PrefixTooLong(String, u8),
    /// Bits are set beyond the prefix: probably a typo for an address or for a wider range.
    #[error("{0:?} has bits set beyond its prefix: write {1}")]
    HostBits(String, IpRange),
}

impl IpRange {
    /// Parses `a.b.c.d`, `a.b.c.d/n`, an IPv6 address or `ipv6/n`. IPv4-mapped IPv6 addresses are taken as the
    /// IPv4 address they map.
    pub fn parse(text: &str) -> Result<Self, InvalidIpRange> {
        let syntax = || InvalidIpRange::Syntax(text.to_owned());
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix.parse::<u8>().map_err(|_| syntax())?)),
            None => (text.trim(), None),
        };
        let addr = addr.parse::<IpAddr>().map_err(|_| syntax())?;
        let bits = bits_of(addr);
        let prefix_len = prefix.unwrap_or(bits);
        if prefix_len > bits {
            return Err(InvalidIpRange::PrefixTooLong(text.to_owned(), bits));
        }
        let range = IpRange { network: mask(addr, prefix_len), prefix_len };
        if range.network != addr {
            return Err(InvalidIpRange::HostBits(text.to_owned(), range));
        }
        // `::ffff:10.0.0.0/104` is `10.0.0.0/8`: peers are compared in their canonical form.
        if let IpAddr::V6(v6) = addr
            && let Some(v4) = v6.to_ipv4_mapped()
            && prefix_len >= 96
        {
            return Ok(IpRange { network: IpAddr::V4(v4), prefix_len: prefix_len - 96 });
        }
        Ok(range)
    }

    /// Whether `ip` is in this range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        bits_of(ip) == bits_of(self.network) && mask(ip, self.prefix_len) == self.network
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

fn bits_of(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `ip` with every bit beyond the first `prefix_len` cleared.
fn mask(ip: IpAddr, prefix_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let keep = u32::MAX.checked_shl(32 - u32::from(prefix_len.min(32))).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & keep).into())
        }
        IpAddr::V6(v6) => {
            let keep = u128::MAX.checked_shl(128 - u32::from(prefix_len.min(128))).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & keep).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_parse_strictly() {
        let r = IpRange::parse("10.0.0.0/8").unwrap();
        assert!(r.contains(ip("10.255.0.1")) && !r.contains(ip("11.0.0.1")) && !r.contains(ip("::1")));
        assert!(r.contains(ip("::ffff:10.1.1.1")), "IPv4-mapped");
        assert_eq!(IpRange::parse("127.0.0.1").unwrap().to_string(), "127.0.0.1/32");
        assert!(IpRange::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        let v6 = IpRange::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")) && !v6.contains(ip("10.0.0.1")));
        assert_eq!(IpRange::parse("::ffff:10.0.0.0/104").unwrap(), r);
        assert!(
            matches!(IpRange::parse("10.0.0.1/8"), Err(InvalidIpRange::HostBits(_, r)) if r.to_string() == "10.0.0.0/8")
        );
        assert!(matches!(IpRange::parse("10.0.0.0/33"), Err(InvalidIpRange::PrefixTooLong(_, 32))));
        for bad in ["", "localhost", "10.0.0.0/", "10.0.0.0/x", "10.0.0/8", "1.2.3.4:80"] {
            assert!(matches!(IpRange::parse(bad), Err(InvalidIpRange::Syntax(_))), "{bad:?}");
        }
    }
}
