//! A broker restarted under load: the test starts a broker process of its own (`nats-server` with JetStream on a
//! file store, `redis-server` with an fsynced append-only file), ingests orders while the dispatcher runs, kills the
//! broker and starts it again on the same port and data directory. Nothing is lost, and nothing is doubled: the
//! rows whose publish landed before the kill but whose ack did not are re-published and dropped by the broker.
//! RabbitMQ is restarted in place (`rabbitmqctl stop_app`, `start_app`) with a durable queue: nothing is lost, and
//! a copy (which AMQP cannot drop) carries the same `message_id`.
//!
//! Skipped with a message when the broker's binary is not installed, unless `PAYHOOK_TEST_BROKERS=1`.

use crate::brokers::{create_stream, nats_sink, paid_order, redis_entries, redis_sink, rows, stream_messages, unique};
use crate::helpers::TestApp;
use payhook_core::retry::RetryPolicy;
use payhook_server::now_ms;
use payhook_server::settings::SinkSettings;
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const ORDERS: usize = 30;

/// A broker process this test owns; killed when dropped.
struct BrokerProcess {
    program: &'static str,
    args: Vec<String>,
    port: u16,
    child: Option<Child>,
}

impl BrokerProcess {
    /// Starts `program` with `args` (where `{port}` and `{dir}` are filled in), or `None` if it is not installed.
    async fn start(program: &'static str, args: &[&str], dir: &std::path::Path) -> Option<Self> {
        let installed = Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
        if !installed.is_ok_and(|s| s.success()) {
            assert!(std::env::var("PAYHOOK_TEST_BROKERS").as_deref() != Ok("1"), "{program} is not installed");
            eprintln!("skipped: {program} is not installed (set PAYHOOK_TEST_BROKERS=1 to fail instead)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = dir.to_string_lossy();
        let args = args.iter().map(|a| a.replace("{port}", &port.to_string()).replace("{dir}", &dir)).collect();
        let mut process = Self { program, args, port, child: None };
        process.spawn().await;
        Some(process)
    }

    async fn spawn(&mut self) {
        let child = Command::new(self.program)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the broker");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            assert!(std::time::Instant::now() < deadline, "{} did not come up", self.program);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: the broker gets no chance to flush or to say goodbye.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A broker that can be stopped and started again on the same address and data.
trait Restart {
    fn stop(&mut self);
    async fn start(&mut self);
}

impl Restart for BrokerProcess {
    fn stop(&mut self) {
        self.kill();
    }

    async fn start(&mut self) {
        self.spawn().await;
    }
}

/// The machine's RabbitMQ, its application stopped and started by `rabbitmqctl`; started again when dropped.
struct RabbitApp {
    stopped: bool,
}

fn rabbitmqctl(command: &str) {
    let status = Command::new("rabbitmqctl").arg("-q").arg(command).stdout(Stdio::null()).status();
    assert!(status.is_ok_and(|s| s.success()), "rabbitmqctl {command} failed");
}

impl Restart for RabbitApp {
    fn stop(&mut self) {
        rabbitmqctl("stop_app");
        self.stopped = true;
    }

    async fn start(&mut self) {
        rabbitmqctl("start_app");
        self.stopped = false;
        rabbitmqctl("await_startup");
    }
}

impl Drop for RabbitApp {
    fn drop(&mut self) {
        if self.stopped {
            rabbitmqctl("start_app");
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Ingests [`ORDERS`] paid orders while a dispatcher loop runs on real time, killing the broker after a third of
/// them and starting it again after two thirds; then drains.
async fn orders_through_a_restart(broker: &mut impl Restart, sink: SinkSettings) -> TestApp {
    let sink_name = sink.name.clone();
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink);
        s.dispatcher.retry = RetryPolicy { base_ms: 100, factor: 2, cap_ms: 1_000, jitter: 0.0, max_attempts: 1_000 };
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let dispatcher = app.running.dispatcher.clone();
    let running = Arc::clone(&stop);
    let loop_task = tokio::spawn(async move {
        while !running.load(Ordering::Relaxed) {
            dispatcher.run_once(now_ms()).await.expect("dispatch");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    for i in 0..ORDERS {
        if i == ORDERS / 3 {
            broker.stop();
        }
        if i == 2 * ORDERS / 3 {
            // Down for longer than the sink's timeout, so that publishes in flight fail and are retried.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            broker.start().await;
        }
        paid_order(&app, &format!("ord_{i}")).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // The client reconnects by itself; give the backoff time to find the broker again, then drain.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while rows(&app, &sink_name).await.iter().any(|r| r.status != payhook_store::OutboxStatus::Delivered) {
        assert!(std::time::Instant::now() < deadline, "rows still pending after the restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    loop_task.await.expect("dispatcher loop");
    app
}

fn assert_nothing_lost_or_doubled(app_rows: &[payhook_store::OutboxView], ids: &[String]) {
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(app_rows.len(), ORDERS);
    assert_eq!(ids.len(), ORDERS, "each row once in the broker, nothing doubled: {ids:?}");
    assert_eq!(distinct.len(), ORDERS, "{ids:?}");
    let retried = app_rows.iter().filter(|r| r.attempts > 1).count();
    assert!(retried > 0, "no row was retried: the broker's downtime was not felt");
    eprintln!("{retried} of {ORDERS} rows needed more than one attempt");
    for row in app_rows {
        assert_eq!(row.status, payhook_store::OutboxStatus::Delivered, "{row:?}");
        assert!(distinct.contains(&row.id.to_string()), "row {} was lost", row.id);
    }
}

#[tokio::test]
async fn a_jetstream_server_killed_and_restarted_under_load_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "{dir}"];
    let Some(mut broker) = BrokerProcess::start("nats-server", &args, dir.path()).await else { return };
    let url = format!("nats://127.0.0.1:{}", broker.port);
    let (stream, prefix) = (unique("PAYHOOK_RESTART_"), unique("payhook-restart-"));
    let js = create_stream(&url, &stream, &prefix).await;
    let mut sink = nats_sink("nats-restart", &url, &format!("{prefix}.{{order_id}}"));
    sink.timeout_ms = 1_000;
    let app = orders_through_a_restart(&mut broker, sink).await;
    let ids: Vec<String> = stream_messages(&js, &stream).await.into_iter().map(|(_, id, _)| id).collect();
    assert_nothing_lost_or_doubled(&rows(&app, "nats-restart").await, &ids);
}

#[tokio::test]
async fn a_redis_server_killed_and_restarted_under_load_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--bind",
        "127.0.0.1",
        "--port",
        "{port}",
        "--dir",
        "{dir}",
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    let Some(mut broker) = BrokerProcess::start("redis-server", &args, dir.path()).await else { return };
    let url = format!("redis://127.0.0.1:{}", broker.port);
    let mut sink = redis_sink("redis-restart", &url, "payhook-restart");
    sink.timeout_ms = 1_000;
    let app = orders_through_a_restart(&mut broker, sink).await;
    let ids: Vec<String> = redis_entries(&url, "payhook-restart").await.into_iter().map(|(id, _, _)| id).collect();
    assert_nothing_lost_or_doubled(&rows(&app, "redis-restart").await, &ids);
}

#[tokio::test]
async fn a_rabbitmq_restarted_under_load_loses_nothing_and_its_copies_keep_their_message_id() {
    let url = crate::brokers_amqp::amqp_url();
    let test = "a_rabbitmq_restarted_under_load_loses_nothing_and_its_copies_keep_their_message_id";
    if !crate::brokers::reachable(&url, test).await {
        return;
    }
    let installed =
        Command::new("rabbitmqctl").args(["-q", "status"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !installed.is_ok_and(|s| s.success()) {
        assert!(std::env::var("PAYHOOK_TEST_BROKERS").as_deref() != Ok("1"), "rabbitmqctl cannot reach RabbitMQ");
        eprintln!("skipped {test}: rabbitmqctl cannot reach RabbitMQ");
        return;
    }
    // The other RabbitMQ tests must not run while the broker is down.
    let _alone = crate::brokers_amqp::BROKER.write().await;
    let queue = unique("payhook-restart-");
    let (connection, channel) = crate::brokers_amqp::declare_queue(&url, &queue).await;
    drop((channel, connection));
    let mut sink = crate::brokers_amqp::amqp_sink("amqp-restart", &url, &queue);
    sink.timeout_ms = 1_000;
    let app = orders_through_a_restart(&mut RabbitApp { stopped: false }, sink).await;
    let (_connection, channel) = crate::brokers_amqp::declare_queue(&url, &queue).await;
    let seen = crate::brokers_amqp::drain(&channel, &queue).await;
    let ids: BTreeSet<String> = seen.iter().map(|(id, _, _)| id.clone()).collect();
    let app_rows = rows(&app, "amqp-restart").await;
    assert_eq!((app_rows.len(), ids.len()), (ORDERS, ORDERS), "every row in the queue: {seen:?}");
    for row in &app_rows {
        assert_eq!(row.status, payhook_store::OutboxStatus::Delivered, "{row:?}");
        assert!(ids.contains(&row.id.to_string()), "row {} was lost", row.id);
    }
    assert!(app_rows.iter().any(|r| r.attempts > 1), "no row was retried: the broker's downtime was not felt");
    eprintln!("{} messages for {ORDERS} rows: the copies carry their row's message_id", seen.len());
}
