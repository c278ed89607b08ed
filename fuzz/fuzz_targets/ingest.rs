//! The whole ingest path, one request per input: the axum router of a running payhook over a temporary SQLite
//! store, with one source per signature scheme. Half the inputs are signed with the source's secret (and some
//! carry a well-formed provider event), so the fuzzer reaches parsing, deduplication, the ledger and the store.
//!
//! Whatever the request: no 500, a JSON answer from `/webhooks` and `/v1` (Adyen's `[accepted]` aside), and no 2xx for a delivery that was not signed with the
//! source's secret. The store is replaced every `RESET_EVERY` inputs so a long run does not fill the disk.

#![no_main]

use arbitrary::Arbitrary;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue, Method, Request};
use libfuzzer_sys::fuzz_target;
use payhook_core::event::{OrderAction, SourceName};
use payhook_core::format::{Format, Outgoing};
use payhook_core::signature::{Encoding, HmacAlgorithm, RequestParts, Scheme, Secret, Verifier};
use payhook_server::{Running, Settings, SourceSettings};
use payhook_sqlite::{SqliteOptions, SqliteStore};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use tower::ServiceExt;

const RESET_EVERY: u32 = 20_000;

/// (name, scheme, secret, format) of each source.
fn sources() -> Vec<(&'static str, Scheme, &'static str, Format)> {
    vec![
        (
            "payments",
            Scheme::Hmac {
                header: "x-webhook-signature".into(),
                algorithm: HmacAlgorithm::Sha256,
                encoding: Encoding::Hex,
                prefix: None,
            },
            "payments-secret",
            Format::Generic,
        ),
        ("stripe", Scheme::Stripe, "whsec_stripe_fuzz", Format::Stripe),
        ("standard", Scheme::StandardWebhooks, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Format::Generic),
        ("paystack", Scheme::Paystack, "sk_test_paystack", Format::Paystack),
        ("shopify", Scheme::Shopify, "shpss_fuzz", Format::Shopify),
        ("adyen", Scheme::Adyen, "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00", Format::Adyen),
        ("github", Scheme::Github, "github-secret", Format::Generic),
        (
            "signed",
            Scheme::HttpMessageSignatures,
            "hmac-sha256:fuzz:c2VjcmV0LWtleS1vZi10aGUtcHJvdmlkZXItMDEyMzQ1Njc4OQ==",
            Format::Generic,
        ),
    ]
}

const NAMES: &[&str] = &[
    "content-type",
    "stripe-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-webhook-signature",
    "x-hub-signature-256",
    "x-paystack-signature",
    "x-shopify-hmac-sha256",
    "x-shopify-topic",
    "x-shopify-webhook-id",
    "signature",
    "signature-input",
    "content-digest",
    "x-forwarded-for",
    "authorization",
];

#[derive(Arbitrary, Debug)]
struct Input {
    source: u8,
    /// Another path instead of a source's.
    path: Option<String>,
    sign: bool,
    /// A provider event to encode as the body instead of `body`: action, event id, order id, amount.
    event: Option<(u8, String, String, i64)>,
    headers: Vec<(u8, String)>,
    body: Vec<u8>,
}

struct App {
    runtime: tokio::runtime::Runtime,
    running: Option<Running<SqliteStore>>,
    store: Option<Arc<SqliteStore>>,
    settings: Vec<SourceSettings>,
    served: u32,
    _dir: Option<tempfile::TempDir>,
}

impl App {
    fn new() -> App {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let settings = sources()
            .into_iter()
            .map(|(name, scheme, secret, format)| SourceSettings {
                name: SourceName::parse(name).expect("name"),
                verifier: Verifier::new(scheme, &[Secret::new(secret)], 300).expect("secret"),
                format,
                forward: Vec::new(),
                orders: payhook_server::settings::Orders::Registered,
                confirm: None,
            })
            .collect();
        let mut app = App { runtime, running: None, store: None, settings, served: 0, _dir: None };
        app.reset();
        app
    }

