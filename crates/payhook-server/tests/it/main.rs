//! Integration tests of payhook-server: the real app on a real socket over a real SQLite file.

mod admin;
mod auth;
mod broker_restart;
mod brokers;
mod brokers_amqp;
mod dispatch;
mod evidence;
mod failpoints;
mod faults;
mod helpers;
mod hostile;
mod ingest;
mod lifecycle;
mod listener;
mod listings;
mod metrics;
mod openapi;
mod orders;
mod presets;
mod providers;
mod readers;
mod retention;
mod ui;
mod verification;
mod webdriver;
mod worker;
