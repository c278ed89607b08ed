//! The components the state holds and the background tasks run: the token gate, the body budget, the
//! connection counters, the dashboard's sessions, the configuration snapshot, the provider confirmations, and the
//! loops that work without a request (the retry worker, the outbox dispatcher with its broker clients, retention).
//! Each takes what it needs, never the whole state.

pub mod access;
pub mod auth;
pub mod body;
pub mod broker;
pub mod confirm;
pub mod connections;
pub mod dispatcher;
pub mod live;
pub mod rate;
pub mod retention;
pub mod session;
pub mod worker;
