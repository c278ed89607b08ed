//! The public listener under a hostile network, on the real binary: idle sockets, slowloris heads, header floods,
//! slow bodies on every route that reads one, the connection cap and the share of it one address may hold, while a
//! legitimate provider keeps delivering; and SIGTERM with half-sent requests open.
//!
//! The timeouts are shortened in the configuration so that the short version runs in seconds;
//! `PAYHOOK_TEST_HOSTILE_LONG=1` multiplies the attack (connections and duration) for a longer run, and runs the
//! slow-body attack at full size: 300 sockets against `max_connections = 300`.

use crate::helpers::*;
use reqwest::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// 1 for the short version, more with `PAYHOOK_TEST_HOSTILE_LONG=1`.
fn scale() -> usize {
    if std::env::var("PAYHOOK_TEST_HOSTILE_LONG").is_ok_and(|v| v == "1") { 4 } else { 1 }
}

/// Raises this process's soft limit of open files (children inherit it): the attack needs thousands of sockets.
fn raise_fd_limit(to: u64) {
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={to}:{to}"))
        .status()
        .expect("run prlimit (util-linux)");
    assert!(status.success(), "prlimit --nofile={to} failed: {status}");
}

/// Open file descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The test configuration with `server_keys` added to its `[server]` table.
fn with_server_keys(config: String, server_keys: &str) -> String {
    config.replacen("[server]\n", &format!("[server]\n{server_keys}\n"), 1)
}

