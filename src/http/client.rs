//! Who the client is behind trusted proxies: the address the per-IP rate limit
//! counts and the access line names.
//!
//! With `server.trusted_proxies` empty (the default) the client is the TCP peer.
//! Otherwise, when the peer is a trusted proxy, `X-Forwarded-For` is read from the
//! right (every such header, in order, as one list): the first address that is
//! not a trusted proxy is the client, so a host cannot choose its address by
//! sending its own header (entries to the left of the first untrusted one are
//! never believed). If every entry is trusted, the leftmost is the client. An
//! entry that is not an IP address (e.g. `unknown`, an obfuscated RFC 7239 node)
//! ends the walk: the last address read before it is the client.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

use crate::config::parse_trusted_proxy;

/// The `X-Forwarded-For` header (de-facto standard; RFC 7239 `Forwarded` is not read).
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The proxies whose `X-Forwarded-For` is believed (`server.trusted_proxies`).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// The trusted networks of `entries` (validated by the config; an entry that
    /// does not parse is skipped).
    pub fn new(entries: &[String]) -> Self {
        TrustedProxies {
            nets: entries
                .iter()
                .filter_map(|e| parse_trusted_proxy(e).ok())
                .collect(),
        }
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client's address: the peer, or what trusted proxies forwarded (module docs).
    pub fn client(&self, peer: Option<SocketAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = canonical(peer?.ip());
        if self.nets.is_empty() || !self.trusts(peer) {
            return Some(peer);
        }
        let mut client = peer;
        let lists: Vec<&str> = headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        for entry in lists.iter().rev().flat_map(|l| l.rsplit(',')) {
            let Some(ip) = forwarded_ip(entry) else {
                break;
            };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        Some(client)
    }
}

/// One `X-Forwarded-For` entry as an address: `1.2.3.4`, `1.2.3.4:5678`,
/// `2001:db8::1` or `[2001:db8::1]:5678`.
fn forwarded_ip(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    entry.parse::<SocketAddr>().ok().map(|s| canonical(s.ip()))
}

/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`, what a dual-stack socket
/// reports) as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append(X_FORWARDED_FOR, v.parse().unwrap());
        }
        h
    }

    fn client(trusted: &[&str], peer: &str, xff: &[&str]) -> String {
        let t = TrustedProxies::new(&trusted.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let peer: SocketAddr = peer.parse().unwrap();
        t.client(Some(peer), &headers(xff)).unwrap().to_string()
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client() {
        assert_eq!(client(&[], "10.0.0.5:4000", &["1.2.3.4"]), "10.0.0.5");
    }

    #[test]
    fn an_untrusted_peer_cannot_choose_its_address() {
        assert_eq!(
            client(&["10.0.0.0/8"], "192.0.2.9:4000", &["1.2.3.4"]),
            "192.0.2.9"
        );
    }

    #[test]
    fn the_rightmost_untrusted_entry_is_the_client() {
        let trusted = ["10.0.0.0/8", "172.16.0.1"];
        // A host that sends its own X-Forwarded-For: the balancer appends the real one.
        assert_eq!(
            client(
                &trusted,
                "10.0.0.2:1",
                &["6.6.6.6, 198.51.100.7, 172.16.0.1"]
            ),
            "198.51.100.7"
        );
        // Several headers are one list, in order.
        assert_eq!(
            client(&trusted, "10.0.0.2:1", &["6.6.6.6", "198.51.100.7:5555"]),
            "198.51.100.7"
        );
        assert_eq!(
            client(&trusted, "10.0.0.2:1", &["[2001:db8::7]:443"]),
            "2001:db8::7"
        );
        // Every hop trusted: the leftmost.
        assert_eq!(
            client(&trusted, "10.0.0.2:1", &["10.9.9.9, 10.0.0.3"]),
            "10.9.9.9"
        );
        // Garbage ends the walk at the last address read.
        assert_eq!(
            client(&trusted, "10.0.0.2:1", &["198.51.100.7, unknown, 10.0.0.3"]),
            "10.0.0.3"
        );
        assert_eq!(client(&trusted, "10.0.0.2:1", &[]), "10.0.0.2");
        // A dual-stack socket's mapped address is the IPv4 one.
        assert_eq!(
            client(&trusted, "[::ffff:10.0.0.2]:1", &["198.51.100.7"]),
            "198.51.100.7"
        );
    }

    #[test]
    fn entries_are_networks_or_single_addresses() {
        assert_eq!(
            parse_trusted_proxy("10.1.2.3").unwrap().to_string(),
            "10.1.2.3/32"
        );
        assert_eq!(
            parse_trusted_proxy("10.1.2.3/8").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            parse_trusted_proxy("fd00::/8").unwrap().to_string(),
            "fd00::/8"
        );
        assert!(parse_trusted_proxy("10.0.0.0/33").is_err());
        assert!(parse_trusted_proxy("proxy.internal").is_err());
    }
}
