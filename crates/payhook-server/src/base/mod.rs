//! The bottom layer: what every other layer names and nothing here imports from above — the settings, the clock,
//! the metrics' instruments and text format, the API's schema types, and small pieces of vocabulary.

pub mod clock;
pub mod ip_range;
pub mod json_int;
pub mod metrics;
pub mod schema;
pub mod scope;
pub mod secret_url;
pub mod settings;
pub mod task;
pub mod trace;
