//! Connections per client address: a client (a peer address; IPv6 by its /64, as the API token's throttle counts
//! them) may hold at most `server.max_connections_per_client` of the listener's connections, so that one address
//! cannot take every slot of `server.max_connections` from the providers.
//!
//! The table holds only addresses with a connection open: an entry is removed with its last connection, so it never
//! holds more than `max_connections` entries, however many addresses come and go. Trusted proxies
//! (`server.trusted_proxies`) are not counted: every client behind them arrives from their few addresses.

use crate::base::ip_range::IpRange;
use crate::runtime::auth::client_key;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Open connections per client address.
#[derive(Debug)]
pub(crate) struct Clients {
    max_per_client: usize,
    exempt: Vec<IpRange>,
    open: Mutex<HashMap<IpAddr, usize>>,
    /// Addresses in the table, for `/metrics`.
    tracked: Arc<AtomicU64>,
}

/// One connection's place in the table, given back when it drops.
#[derive(Debug)]
pub(crate) struct ClientSlot {
    clients: Arc<Clients>,
    key: IpAddr,
}

impl Clients {
    pub(crate) fn new(max_per_client: usize, exempt: Vec<IpRange>, tracked: Arc<AtomicU64>) -> Self {
        Self { max_per_client: max_per_client.max(1), exempt, open: Mutex::new(HashMap::new()), tracked }
    }

    /// A place for one more connection from `peer`: `Ok(None)` for an exempt peer, `Err(())` when the client already
    /// holds `max_per_client` connections.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Option<ClientSlot>, ()> {
        let peer = peer.to_canonical();
        if self.exempt.iter().any(|range| range.contains(peer)) {
            return Ok(None);
        }
        let key = client_key(peer);
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= self.max_per_client {
            return Err(());
        }
        *count += 1;
        self.tracked.store(open.len() as u64, Ordering::Relaxed);
        Ok(Some(ClientSlot { clients: Arc::clone(self), key }))
    }

    /// Addresses with a connection open.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
        self.clients.tracked.store(open.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_holds_at_most_its_share_and_gets_it_back_as_connections_close() {
        let tracked = Arc::new(AtomicU64::new(0));
        let clients = Arc::new(Clients::new(2, Vec::new(), Arc::clone(&tracked)));
        let a1 = clients.admit(ip("192.0.2.1")).unwrap();
        let a2 = clients.admit(ip("192.0.2.1")).unwrap();
        assert!(clients.admit(ip("192.0.2.1")).is_err(), "a third connection from the same address");
        assert!(clients.admit(ip("::ffff:192.0.2.1")).is_err(), "the same address, IPv4-mapped");
        let b = clients.admit(ip("192.0.2.2")).unwrap();
        assert_eq!(tracked.load(Ordering::Relaxed), 2);
        drop(a1);
        let a3 = clients.admit(ip("192.0.2.1")).unwrap();
        drop((a2, a3, b));
        assert_eq!(clients.len(), 0, "an address leaves the table with its last connection");
        assert_eq!(tracked.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn ipv6_addresses_of_one_64_are_one_client_and_trusted_proxies_are_not_counted() {
        let proxy = IpRange::parse("10.0.0.0/8").unwrap();
        let clients = Arc::new(Clients::new(1, vec![proxy], Arc::new(AtomicU64::new(0))));
        let _held = clients.admit(ip("2001:db8:1:2::1")).unwrap();
        assert!(clients.admit(ip("2001:db8:1:2:ffff::9")).is_err());
        let other = clients.admit(ip("2001:db8:1:3::1")).unwrap();
        assert!(other.is_some(), "another /64");
        let through_proxy: Vec<_> = (0..10).map(|_| clients.admit(ip("10.1.2.3")).unwrap()).collect();
        assert!(through_proxy.iter().all(Option::is_none), "a trusted proxy takes no place in the table");
        assert_eq!(clients.len(), 2);
    }
}
