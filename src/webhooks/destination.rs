//! Where deliveries may go: an `http`/`https` URL whose host resolves to public addresses
//! only, unless `DSH_WEBHOOK_ALLOW_PRIVATE=true` (tests, a private network on purpose). The
//! check runs at registration (a literal address) and again in the sender's own DNS resolver
//! at every connection, so a name that resolves to a private address later is refused too.

use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// The longest URL an endpoint may have.
pub const MAX_URL: usize = 2048;

/// Whether `ip` is an address on the public internet (not loopback, private, link-local,
/// shared, unspecified, multicast, documentation or reserved space, nor an IPv6 address that
/// carries a non-public IPv4 one: mapped, compatible, NAT64 or 6to4).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
                || (a == 192 && b == 0 && c == 0))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let low = std::net::Ipv4Addr::from(u128::from(v6) as u32);
            let embedded = match s {
                [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0, 0, ..] => Some(low),
                [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
                [0x2002, hi, lo, ..] => Some(std::net::Ipv4Addr::from(
                    (u32::from(hi) << 16) | u32::from(lo),
                )),
                _ => None,
            };
            match embedded {
                Some(v4) => is_public(IpAddr::V4(v4)),
                None => {
                    !(v6.is_loopback()
                        || v6.is_unspecified()
                        || v6.is_multicast()
                        || v6.is_unique_local()
                        || v6.is_unicast_link_local()
                        // The local-use NAT64 prefix, and site-local (deprecated) space.
                        || (s[0] == 0x64 && s[1] == 0xff9b)
                        || (s[0] & 0xffc0) == 0xfec0
                        || (s[0] == 0x2001 && s[1] == 0xdb8))
                }
            }
        }
    }
}

/// `raw` as an endpoint URL, or why it cannot be one.
pub fn parse(raw: &str, allow_private: bool) -> Result<Url, String> {
    if raw.len() > MAX_URL {
        return Err(format!("the url is longer than {MAX_URL} bytes"));
    }
    let url = Url::parse(raw).map_err(|e| format!("the url does not parse: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the url must be http or https, not `{}`",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the url must not carry credentials (user:password@)".into());
    }
    let Some(host) = url.host() else {
        return Err("the url has no host".into());
    };
    let literal = match host {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(d) if d.eq_ignore_ascii_case("localhost") => {
            Some(IpAddr::from([127, 0, 0, 1]))
        }
        url::Host::Domain(_) => None,
    };
    if let Some(ip) = literal.filter(|ip| !allow_private && !is_public(*ip)) {
        return Err(format!(
            "the url names a private or loopback address ({ip})"
        ));
    }
    Ok(url)
}

/// The URL as logs may show it: scheme, host, port and path, never the query or credentials.
pub fn shown(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or_default(),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path()
        ),
        Err(_) => "(unparseable url)".into(),
    }
}

/// The sender's DNS resolver: the system's, keeping public addresses only.
pub struct Guarded {
    pub allow_private: bool,
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let (host, allow) = (name.as_str().to_owned(), self.allow_private);
        Box::pin(async move {
            // A name that does not resolve and one that resolves to private addresses only
            // fail alike: the attempt's error is shown to the tenant, and must not tell it
            // which internal names exist.
            let refused = || format!("{host} resolves to no public address");
            let found: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), 0)).await {
                Ok(addrs) => addrs.filter(|a| allow || is_public(a.ip())).collect(),
                Err(_) => Vec::new(),
            };
            if found.is_empty() {
                return Err(refused().into());
            }
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_loopback_destinations_are_refused_unless_allowed() {
        for bad in [
            "http://127.0.0.1/x",
            "http://localhost:8080/",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://100.64.0.1/",
            // IPv4 inside IPv6: compatible, NAT64 (a gateway on an IPv6-only network forwards
            // it to that IPv4 address), 6to4.
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[64:ff9b:1::a00:1]/",
            "http://[2002:a00:1::]/",
            // Reserved IPv4: benchmarking, IETF protocol assignments, class E.
            "http://198.18.0.1/",
            "http://192.0.0.170/",
            "http://240.0.0.1/",
        ] {
            assert!(parse(bad, false).is_err(), "{bad}");
            assert!(parse(bad, true).is_ok(), "{bad}");
        }
        assert!(parse("https://hooks.example.com/dsh?token=abc", false).is_ok());
        assert!(parse("https://93.184.216.34/", false).is_ok());
        assert!(parse("https://[2606:2800:220:1:248:1893:25c8:1946]/", false).is_ok());
        assert!(parse("https://[64:ff9b::5db8:d822]/", false).is_ok());
    }

    #[test]
    fn only_http_urls_without_credentials_and_within_the_length_are_accepted() {
        for bad in [
            "ftp://example.com/",
            "example.com",
            "https://u:p@example.com/",
            "file:///etc/passwd",
        ] {
            assert!(parse(bad, true).is_err(), "{bad}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL));
        assert!(parse(&long, true).is_err());
    }

    #[tokio::test]
    async fn a_private_name_and_a_missing_one_are_refused_alike() {
        let guarded = Guarded {
            allow_private: false,
        };
        let why = |host: &'static str| {
            let name: Name = host.parse().unwrap();
            let resolving = guarded.resolve(name);
            async move {
                match resolving.await {
                    Ok(_) => panic!("{host} resolved"),
                    Err(e) => e.to_string().replace(host, "HOST"),
                }
            }
        };
        assert_eq!(why("localhost").await, why("no-such-host.invalid").await);
    }

    #[test]
    fn logs_show_a_url_without_its_query() {
        assert_eq!(
            shown("https://example.com:8443/hook?token=s3cret#x"),
            "https://example.com:8443/hook"
        );
    }
}
