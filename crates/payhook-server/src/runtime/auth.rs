//! The tokens, for both surfaces that take them: the `/v1` bearer token and the dashboard's login form.
//!
//! - [`Client`]: which address is asking — the peer's, or, when the peer is a trusted proxy, the right-most
//!   `X-Forwarded-For` hop that is not itself one, or the unknown sender behind a trusted proxy that could not name
//!   it ([`client_ip`]).
//! - [`Credentials`] (in `access`): which token a submitted one is, compared as SHA-256 digests in constant time.
//! - [`AuthGate`]: the comparison behind a token bucket of failures per client address. An address whose bucket
//!   is empty is refused with 429 whatever it sends, the right token included, until a failure's worth has
//!   refilled; a success costs nothing. Every refusal is counted and logged with the client's address, never
//!   with what was submitted.
//!
//! Time is a parameter (`now_ms`), so the bucket is tested without sleeping.

use crate::base::ip_range::IpRange;
use crate::base::metrics::AuthMetrics;
pub(crate) use crate::base::metrics::Surface;
use crate::base::settings::AuthSettings;
use crate::runtime::access::{Credentials, Principal, Via};
use axum::http::HeaderMap;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

/// Why an attempt was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token was submitted (no `Authorization: Bearer` header, an empty form field).
    Missing,
    /// A token was submitted and it is not a configured one.
    Wrong,
    /// The token named here was submitted after its `not_after`.
    Expired {
        /// The token's name.
        name: String,
    },
    /// The client's address failed too often: refused without looking at the token.
    Throttled {
        /// Seconds until the address may try again.
        retry_after_secs: u64,
    },
}

impl Refusal {
    /// The `reason` log field.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Wrong => "wrong",
            Refusal::Expired { .. } => "expired",
            Refusal::Throttled { .. } => "throttled",
        }
    }
}

/// Who a request's client is, as far as its connection and trusted proxies tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientAddr {
    /// This address.
    Ip(IpAddr),
    /// Someone the trusted proxy at this address received the request from and could not name: the entry it wrote
    /// in `X-Forwarded-For` is not an address (`unknown`, empty, garbled). All such clients of one proxy are one
    /// client to payhook, never the proxy itself.
    UnknownBehind(IpAddr),
}

impl From<IpAddr> for ClientAddr {
    fn from(ip: IpAddr) -> Self {
        ClientAddr::Ip(ip)
    }
}

impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientAddr::Ip(ip) => write!(f, "{ip}"),
            ClientAddr::UnknownBehind(proxy) => write!(f, "unknown (behind {proxy})"),
        }
    }
}

/// The client of a request from `peer` with these `X-Forwarded-For` values (every value of the header, in order,
/// comma-separated): `peer` itself unless it is a trusted proxy; else the header is read from the right, skipping
/// the trusted proxies, and the first entry that is not one is the client.
///
/// Each proxy appends the address it received the request from, so the entries right of the client's were written
/// by proxies the operator runs, and the entries left of it by whoever sent the request: a client that forges
/// `X-Forwarded-For: 1.2.3.4` (or `unknown`, or garbage) only adds entries that are never read. An entry that is not
/// an address, reached before any untrusted one, was written by the trusted proxy right of it (the peer, for the
/// last entry), which received the request from someone it could not name: the client is that unknown sender
/// ([`ClientAddr::UnknownBehind`] that proxy), neither the proxy itself (whose allowance every client behind it
/// would then share) nor a guess further left. When every entry is a trusted proxy, the left-most one is the client;
/// without the header, the peer. IPv4-mapped IPv6 addresses are taken as IPv4; an entry may carry a port
/// (`1.2.3.4:5678`, `[2001:db8::1]:443`).
pub fn client_ip<'a>(
    peer: IpAddr,
    forwarded_for: impl IntoIterator<Item = &'a str>,
    trusted: &[IpRange],
) -> ClientAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: IpAddr| trusted.iter().any(|range| range.contains(ip));
    if !is_trusted(peer) {
        return ClientAddr::Ip(peer);
    }
    let values: Vec<&str> = forwarded_for.into_iter().collect();
    // The trusted hop that wrote the entry being read.
    let mut writer = peer;
    for entry in values.iter().rev().flat_map(|value| value.rsplit(',')) {
        match parse_hop(entry.trim()) {
            None => return ClientAddr::UnknownBehind(writer),
            Some(ip) if is_trusted(ip) => writer = ip,
            Some(ip) => return ClientAddr::Ip(ip),
        }
    }
    ClientAddr::Ip(writer)
}