    /// A fresh store and server (the previous ones shut down).
    fn reset(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = self.runtime.block_on(running.shutdown());
        }
        if let Some(store) = self.store.take() {
            self.runtime.block_on(store.shutdown());
        }
        // tmpfs when there is one: fsync costs nothing there, and the fuzzer runs many inputs a second.
        let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).expect("temp dir");
        let mut settings = Settings::new(self.settings.clone());
        settings.api_token = Some(Secret::new("fuzz-api-token-0123456789abcdef"));
        settings.worker.enabled = false;
        settings.dispatcher.enabled = false;
        settings.retention.enabled = false;
        let mut options = SqliteOptions::new(dir.path().join("fuzz.db"));
        options.routing = settings.routing();
        let store = Arc::new(SqliteStore::open(options).expect("open the store"));
        let running = self.runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            payhook_server::start(listener, settings, Arc::clone(&store)).expect("start")
        });
        self.running = Some(running);
        self.store = Some(store);
        self._dir = Some(dir);
        self.served = 0;
    }

    fn handle(&mut self, input: Input) {
        self.served += 1;
        if self.served > RESET_EVERY {
            self.reset();
        }
        let source = &self.settings[usize::from(input.source) % self.settings.len()];
        let path = match &input.path {
            Some(p) => format!("/{}", p.trim_start_matches('/')),
            None => format!("/webhooks/{}", source.name.as_str()),
        };
        let now = payhook_server::now_ms() / 1000;
        let mut body = input.body.clone();
        if let Some((action, event_id, order_id, amount)) = &input.event {
            let action = OrderAction::ALL[usize::from(*action) % OrderAction::ALL.len()];
            let e = Outgoing { event_id, action, order_id, amount_minor: *amount, currency: "usd", created: now };
            if source.format.encodes(action) {
                body = source.format.encode(&e);
            }
        }
        let mut headers: Vec<(String, String)> =
            input.headers.iter().map(|(n, v)| (NAMES[usize::from(*n) % NAMES.len()].to_owned(), v.clone())).collect();
        let mut signed = false;
        if input.sign {
            let made: Vec<(String, String)> = match source.verifier.scheme() {
                Scheme::Adyen => match source.verifier.adyen_sign_body(&body) {
                    Ok(b) => {
                        body = b;
                        signed = true;
                        Vec::new()
                    }
                    Err(_) => Vec::new(),
                },
                Scheme::HttpMessageSignatures => {
                    let pairs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    let parts = RequestParts {
                        method: "POST",
                        scheme: "http",
                        authority: "payhook.fuzz",
                        path: &path,
                        query: None,
                        headers: &pairs,
                    };
                    source.verifier.sign_request(&parts, &body, now, None)
                }
                _ => source.verifier.sign(&body, now, "msg_fuzz"),
            };
            signed |= !made.is_empty();
            headers = made.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).chain(headers).collect();
        }
        let mut request = Request::builder().method(Method::POST).uri(&path);
        if let Ok(p) = path.parse::<axum::http::Uri>() {
            request = request.uri(p);
        } else {
            return;
        }
        let mut request = match request.header("host", "payhook.fuzz").body(Body::from(body)) {
            Ok(r) => r,
            Err(_) => return,
        };
        for (name, value) in &headers {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) {
                request.headers_mut().append(n, v);
            }
        }
        request.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
        let state = Arc::clone(&self.running.as_ref().expect("running").state);
        let (status, bytes) = self.runtime.block_on(async move {
            let response = payhook_server::router(state).oneshot(request).await.expect("infallible");
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("answer body");
            (status, bytes)
        });
        assert_ne!(status.as_u16(), 500, "500 for {path}: {}", String::from_utf8_lossy(&bytes));
        if status.is_success() && path == "/webhooks/adyen" {
            // Adyen's integration contract: its notifications are acknowledged with this exact body.
            assert_eq!(&bytes[..], b"[accepted]", "Adyen's acknowledgement");
        } else if path.starts_with("/webhooks/") || path.starts_with("/v1/") {
            let json: Result<serde_json::Value, _> = serde_json::from_slice(&bytes);
            assert!(json.is_ok(), "{status} for {path} is not JSON: {}", String::from_utf8_lossy(&bytes));
        }
        let to_source = input.path.is_none();
        assert!(
            !(status.is_success() && to_source && !signed),
            "{status}: an unsigned delivery to {path} was accepted: {}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

thread_local! {
    static APP: RefCell<Option<App>> = const { RefCell::new(None) };
}

fuzz_target!(|input: Input| {
    APP.with(|app| app.borrow_mut().get_or_insert_with(App::new).handle(input));
});
