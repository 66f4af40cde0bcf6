//! Which addresses a completion callback may reach. A callback URL is chosen by whoever creates
//! the job, so without this the server could be made to POST to itself, to the database's
//! network, or to a cloud metadata service. Every address a name resolves to is checked
//! (a name with one internal address among public ones is refused), the addresses checked are
//! the ones connected to (no second lookup to rebind), and redirects are not followed.
//! Deployments that call back into their own network list it in `CONVEYOR_CALLBACK_ALLOW`.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// An address a callback may not reach, and what kind it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{addr} is {kind}, which callbacks may not reach")]
pub struct Refused {
    pub addr: IpAddr,
    pub kind: &'static str,
}

/// The addresses callbacks may reach: public ones, and those `allow`ed.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    allow: Vec<IpNet>,
}

impl Policy {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Policy { allow }
    }

    pub fn check(&self, addr: IpAddr) -> Result<(), Refused> {
        if self.allow.iter().any(|net| net.contains(&addr)) {
            return Ok(());
        }
        match kind_of(addr) {
            Some(kind) => Err(Refused { addr, kind }),
            None => Ok(()),
        }
    }

    /// Checks a URL's host when it is an address (a name is checked once resolved, when the
    /// callback is sent): so a job naming `http://127.0.0.1/` is refused when it is created.
    pub fn check_host(&self, host: url::Host<&str>) -> Result<(), Refused> {
        match host {
            url::Host::Ipv4(v4) => self.check(v4.into()),
            url::Host::Ipv6(v6) => self.check(v6.into()),
            url::Host::Domain(name) if name.eq_ignore_ascii_case("localhost") => {
                self.check(Ipv4Addr::LOCALHOST.into())
            }
            url::Host::Domain(_) => Ok(()),
        }
    }
}

/// What kind of internal (or unroutable) address `addr` is; `None` for a public one.
fn kind_of(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => kind_of_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => kind_of_v4(v4),
            None => kind_of_v6(v6),
        },
    }
}

fn kind_of_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = v4.octets();
    Some(if v4.is_loopback() {
        "a loopback address"
    } else if v4.is_private() {
        "a private address"
    } else if v4.is_link_local() {
        "a link-local address (where cloud metadata services live)"
    } else if v4.is_multicast() {
        "a multicast address"
    } else if v4.is_broadcast() || a >= 240 {
        "a reserved address"
    } else if a == 0 {
        "an unspecified address"
    } else if a == 100 && (64..128).contains(&b) {
        "a shared (carrier-grade NAT) address"
    } else if (a, b, c) == (192, 0, 0) || (a == 198 && (b == 18 || b == 19)) {
        "a reserved address"
    } else {
        return None;
    })
}

fn kind_of_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let [first, second, third, ..] = v6.segments();
    Some(if v6.is_loopback() {
        "a loopback address"
    } else if v6.is_unspecified() {
        "an unspecified address"
    } else if v6.is_multicast() {
        "a multicast address"
    } else if first & 0xfe00 == 0xfc00 {
        "a unique-local (private) address"
    } else if first & 0xffc0 == 0xfe80 || first & 0xffc0 == 0xfec0 {
        "a link-local address"
    } else if (first, second, third) == (0x64, 0xff9b, 1) {
        "a local-use NAT64 address"
    } else {
        return None;
    })
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`, `::ffff:0:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`)
/// address, which reach that IPv4 address.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match v6.segments() {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(v4(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(v4(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

/// Resolves callback hosts and refuses any whose addresses are not all allowed.
pub struct Resolver(pub Arc<Policy>);

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.0);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            for addr in &addrs {
                policy.check(addr.ip())?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_of_every_kind_are_refused_unless_allowed() {
        let policy = Policy::default();
        for refused in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::8.8.8.8",
            "::ffff:0:10.0.0.1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
        ] {
            let addr: IpAddr = refused.parse().unwrap();
            assert!(policy.check(addr).is_err(), "{refused} is refused");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            let addr: IpAddr = public.parse().unwrap();
            assert_eq!(policy.check(addr), Ok(()), "{public} is allowed");
        }
        let allowing = Policy::new(vec!["127.0.0.1/32".parse().unwrap()]);
        assert_eq!(allowing.check("127.0.0.1".parse().unwrap()), Ok(()));
        assert!(allowing.check("127.0.0.2".parse().unwrap()).is_err());
    }

    #[test]
    fn address_hosts_are_checked_however_they_are_written() {
        let policy = Policy::default();
        for url in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::1]:8080/",
            "http://localhost:3000/",
            "http://LOCALHOST/",
        ] {
            let url = url::Url::parse(url).unwrap();
            assert!(policy.check_host(url.host().unwrap()).is_err(), "{url}");
        }
        let url = url::Url::parse("https://hooks.example.com/x").unwrap();
        assert_eq!(policy.check_host(url.host().unwrap()), Ok(()));
    }
}