fn parse_hop(entry: &str) -> Option<IpAddr> {
    let ip = entry.parse::<IpAddr>().or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip())).ok()?;
    Some(ip.to_canonical())
}

/// Who is asking: the client as [`client_ip`] decides it, and the connection's peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Client {
    /// The client; `None` when the connection's address is unknown (a router served without `ConnectInfo`, as in
    /// tests): all such requests share one bucket.
    pub(crate) addr: Option<ClientAddr>,
    /// The connection's peer, when known.
    pub(crate) peer: Option<IpAddr>,
}

impl Client {
    /// The client of a request from `peer` (the `ConnectInfo<SocketAddr>` the server attaches to each request;
    /// `None` without it) and the request's `X-Forwarded-For`, believed only from `trusted` peers. A value that is
    /// not UTF-8 is read with its invalid bytes replaced, so the entries a proxy appended after them still count.
    pub(crate) fn of(peer: Option<SocketAddr>, headers: &HeaderMap, trusted: &[IpRange]) -> Self {
        let peer = peer.map(|p| p.ip().to_canonical());
        let addr = peer.map(|peer| {
            if trusted.is_empty() {
                return ClientAddr::Ip(peer);
            }
            let values: Vec<std::borrow::Cow<'_, str>> =
                headers.get_all("x-forwarded-for").iter().map(|v| String::from_utf8_lossy(v.as_bytes())).collect();
            client_ip(peer, values.iter().map(|v| v.as_ref()), trusted)
        });
        Client { addr, peer }
    }
}

/// The key an address is counted under, by the throttle and by the listener's connections per client: IPv6
/// addresses by their /64, since one host commonly holds a whole /64 and could otherwise pass for 2^64 clients.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

/// The throttle's key for a client: an address by [`client_key`]; the unknown clients behind one proxy together.
fn bucket_key(addr: Option<ClientAddr>) -> Option<ClientAddr> {
    addr.map(|client| match client {
        ClientAddr::Ip(ip) => ClientAddr::Ip(client_key(ip)),
        unknown @ ClientAddr::UnknownBehind(_) => unknown,
    })
}

/// A token's worth of refill: the bucket counts in 1/60,000ths of a token, so that refilling at `per_minute` tokens a
/// minute adds exactly `per_minute` units a millisecond and the arithmetic stays in integers.
const UNITS_PER_TOKEN: u64 = 60_000;

/// One address's allowance of failures: `units` (see [`UNITS_PER_TOKEN`]) at `at_ms`, refilling at the configured
/// rate up to the burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    units: u64,
    at_ms: i64,
    /// The address was already refused once since its bucket last had a token; its further refusals are logged at
    /// debug level (they are still counted).
    announced: bool,
}

/// What the throttle decided about one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// The token matched and the address had a token left.
    Accepted,
    /// The token did not match; one of the address's tokens is spent.
    Failed,
    /// The address has no token left: refused without regard to the token.
    Throttled {
        /// Milliseconds until one token is back.
        retry_after_ms: u64,
        /// The first refusal since the bucket emptied.
        first: bool,
    },
}

/// A token bucket of authentication failures per client address, bounded in the number of addresses it holds.
#[derive(Debug)]
pub(crate) struct Throttle {
    per_minute: u64,
    burst_units: u64,
    max_addresses: usize,
    buckets: Mutex<HashMap<Option<ClientAddr>, Bucket>>,
}