/// Waits until the peer closes `stream` (EOF or reset) and returns how long that took, or `None` if it did not
/// within `within`. What the server sent before closing is returned too.
async fn until_closed(mut stream: TcpStream, within: Duration) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + within).into(), stream.read(&mut buf)).await {
            Err(_) => return (None, received),
            Ok(Ok(0) | Err(_)) => return (Some(started.elapsed()), received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// A `payhook_*` sample from the metrics text.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics:\n{text}"))
}

/// `GET /metrics` on a fresh connection: a pooled one may have been closed by the very timeouts under test.
async fn metrics(server: &Server) -> String {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let resp = client.get(server.url("/metrics")).bearer_auth(API_TOKEN).send().await.expect("GET /metrics");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.expect("metrics text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_slowloris_and_header_floods_do_not_keep_legitimate_deliveries_out() {
    const HEADER_TIMEOUT_MS: u64 = 4_000;
    const IDLE_TIMEOUT_MS: u64 = 5_000;
    const MAX_CONNECTIONS: usize = 4_096;
    let (idle_n, slow_n, flood_rounds) = (2_000 * scale(), 200 * scale(), 10 * scale());
    raise_fd_limit(16_384.max(4 * (idle_n + slow_n) as u64));
    let dir = TestDir::new();
    let server = Server::start_edited(&dir, |c| {
        with_server_keys(
            c,
            &format!(
                "header_read_timeout_ms = {HEADER_TIMEOUT_MS}\nkeep_alive_idle_ms = {IDLE_TIMEOUT_MS}\n\
                 max_connections = {MAX_CONNECTIONS}\nmax_connections_per_client = {MAX_CONNECTIONS}\n\
                 max_headers = 100\nmax_header_bytes = 16384"
            ),
        )
    })
    .await;
    let addr = format!("127.0.0.1:{}", server.port);
    let fds_before = open_fds(server.pid());

    // 1. Idle sockets that never send a byte, and slowloris heads that trickle a header line every 400 ms and
    //    never finish: both must be closed by the header read timeout, counted from the accept or the first byte.
    let mut attackers = JoinSet::new();
    let attack_started = Instant::now();
    for _ in 0..idle_n {
        let stream = TcpStream::connect(&addr).await.expect("connect an idle socket");
        attackers
            .spawn(async move { ("idle", until_closed(stream, Duration::from_millis(HEADER_TIMEOUT_MS * 4)).await) });
    }
    for i in 0..slow_n {
        let mut stream = TcpStream::connect(&addr).await.expect("connect a slowloris socket");
        attackers.spawn(async move {
            let started = Instant::now();
            stream.write_all(b"POST /webhooks/payments HTTP/1.1\r\nHost: payhook\r\n").await.ok();
            let (mut reader, mut writer) = stream.into_split();
            let trickle = tokio::spawn(async move {
                for n in 0.. {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    if writer.write_all(format!("X-Slow-{i}-{n}: a\r\n").as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
            let mut buf = [0u8; 1024];
            let deadline = started + Duration::from_millis(HEADER_TIMEOUT_MS * 4);
            let closed = loop {
                match tokio::time::timeout_at(deadline.into(), reader.read(&mut buf)).await {
                    Err(_) => break None,
                    Ok(Ok(0) | Err(_)) => break Some(started.elapsed()),
                    Ok(Ok(_)) => {}
                }
            };
            trickle.abort();
            ("slowloris", (closed, Vec::new()))
        });
    }

    let attack_opened_in = attack_started.elapsed();

    // 2. Header floods: too many headers, and one header too large; each is answered 431 and closed.
    let flood_addr = addr.clone();
    let flood = tokio::spawn(async move {
        let mut answered_431 = 0;
        for round in 0..flood_rounds {
            for kind in 0..2 {
                let Ok(mut stream) = TcpStream::connect(&flood_addr).await else { continue };
                let mut head = String::from("POST /webhooks/payments HTTP/1.1\r\nHost: payhook\r\n");
                if kind == 0 {
                    for h in 0..500 {
                        head.push_str(&format!("X-Flood-{round}-{h}: v\r\n"));
                    }
                } else {
                    head.push_str(&format!("X-Big: {}\r\n", "a".repeat(64 * 1024)));
                }
                head.push_str("\r\n");
                let _ = stream.write_all(head.as_bytes()).await;
                let (closed, received) = until_closed(stream, Duration::from_secs(5)).await;
                assert!(closed.is_some(), "a header flood connection was left open");
                if String::from_utf8_lossy(&received).starts_with("HTTP/1.1 431") {
                    answered_431 += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answered_431
    });

    // 3. Meanwhile a provider delivers signed events at a steady rate, each on a fresh connection half of the
    //    time (a provider's pool comes and goes), with a request timeout shorter than the attackers' hold.
    let legit_n = 100 * scale();
    let fds_peak = Arc::new(AtomicUsize::new(0));
    let watch_pid = server.pid();
    let watcher_peak = Arc::clone(&fds_peak);
    let watcher = tokio::spawn(async move {
        loop {
            watcher_peak.fetch_max(open_fds(watch_pid), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let pooled = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut legit = JoinSet::new();
    let started = Instant::now();
    for i in 0..legit_n {
        tokio::time::sleep_until((started + Duration::from_millis(40 * i as u64)).into()).await;
        let client = if i % 2 == 0 {
            pooled.clone()
        } else {
            reqwest::Client::builder().timeout(Duration::from_secs(5)).pool_max_idle_per_host(0).build().unwrap()
        };
        let (url, d) = (server.webhook_url(), payment(&format!("evt-hostile-{i}"), &format!("hostile-{i}")));
        legit.spawn(async move { (d.event_id.clone(), post(&client, &url, &d).await) });
    }
    let mut acked = Vec::new();
    let mut failures = Vec::new();
    while let Some(r) = legit.join_next().await {
        match r.unwrap() {
            (id, Ok((status, _))) if status.is_success() => acked.push(id),
            (id, other) => failures.push(format!("{id}: {other:?}")),
        }
    }

    let mut closed_in = Vec::new();
    while let Some(r) = attackers.join_next().await {
        let (kind, (closed, _)) = r.unwrap();
        let elapsed =
            closed.unwrap_or_else(|| panic!("a {kind} socket was still open after {}ms", HEADER_TIMEOUT_MS * 4));
        closed_in.push((kind, elapsed));
    }
    let answered_431 = flood.await.unwrap();
    watcher.abort();

    let ok_share = acked.len() as f64 / legit_n as f64;
    eprintln!(
        "hostile: {}/{legit_n} legitimate deliveries acked; {} attack sockets opened in {attack_opened_in:?}; \
         fds {fds_before} before, {} at peak; {answered_431} floods answered 431",
        acked.len(),
        idle_n + slow_n,
        fds_peak.load(Ordering::Relaxed)
    );
    assert!(ok_share >= 0.99, "only {:.1} % of legitimate deliveries were acked: {failures:?}", ok_share * 100.0);
    // Each attacking socket was closed by the header timeout: not before it (it is the timeout that closed it),
    // and not much after (the bound holds under load).
    for (kind, elapsed) in &closed_in {
        assert!(
            *elapsed >= Duration::from_millis(HEADER_TIMEOUT_MS - 200),
            "a {kind} socket was closed after {elapsed:?}, before the header timeout"
        );
        assert!(
            *elapsed <= Duration::from_millis(HEADER_TIMEOUT_MS + 1_500),
            "a {kind} socket was closed only after {elapsed:?}"
        );
    }
    assert_eq!(answered_431, 2 * flood_rounds, "every header flood is answered 431");
    let peak = fds_peak.load(Ordering::Relaxed);
    assert!(peak <= MAX_CONNECTIONS + fds_before + 64, "{peak} file descriptors open at peak");
    // The attack reached the server: most of its sockets were open at once (the first ones may already have been
    // closed by their timeout when the last ones were opened on a loaded machine).
    assert!(peak >= idle_n / 2, "the attack did not reach the server ({peak} file descriptors at peak)");

    // Every attacker is gone: the descriptors are back to about where they were.
    let settle = Instant::now();
    while open_fds(server.pid()) > fds_before + 16 && settle.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(open_fds(server.pid()) <= fds_before + 16, "{} file descriptors still open", open_fds(server.pid()));
    let text = metrics(&server).await;
    assert!(metric(&text, "payhook_connections_header_timeout_total") >= (idle_n + slow_n) as u64, "{text}");
    server.stop();
    check_store(&dir, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_is_closed_after_the_idle_timeout_not_the_header_timeout() {
    const HEADER_TIMEOUT_MS: u64 = 1_000;
    const IDLE_TIMEOUT_MS: u64 = 3_000;
    let dir = TestDir::new();
    let server = Server::start_edited(&dir, |c| {
        with_server_keys(
            c,
            &format!("header_read_timeout_ms = {HEADER_TIMEOUT_MS}\nkeep_alive_idle_ms = {IDLE_TIMEOUT_MS}"),
        )
    })
    .await;
    let mut stream = TcpStream::connect(format!("127.0.0.1:{}", server.port)).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: payhook\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let (closed, _) = until_closed(stream, Duration::from_millis(IDLE_TIMEOUT_MS * 3)).await;
    let closed = closed.expect("the idle keep-alive connection was never closed");
    assert!(
        closed >= Duration::from_millis(IDLE_TIMEOUT_MS - 200)
            && closed <= Duration::from_millis(IDLE_TIMEOUT_MS + 1_500),
        "closed {closed:?} after its answer; the idle timeout is {IDLE_TIMEOUT_MS} ms"
    );
    let text = metrics(&server).await;
    assert!(metric(&text, "payhook_connections_idle_closed_total") >= 1, "{text}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_at_once_counted_and_logged_once() {
    const MAX_CONNECTIONS: usize = 100;
    raise_fd_limit(16_384);
    let dir = TestDir::new();
    let server = Server::start_edited(&dir, |c| {
        // Every connection from 127.0.0.1: the address may hold the whole cap, so that the cap is what refuses.
        with_server_keys(
            c,
            &format!(
                "max_connections = {MAX_CONNECTIONS}\nmax_connections_per_client = {MAX_CONNECTIONS}\n\
                 header_read_timeout_ms = 60000"
            ),
        )
    })
    .await;
    let addr = format!("127.0.0.1:{}", server.port);
    let fds_before = open_fds(server.pid());
    // The test's own client holds no connection now: the cap is all the attackers'.
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Give the accept loop time to take every one of them.
    let settle = Instant::now();
    while open_fds(server.pid()) < fds_before + MAX_CONNECTIONS && settle.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut extra = JoinSet::new();
    for _ in 0..(2 * MAX_CONNECTIONS) {
        let stream = TcpStream::connect(&addr).await.unwrap();
        extra.spawn(until_closed(stream, Duration::from_secs(2)));
    }
    let mut refused_at_once = 0;
    while let Some(r) = extra.join_next().await {
        if r.unwrap().0.is_some_and(|t| t < Duration::from_millis(500)) {
            refused_at_once += 1;
        }
    }
    assert_eq!(refused_at_once, 2 * MAX_CONNECTIONS, "connections beyond the cap are closed at once");
    assert!(open_fds(server.pid()) <= fds_before + MAX_CONNECTIONS + 8, "{} fds open", open_fds(server.pid()));
    drop(held);
    // The slots are free again: the operator's own request gets through and sees the count.
    let settle = Instant::now();
    let text = loop {
        match server.client.get(server.url("/metrics")).bearer_auth(API_TOKEN).send().await {
            Ok(r) if r.status() == StatusCode::OK => break r.text().await.unwrap(),
            _ if settle.elapsed() < Duration::from_secs(5) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("GET /metrics after the flood: {other:?}"),
        }
    };
    let refused = metric(&text, "payhook_connections_refused_total{reason=\"max_connections\"}");
    assert!(refused >= 2 * MAX_CONNECTIONS as u64, "{text}");
    assert_eq!(metric(&text, "payhook_connections_max"), MAX_CONNECTIONS as u64);
    let log = server.log();
    assert_eq!(log.matches("connections refused").count(), 1, "refusals are logged at most every 10 s:\n{log}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_100_half_sent_requests_exits_0_within_the_grace_period_and_loses_nothing() {
    const GRACE_MS: u64 = 3_000;
    let dir = TestDir::new();
    let mut server = Server::start_edited(&dir, |c| {
        with_server_keys(
            c,
            &format!("shutdown_grace_ms = {GRACE_MS}\nheader_read_timeout_ms = 60000\nbody_timeout_ms = 60000"),
        )
    })
    .await;
    let addr = format!("127.0.0.1:{}", server.port);
    // Some deliveries are acked before the signal: they must all be in the store afterwards.
    let mut acked = Vec::new();
    for i in 0..20 {
        let d = payment(&format!("evt-half-{i}"), &format!("half-{i}"));
        let (status, answer) = post(&server.client, &server.webhook_url(), &d).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        acked.push(d.event_id);
    }
    // 50 heads cut in the middle, and 50 complete heads of a signed delivery whose body stops half way.
    let mut half_sent = Vec::new();
    for i in 0..100 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 0 {
            stream.write_all(b"POST /webhooks/payments HTTP/1.1\r\nHost: payhook\r\nContent-Ty").await.unwrap();
        } else {
            let d = payment(&format!("evt-cut-{i}"), &format!("cut-{i}"));
            let mut head = format!(
                "POST /webhooks/payments HTTP/1.1\r\nHost: payhook\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                d.body.len()
            );
            for (name, value) in &d.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(&d.body[..d.body.len() / 2]).await.unwrap();
        }
        half_sent.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    server.terminate();
    let status = server.wait_exit(Duration::from_millis(GRACE_MS + 5_000));
    let took = signalled.elapsed();
    assert!(status.success(), "payhook serve exited with {status} after SIGTERM:\n{}", server.log());
    assert!(took <= Duration::from_millis(GRACE_MS + 2_000), "exit took {took:?} with a grace of {GRACE_MS} ms");
    // No half-sent request was answered 2xx: its delivery was never complete, so never recorded.
    for mut stream in half_sent {
        let mut received = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.read_to_end(&mut received)).await;
        let text = String::from_utf8_lossy(&received);
        assert!(!text.starts_with("HTTP/1.1 2"), "a half-sent request was answered {text}");
    }
    let checked = check_store(&dir, &acked).await;
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM inbox WHERE event_id LIKE 'evt-cut-%'"), 0, "{checked:?}");
}

/// A connection to `addr` from the loopback address `from`: Linux routes all of 127.0.0.0/8 to `lo`, so a socket
/// bound to 127.0.0.2 is another client of a server on 127.0.0.1.
async fn connect_from(from: std::net::Ipv4Addr, addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from((from, 0)))?;
    socket.connect(addr).await
}

/// A dashboard session: `POST /ui/login` with the API token, and the cookie it sets.
async fn dashboard_cookie(server: &Server) -> String {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let resp = client.post(server.url("/ui/login")).form(&[("token", API_TOKEN)]).send().await.expect("log in");
    let set_cookie = resp.headers().get("set-cookie").expect("a session cookie").to_str().unwrap().to_owned();
    set_cookie.split(';').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_on_every_route_holding_the_connection_cap_are_closed_in_time_and_deliveries_keep_flowing() {
    const BODY_TIMEOUT_MS: u64 = 2_000;
    const LEGIT: usize = 100;
    // The cap and as many slow bodies: the full-size scenario is 300 against 300.
    let n = if scale() > 1 { 300 } else { 40 };
    raise_fd_limit(16_384);
    let dir = TestDir::new();
    // max_connections_per_client is left to its default: half of max_connections.
    let server = Server::start_edited(&dir, |c| {
        with_server_keys(c, &format!("max_connections = {n}\nbody_timeout_ms = {BODY_TIMEOUT_MS}"))
    })
    .await;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", server.port).parse().unwrap();
    let cookie = dashboard_cookie(&server).await;
    let bearer = format!("Authorization: Bearer {API_TOKEN}\r\n");
    let form = "Content-Type: application/x-www-form-urlencoded\r\n".to_owned();
    let session = format!("{form}Cookie: {cookie}\r\n");
    // Every route that reads a body, with what it takes to get that far (the token, a session).
    let routes: Arc<Vec<(String, String)>> = Arc::new(vec![
        ("POST /webhooks/payments".into(), String::new()),
        ("POST /ui/login".into(), form.clone()),
        ("POST /v1/orders".into(), bearer.clone()),
        ("POST /v1/dead-letters/replay".into(), bearer.clone()),
        ("POST /v1/events/payments/evt_none/replay".into(), bearer.clone()),
        ("POST /v1/outbox/1/retry".into(), bearer.clone()),
        ("POST /v1/reload".into(), bearer.clone()),
        ("POST /ui/logout".into(), session.clone()),
        ("POST /ui/events/payments/evt_none/replay".into(), session.clone()),
        ("POST /ui/dead-letters/replay".into(), session.clone()),
        ("POST /ui/outbox/1/retry".into(), session.clone()),
    ]);

    // N sockets from 127.0.0.2, each sending a head and 10 of its 100 body bytes, round the routes, opening again
    // as soon as they are closed, for as long as the deliveries go on.
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = JoinSet::new();
    for i in 0..n {
        let (routes, stop) = (Arc::clone(&routes), Arc::clone(&stop));
        attackers.spawn(async move {
            let mut outcomes = Vec::new();
            let mut k = i;
            while !stop.load(Ordering::Relaxed) {
                let (route, headers) = &routes[k % routes.len()];
                k += 1;
                let Ok(mut stream) = connect_from(std::net::Ipv4Addr::new(127, 0, 0, 2), addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let head =
                    format!("{route} HTTP/1.1\r\nHost: payhook\r\n{headers}Content-Length: 100\r\n\r\ncsrf=abcde");
                let _ = stream.write_all(head.as_bytes()).await;
                let (closed, received) = until_closed(stream, Duration::from_millis(BODY_TIMEOUT_MS * 3)).await;
                let answered = String::from_utf8_lossy(&received).lines().next().unwrap_or("").to_owned();
                if received.is_empty() {
                    // Refused at once: try again a little later, as a flood does.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                outcomes.push((route.clone(), closed, answered));
            }
            outcomes
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Meanwhile the provider, from 127.0.0.1, delivers on connections of its own, each delivery retried on
    // refusal for up to 30 s.
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).pool_max_idle_per_host(0).build().unwrap();
    let mut legit = JoinSet::new();
    for i in 0..LEGIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (client, url) = (client.clone(), server.webhook_url());
        let d = payment(&format!("evt-slowbody-{i}"), &format!("slowbody-{i}"));
        legit.spawn(async move {
            let first = Instant::now();
            for attempt in 1.. {
                if let Ok((status, _)) = post(&client, &url, &d).await
                    && status.is_success()
                {
                    return Some((d.event_id, first.elapsed(), attempt));
                }
                if first.elapsed() >= Duration::from_secs(30) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            None
        });
    }
    let mut acked = Vec::new();
    let mut at_once = 0;
    while let Some(joined) = legit.join_next().await {
        if let Some((event_id, took, attempt)) = joined.unwrap()
            && took <= Duration::from_secs(30)
        {
            at_once += usize::from(attempt == 1);
            acked.push(event_id);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (mut held, mut refused) = (0u64, 0u64);
    while let Some(joined) = attackers.join_next().await {
        for (route, closed, answered) in joined.unwrap() {
            let closed = closed.unwrap_or_else(|| panic!("a slow body on {route} was still open after 6 s"));
            if answered.is_empty() {
                assert!(closed < Duration::from_millis(500), "{route}: refused only after {closed:?}");
                refused += 1;
                continue;
            }
            assert!(answered.starts_with("HTTP/1.1 408"), "{route}: answered {answered:?}");
            assert!(closed >= Duration::from_millis(BODY_TIMEOUT_MS - 50), "{route}: closed after {closed:?}");
            assert!(closed <= Duration::from_millis(BODY_TIMEOUT_MS + 1_500), "{route}: closed after {closed:?}");
            held += 1;
        }
    }
    eprintln!(
        "slow bodies: {n} sockets against max_connections {n}: {held} held and answered 408 at the deadline, \
         {refused} refused at once; {}/{LEGIT} deliveries acked within 30 s, {at_once} at their first attempt",
        acked.len()
    );
    assert!(acked.len() * 100 >= LEGIT * 95, "only {} of {LEGIT} deliveries acked within 30 s", acked.len());
    assert!(at_once * 100 >= LEGIT * 95, "only {at_once} of {LEGIT} deliveries acked at their first attempt");
    assert!(held >= n as u64 / 2 && refused > 0, "the attack did not hold its share: {held} held, {refused} refused");
    let text = metrics(&server).await;
    assert!(metric(&text, "payhook_connections_refused_total{reason=\"max_connections_per_client\"}") > 0, "{text}");
    assert_eq!(metric(&text, "payhook_connections_per_client_max"), n as u64 / 2, "the default: half the cap");
    assert!(metric(&text, "payhook_requests_timed_out_total{deadline=\"body\"}") >= held, "{text}");
    server.stop();
    check_store(&dir, &acked).await;
}
