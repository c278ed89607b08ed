//! What every backend's write operations run under besides their arguments: the retry policy of deferred events
//! and the sink routing, reloadable as one value.

use crate::{Current, Routing};
use payhook_core::retry::RetryPolicy;

/// The configuration the write operations need: the retry policy of deferred events and the sink routing.
#[derive(Debug)]
pub struct WriteCtx {
    /// Backoff of deferred events.
    pub retry: RetryPolicy,
    /// Which sinks receive which outbox kinds, forwards and alerts.
    pub routing: Routing,
}

/// The current [`WriteCtx`], replaced whole when the routing is reloaded: an operation takes it once and runs
/// under it to its commit.
pub type LiveWriteCtx = Current<WriteCtx>;

impl Current<WriteCtx> {
    /// Puts `routing` in force for the operations started from now on; the retry policy stays.
    pub fn set_routing(&self, routing: Routing) {
        self.update(|c| WriteCtx { retry: c.retry.clone(), routing });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new routing is in force for what starts after it, with the retry policy as it was; an operation that
    /// took the context before keeps the routing it started under.
    #[test]
    fn a_new_routing_keeps_the_retry_policy_and_spares_operations_under_way() {
        let retry = RetryPolicy { max_attempts: 3, ..RetryPolicy::default() };
        let live = LiveWriteCtx::new(WriteCtx { retry: retry.clone(), routing: Routing::default() });
        let under_way = live.current();
        let mut routing = Routing::default();
        routing.all_kinds.push("shop".into());
        live.set_routing(routing);
        let now = live.current();
        assert_eq!((now.retry.clone(), now.routing.sinks_for("order.paid", "{}")), (retry, vec!["shop"]));
        assert!(under_way.routing.sinks_for("order.paid", "{}").is_empty());
    }
}