impl Throttle {
    pub(crate) fn new(per_minute: u32, burst: u32, max_addresses: usize) -> Self {
        Self {
            per_minute: u64::from(per_minute.max(1)),
            burst_units: u64::from(burst.max(1)) * UNITS_PER_TOKEN,
            max_addresses: max_addresses.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// `bucket` as it stands at `now_ms` (a clock that went back refills nothing).
    fn refilled(&self, bucket: Bucket, now_ms: i64) -> Bucket {
        let elapsed_ms = u64::try_from(now_ms.saturating_sub(bucket.at_ms)).unwrap_or(0);
        let units = bucket.units.saturating_add(elapsed_ms.saturating_mul(self.per_minute)).min(self.burst_units);
        Bucket { units, at_ms: now_ms.max(bucket.at_ms), announced: bucket.announced && units < UNITS_PER_TOKEN }
    }

    /// Decides an attempt from `addr` at `now_ms` whose token `matched` (or not), in one step under the lock so
    /// that concurrent attempts from one address cannot spend the same token twice.
    pub(crate) fn attempt(&self, addr: Option<impl Into<ClientAddr>>, matched: bool, now_ms: i64) -> Admission {
        let key = bucket_key(addr.map(Into::into));
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = buckets.get(&key).map(|b| self.refilled(*b, now_ms));
        if let Some(bucket) = current
            && bucket.units < UNITS_PER_TOKEN
        {
            let retry_after_ms = (UNITS_PER_TOKEN - bucket.units).div_ceil(self.per_minute);
            buckets.insert(key, Bucket { announced: true, ..bucket });
            return Admission::Throttled { retry_after_ms, first: !bucket.announced };
        }
        if matched {
            return Admission::Accepted;
        }
        let bucket = match current {
            Some(bucket) => bucket,
            None => {
                self.make_room(&mut buckets, now_ms);
                Bucket { units: self.burst_units, at_ms: now_ms, announced: false }
            }
        };
        buckets.insert(key, Bucket { units: bucket.units - UNITS_PER_TOKEN, ..bucket });
        Admission::Failed
    }

    /// Frees a place for one more address when the table is full: first the addresses whose buckets have refilled
    /// (they are as good as absent), else the eighth that failed least recently, so that a flood of new addresses
    /// pays for a scan of the table once every `max_addresses / 8` of them rather than every time.
    fn make_room(&self, buckets: &mut HashMap<Option<ClientAddr>, Bucket>, now_ms: i64) {
        if buckets.len() < self.max_addresses {
            return;
        }
        buckets.retain(|_, b| self.refilled(*b, now_ms).units < self.burst_units);
        if buckets.len() < self.max_addresses {
            return;
        }
        let mut ages: Vec<i64> = buckets.values().map(|b| b.at_ms).collect();
        let evict = (ages.len() / 8).max(1);
        let (_, cutoff, _) = ages.select_nth_unstable(evict - 1);
        let cutoff = *cutoff;
        buckets.retain(|_, b| b.at_ms > cutoff);
    }

    /// Addresses held.
    pub(crate) fn addresses(&self) -> usize {
        self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

/// The API token's gate for both surfaces: the comparison, the throttle, the counters and the log lines.
#[derive(Debug)]
pub(crate) struct AuthGate {
    throttle: Throttle,
    metrics: AuthMetrics,
}

impl AuthGate {
    pub(crate) fn new(settings: &AuthSettings) -> Self {
        Self {
            throttle: Throttle::new(settings.failures_per_minute, settings.failure_burst, settings.max_addresses),
            metrics: AuthMetrics::default(),
        }
    }

    /// Checks `given` (what the client submitted, if anything) against `credentials` for `client` on `surface` at
    /// `now_ms`: the caller it names, or why not. A token past its `not_after` is a failure like a wrong one (the
    /// throttle counts it), refused naming the token. A refusal is counted and logged at WARN with the client's
    /// address, the peer's when it differs, the surface and the reason; further refusals of an already throttled
    /// address are logged at DEBUG, so a client hammering away cannot flood the log (the counter still counts each
    /// one).
    pub(crate) fn authenticate(
        &self,
        surface: Surface,
        client: Client,
        credentials: &Credentials,
        given: Option<&str>,
        now_ms: i64,
    ) -> Result<Principal, Refusal> {
        let given = given.map(str::trim).filter(|g| !g.is_empty());
        let found = given.and_then(|g| credentials.find(g));
        let expired = found.filter(|t| t.not_after_ms.is_some_and(|at| now_ms >= at));
        let matched = found.is_some() && expired.is_none();
        let (refusal, announce) = match self.throttle.attempt(client.addr, matched, now_ms) {
            Admission::Accepted => {
                let token = found.ok_or(Refusal::Wrong)?;
                return Ok(Principal {
                    actor: token.name.clone(),
                    scope: token.scope,
                    via: Via::Token,
                    address: client.addr.map(|a| a.to_string()),
                });
            }
            Admission::Failed => {
                self.metrics.failed(surface);
                let refusal = match (expired, given) {
                    (Some(token), _) => Refusal::Expired { name: token.name.clone() },
                    (None, Some(_)) => Refusal::Wrong,
                    (None, None) => Refusal::Missing,
                };
                (refusal, true)
            }
            Admission::Throttled { retry_after_ms, first } => {
                self.metrics.throttled(surface);
                let retry_after_secs = retry_after_ms.div_ceil(1000).max(1);
                (Refusal::Throttled { retry_after_secs }, first)
            }
        };
        log_refusal(surface, client, &refusal, announce);
        Err(refusal)
    }

    /// Counts an identity header that came from a peer that is not a trusted proxy (it was ignored).
    pub(crate) fn identity_ignored(&self, client: Client) {
        self.metrics.identity_ignored();
        tracing::debug!(client = ?client.addr, "identity header ignored: the peer is not a trusted proxy");
    }

    /// Counts a caller refused for want of a scope.
    pub(crate) fn forbidden(&self) {
        self.metrics.forbidden();
    }

    /// The counters and the number of addresses held, for `/metrics`.
    pub(crate) fn snapshot(&self) -> crate::base::metrics::AuthSnapshot {
        self.metrics.snapshot(self.throttle.addresses())
    }
}

fn log_refusal(surface: Surface, client: Client, refusal: &Refusal, announce: bool) {
    let client_text = client.addr.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    let (surface, reason) = (surface.as_str(), refusal.reason());
    let message = match refusal {
        Refusal::Throttled { .. } => "authentication refused: too many failures from this address",
        _ => "authentication failed",
    };
    match (client.peer.filter(|p| Some(ClientAddr::Ip(*p)) != client.addr), announce) {
        (Some(peer), true) => tracing::warn!(client = %client_text, %peer, surface, reason, "{message}"),
        (None, true) => tracing::warn!(client = %client_text, surface, reason, "{message}"),
        (Some(peer), false) => tracing::debug!(client = %client_text, %peer, surface, reason, "{message}"),
        (None, false) => tracing::debug!(client = %client_text, surface, reason, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ranges(list: &[&str]) -> Vec<IpRange> {
        list.iter().map(|r| IpRange::parse(r).unwrap()).collect()
    }

    const MINUTE_MS: u64 = 60_000;

    #[test]
    fn a_burst_of_failures_empties_the_bucket_and_then_even_the_right_token_waits() {
        let t = Throttle::new(10, 10, 100);
        let a = Some(ip("192.0.2.1"));
        for i in 0..10 {
            assert_eq!(t.attempt(a, false, 1_000), Admission::Failed, "failure {i}");
        }
        // 10 per minute: one token every 6 s.
        assert_eq!(t.attempt(a, true, 1_000), Admission::Throttled { retry_after_ms: 6_000, first: true });
        assert_eq!(t.attempt(a, false, 4_000), Admission::Throttled { retry_after_ms: 3_000, first: false });
        // Another address is not affected.
        assert_eq!(t.attempt(Some(ip("192.0.2.2")), true, 1_000), Admission::Accepted);
        assert_eq!(t.attempt(Some(ip("192.0.2.2")), false, 1_000), Admission::Failed);
    }

    #[test]
    fn the_bucket_refills_at_the_configured_rate_up_to_the_burst() {
        let t = Throttle::new(10, 3, 100);
        let a = Some(ip("192.0.2.1"));
        for _ in 0..3 {
            assert_eq!(t.attempt(a, false, 0), Admission::Failed);
        }
        assert!(matches!(t.attempt(a, true, 5_999), Admission::Throttled { retry_after_ms: 1, .. }));
        // One token back after 6 s: one failure, then throttled again.
        assert_eq!(t.attempt(a, false, 6_000), Admission::Failed);
        assert!(matches!(t.attempt(a, true, 6_000), Admission::Throttled { first: true, .. }), "announced anew");
        // After an hour the bucket holds the burst, not sixty minutes' worth.
        for _ in 0..3 {
            assert_eq!(t.attempt(a, false, 3_600_000), Admission::Failed);
        }
        assert!(matches!(t.attempt(a, true, 3_600_000), Admission::Throttled { .. }));
    }

    #[test]
    fn a_success_spends_nothing() {
        let t = Throttle::new(1, 2, 100);
        let a = Some(ip("192.0.2.1"));
        assert_eq!(t.attempt(a, false, 0), Admission::Failed);
        for _ in 0..50 {
            assert_eq!(t.attempt(a, true, 0), Admission::Accepted);
        }
        assert_eq!(t.attempt(a, false, 0), Admission::Failed);
        assert!(matches!(t.attempt(a, true, 0), Admission::Throttled { retry_after_ms: MINUTE_MS, .. }));
        assert_eq!(t.addresses(), 1, "successes add no address");
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_a_bucket() {
        let t = Throttle::new(1, 1, 100);
        assert_eq!(t.attempt(Some(ip("2001:db8:1:2::1")), false, 0), Admission::Failed);
        assert!(matches!(t.attempt(Some(ip("2001:db8:1:2:ffff::9")), true, 0), Admission::Throttled { .. }));
        assert_eq!(t.attempt(Some(ip("2001:db8:1:3::1")), true, 0), Admission::Accepted);
    }

    #[test]
    fn the_table_is_bounded_and_evicts_refilled_buckets_before_the_oldest() {
        // One failure a minute, three in a row: fifteen addresses fail once at 0 (full again at 60 s); an attacker
        // fails three times at 30 s (a token back at 90 s).
        let t = Throttle::new(1, 3, 16);
        for i in 0..15u8 {
            assert_eq!(t.attempt(Some(IpAddr::from([203, 0, 113, i])), false, 0), Admission::Failed);
        }
        let attacker = Some(ip("198.51.100.1"));
        for _ in 0..3 {
            assert_eq!(t.attempt(attacker, false, 30_000), Admission::Failed);
        }
        assert_eq!(t.addresses(), 16);
        // The table is full; a new address makes room by dropping the refilled ones, and the attacker, still
        // throttled, stays throttled.
        assert_eq!(t.attempt(Some(ip("192.0.2.7")), false, 60_000), Admission::Failed);
        assert_eq!(t.addresses(), 2);
        assert!(matches!(t.attempt(attacker, true, 60_000), Admission::Throttled { retry_after_ms: 30_000, .. }));

        // Nothing refilled: the least recently failed eighth goes, and the table never exceeds its bound.
        let t = Throttle::new(1, 5, 16);
        for i in 0..1_000u16 {
            let [hi, lo] = i.to_be_bytes();
            t.attempt(Some(IpAddr::from([10, 0, hi, lo])), false, i64::from(i));
            assert!(t.addresses() <= 16, "{} addresses after {i}", t.addresses());
        }
        let newest = Some(IpAddr::from([10, 0, 3, 231]));
        assert_eq!(t.attempt(newest, false, 1_000), Admission::Failed, "the newest address is still counted");
        let buckets = t.buckets.lock().unwrap();
        assert!(buckets.values().all(|b| b.at_ms > 900), "an old entry survived: {buckets:?}");
    }

    fn known(s: &str) -> ClientAddr {
        ClientAddr::Ip(ip(s))
    }

    fn unknown_behind(s: &str) -> ClientAddr {
        ClientAddr::UnknownBehind(ip(s))
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = ranges(&["10.0.0.0/8"]);
        assert_eq!(client_ip(ip("203.0.113.9"), ["1.2.3.4"], &trusted), known("203.0.113.9"));
        assert_eq!(client_ip(ip("203.0.113.9"), ["unknown"], &trusted), known("203.0.113.9"));
        assert_eq!(client_ip(ip("203.0.113.9"), [], &[]), known("203.0.113.9"));
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_hop_is_the_client() {
        let trusted = ranges(&["10.0.0.0/8", "127.0.0.1"]);
        let peer = ip("127.0.0.1");
        assert_eq!(client_ip(peer, ["203.0.113.9"], &trusted), known("203.0.113.9"));
        // The client forged the left-most entries; the proxies appended the rest.
        assert_eq!(client_ip(peer, ["6.6.6.6, 7.7.7.7, 203.0.113.9, 10.1.2.3"], &trusted), known("203.0.113.9"));
        // Several header lines read as one list, in order.
        assert_eq!(client_ip(peer, ["6.6.6.6", "203.0.113.9", "10.1.2.3"], &trusted), known("203.0.113.9"));
        // Ports and IPv4-mapped addresses.
        assert_eq!(client_ip(peer, ["203.0.113.9:5555, [::ffff:10.0.0.1]:80"], &trusted), known("203.0.113.9"));
        assert_eq!(client_ip(ip("::ffff:127.0.0.1"), ["[2001:db8::1]:443"], &trusted), known("2001:db8::1"));
        // Only proxies: the left-most one. No header: the peer.
        assert_eq!(client_ip(peer, ["10.0.0.5, 10.0.0.6"], &trusted), known("10.0.0.5"));
        assert_eq!(client_ip(peer, [], &trusted), known("127.0.0.1"));
    }

    #[test]
    fn what_a_client_writes_left_of_its_own_address_is_never_read_however_malformed() {
        let trusted = ranges(&["10.0.0.0/8", "127.0.0.1"]);
        let peer = ip("127.0.0.1");
        for forged in ["unknown", "", "nonsense", "203.0.113.300", "1.2.3.4:99999", "[::1"] {
            let header = format!("{forged}, 198.51.100.7, 10.0.0.2");
            assert_eq!(client_ip(peer, [header.as_str()], &trusted), known("198.51.100.7"), "{header:?}");
            // On a line of its own, before the proxies' line.
            assert_eq!(client_ip(peer, [forged, "198.51.100.7"], &trusted), known("198.51.100.7"), "{forged:?}");
        }
        // An empty entry between two addresses left of the client's changes nothing either.
        assert_eq!(client_ip(peer, ["203.0.113.9,,198.51.100.7"], &trusted), known("198.51.100.7"));
    }

    #[test]
    fn a_malformed_entry_written_by_a_trusted_proxy_is_that_proxys_unknown_client_never_the_proxy() {
        let trusted = ranges(&["10.0.0.0/8", "127.0.0.1"]);
        let peer = ip("127.0.0.1");
        // The peer itself wrote the last entry: its client is unknown to it.
        for header in ["unknown", "", "203.0.113.9, nonsense", "203.0.113.300", "203.0.113.9,"] {
            assert_eq!(client_ip(peer, [header], &trusted), unknown_behind("127.0.0.1"), "{header:?}");
        }
        // A proxy further in wrote it: the unknown sender is that proxy's client.
        assert_eq!(client_ip(peer, ["203.0.113.9, unknown, 10.0.0.5"], &trusted), unknown_behind("10.0.0.5"));
        assert_eq!(client_ip(peer, ["unknown", "10.0.0.5, 10.0.0.6"], &trusted), unknown_behind("10.0.0.5"));
        // The unknown clients of one proxy share a bucket, apart from the proxy's and from every known address.
        let t = Throttle::new(1, 1, 100);
        assert_eq!(t.attempt(Some(unknown_behind("10.0.0.5")), false, 0), Admission::Failed);
        assert!(matches!(t.attempt(Some(unknown_behind("10.0.0.5")), true, 0), Admission::Throttled { .. }));
        assert_eq!(t.attempt(Some(known("10.0.0.5")), true, 0), Admission::Accepted, "the proxy's own bucket");
        assert_eq!(t.attempt(Some(unknown_behind("10.0.0.6")), true, 0), Admission::Accepted, "another proxy's");
    }

    #[test]
    fn a_forwarded_for_value_that_is_not_utf8_still_yields_the_address_a_proxy_appended() {
        let trusted = ranges(&["127.0.0.1"]);
        let mut headers = HeaderMap::new();
        let value = axum::http::HeaderValue::from_bytes(b"\xff\xfe, 198.51.100.7").unwrap();
        headers.append("x-forwarded-for", value);
        let client = Client::of(Some("127.0.0.1:4000".parse().unwrap()), &headers, &trusted);
        assert_eq!(client.addr, Some(known("198.51.100.7")));
        headers.insert("x-forwarded-for", axum::http::HeaderValue::from_bytes(b"\xff").unwrap());
        let client = Client::of(Some("127.0.0.1:4000".parse().unwrap()), &headers, &trusted);
        assert_eq!(client.addr, Some(unknown_behind("127.0.0.1")));
    }
}
