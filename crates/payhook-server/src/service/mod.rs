//! Operator actions, shared by every surface that offers them: the API, the dashboard and the command line
//! (`admin`'s functions take a store; `actions` and `reload` take the running state).

pub mod actions;
pub mod admin;
pub mod audit;
pub mod reload;
