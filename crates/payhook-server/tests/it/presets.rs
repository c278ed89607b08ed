//! Every provider preset end to end: its example deliveries (shaped like the provider's documented ones), signed
//! the way the provider signs, are processed; a redelivery is a duplicate; the second event delivered before the
//! payment still ends in the right ledger state; a delivery signed with another key is refused.

use crate::helpers::{API_TOKEN, TestApp, now_secs, read_json};
use payhook_core::billing::SubscriptionAction;
use payhook_core::event::{Effect, SourceName};
use payhook_core::format::{EffectSpec, ExampleSpec, ExampleVars, Format};
use payhook_core::preset::{Preset, test_secret};
use payhook_core::signature::{Scheme, Secret, Verifier};
use payhook_server::SourceSettings;
use payhook_server::settings::Orders;
use reqwest::StatusCode;
use serde_json::Value;

/// The scheme a preset's deliveries are signed with: its own rule.
fn scheme_of(preset: &Preset) -> Scheme {
    preset.scheme(None).expect("the rule compiles").unwrap_or_else(|| panic!("{}: no signature rule", preset.name))
}

fn source_of(preset: &Preset, secret: &str) -> SourceSettings {
    let format = preset.format().expect("the format compiles").expect("a format");
    SourceSettings {
        name: SourceName::parse(preset.name).expect("a preset's name is a source name"),
        verifier: Verifier::new(scheme_of(preset), &[Secret::new(secret)], 300).expect("the test key"),
        format,
        forward: Vec::new(),
        orders: Orders::Registered,
        confirm: None,
    }
}

/// One example delivery of a preset, rendered and signed.
struct Delivery {
    url: reqwest::Url,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

/// Renders `example` for `vars` and signs it with `source`'s secret (or `forger`'s) for `app`.
fn render(app: &TestApp, source: &SourceSettings, example: &ExampleSpec, vars: &ExampleVars) -> Delivery {
    let rendered = example.render(vars).expect("the example renders");
    let mut url = reqwest::Url::parse(&app.url(&format!("/webhooks/{}", source.name))).expect("a URL");
    url.set_query(rendered.query.as_deref());
    // The message id of a redelivery is the same: it is derived from the event id.
    let msg_id = format!("msg_{}", vars.event_id);
    let request =
        source.sign_request(url, rendered.body, rendered.headers, now_secs(), &msg_id).expect("the example signs");
    Delivery { url: request.url, body: request.body, headers: request.headers }
}

async fn post(app: &TestApp, delivery: &Delivery) -> (StatusCode, Value) {
    let mut req = app.client.post(delivery.url.clone()).body(delivery.body.clone());
    for (name, value) in &delivery.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let reply = read_json(req.send().await.expect("POST webhook")).await;
    (reply.status, reply.json)
}

/// What the preset's format makes of a delivery.
fn effect_of(source: &SourceSettings, delivery: &Delivery) -> Effect {
    let events = source.format.parse_delivery(&delivery.headers, &delivery.body).expect("the example parses");
    events[0].effect.clone()
}

/// The order state after `second` (a refund, dispute or failure) then the payment: the ledger's rules.
fn final_state(second: EffectSpec) -> &'static str {
    match second {
        EffectSpec::Refund => "refunded",
        EffectSpec::Dispute => "disputed",
        _ => "paid",
    }
}

async fn check_order_preset(preset: &Preset, format: &payhook_core::format::DeclaredFormat) {
    let name = preset.name;
    let secret = test_secret(preset.signature.as_ref().expect("a rule"));
    let source = source_of(preset, &secret);
    let app = TestApp::spawn_with(|settings, _| settings.sources.push(source_of(preset, &secret))).await;
    let pay = format.example_for(EffectSpec::Pay).unwrap_or_else(|| panic!("{name}: no pay example"));
    let (second_effect, second) = [EffectSpec::Refund, EffectSpec::Dispute, EffectSpec::Fail]
        .into_iter()
        .find_map(|e| format.example_for(e).map(|x| (e, x)))
        .unwrap_or_else(|| panic!("{name}: no refund, dispute or failure example"));
    let vars = |event_id: &str| ExampleVars::for_order(event_id, "ord_e2e_1", 1999, "eur", now_secs() - 5);
    let pay = render(&app, &source, pay, &vars("evt_pay_1"));
    let second = render(&app, &source, second, &vars("evt_second_1"));
    let Effect::Order { order_id, .. } = effect_of(&source, &pay) else { panic!("{name}: pay is not an order effect") };
    let (status, answer) = app.register_order(order_id.as_str(), 1999, "eur").await;
    assert_eq!(status, StatusCode::CREATED, "{name}: register {order_id}: {answer}");

    // The second event first, then the payment: both recorded, whatever the order.
    for delivery in [&second, &pay] {
        let (status, answer) = post(&app, delivery).await;
        assert_eq!(status, StatusCode::OK, "{name}: {answer}");
        let outcome = answer["status"].as_str().unwrap_or_default();
        assert!(["processed", "deferred", "ignored"].contains(&outcome), "{name}: {answer}");
    }
    // The provider's redeliveries of the same bytes.
    for delivery in [&second, &pay] {
        let (status, answer) = post(&app, delivery).await;
        assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{name}: {answer}");
    }
    app.running.worker.run_until_idle(app.clock.now_ms() + 3_600_000).await.expect("the worker");
    let order = app.order(order_id.as_str()).await;
    assert_eq!(order["status"], final_state(second_effect), "{name}: {order}");
    // A payment applied once is one receipt; a refund that came first leaves the later payment nothing to apply.
    let receipts = usize::from(final_state(second_effect) == "paid");
    assert_eq!(app.receipts(order_id.as_str()).await, receipts, "{name}: receipts");

    // In order, on another order: the payment is processed, checked against the registered amount, and paid once.
    let paid = ExampleVars::for_order("evt_pay_2", "ord_e2e_2", 1999, "eur", now_secs() - 5);
    let paid = render(&app, &source, format.example_for(EffectSpec::Pay).expect("pay"), &paid);
    let Effect::Order { order_id, .. } = effect_of(&source, &paid) else {
        panic!("{name}: pay is not an order effect")
    };
    app.register_order(order_id.as_str(), 1999, "eur").await;
    let (status, answer) = post(&app, &paid).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{name}: {answer}");
    assert_eq!(app.order(order_id.as_str()).await["status"], "paid", "{name}");
    assert_eq!(app.receipts(order_id.as_str()).await, 1, "{name}: one receipt for one payment");

    // A delivery signed with another key is refused, and nothing is stored.
    let forger = source_of(preset, &format!("{secret}-forged"));
    let forged = render(&app, &forger, format.example_for(EffectSpec::Pay).expect("pay"), &vars("evt_forged_1"));
    let inbox = app.inbox_rows().await;
    let (status, answer) = post(&app, &forged).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("mismatch")), "{name}: {answer}");
    assert_eq!(app.inbox_rows().await, inbox, "{name}: a refused delivery is not stored");
}

async fn check_subscription_preset(preset: &Preset, format: &payhook_core::format::DeclaredFormat) {
    let name = preset.name;
    let secret = test_secret(preset.signature.as_ref().expect("a rule"));
    let source = source_of(preset, &secret);
    let app = TestApp::spawn_with(|settings, _| settings.sources.push(source_of(preset, &secret))).await;
    let created = format.example_for(EffectSpec::SubscriptionCreated).expect("a created example");
    let deleted = format.example_for(EffectSpec::SubscriptionDeleted).expect("a deleted example");
    let at = now_secs() - 600;
    let created = render(&app, &source, created, &ExampleVars::for_order("evt_c", "ord_s", 1999, "usd", at));
    let deleted = render(&app, &source, deleted, &ExampleVars::for_order("evt_d", "ord_s", 1999, "usd", at + 60));
    let Effect::Subscription(change) = effect_of(&source, &deleted) else { panic!("{name}: not a subscription") };
    assert_eq!(change.action, SubscriptionAction::Deleted, "{name}");
    // The end first, then the start, each twice.
    for delivery in [&deleted, &created] {
        let (status, answer) = post(&app, delivery).await;
        assert_eq!(status, StatusCode::OK, "{name}: {answer}");
    }
    for delivery in [&deleted, &created] {
        let (status, answer) = post(&app, delivery).await;
        assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{name}: {answer}");
    }
    app.running.worker.run_until_idle(app.clock.now_ms() + 3_600_000).await.expect("the worker");
    let path = format!("/v1/subscriptions/{}", change.subscription_id);
    let reply = read_json(app.client.get(app.url(&path)).bearer_auth(API_TOKEN).send().await.expect("GET")).await;
    assert_eq!(reply.status, StatusCode::OK, "{name}: {}", reply.json);
    let status = reply.json["status"].as_str().unwrap_or_default().to_owned();
    assert!(
        payhook_core::billing::SubscriptionStatus::parse(&status).expect("a status").is_ended(),
        "{name}: {}",
        reply.json
    );

    let forger = source_of(preset, &format!("{secret}-forged"));
    let forged = render(
        &app,
        &forger,
        format.example_for(EffectSpec::SubscriptionCreated).expect("created"),
        &ExampleVars::for_order("evt_f", "ord_s", 1, "usd", at),
    );
    let (status, _) = post(&app, &forged).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}");
}

/// Runs the end-to-end check of the preset `name`.
async fn check(name: &str) {
    let preset = Preset::get(name).unwrap_or_else(|| panic!("no preset {name}")).expect("parses");
    let Some(Format::Declared(format)) = preset.format().expect("compiles") else { panic!("{name}: no format") };
    if format.example_for(EffectSpec::Pay).is_some() {
        check_order_preset(&preset, &format).await;
    } else {
        check_subscription_preset(&preset, &format).await;
    }
}

macro_rules! end_to_end {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                check($name).await;
            }
        )*

        /// The presets checked here: every preset with a signature rule and a format, but those confirmed from the
/// provider's API (Mercado Pago), whose end-to-end tests against a local API are in `forgeries.rs`.
        const CHECKED: &[&str] = &[$($name),*];
    };
}

end_to_end! {
    checkout => "checkout",
    coinbase_commerce => "coinbase-commerce",
    flutterwave => "flutterwave",
    github_marketplace_and_sponsors => "github",
    gocardless => "gocardless",
    lemon_squeezy => "lemon-squeezy",
    mollie => "mollie",
    paddle_billing => "paddle",
    polar => "polar",
    razorpay => "razorpay",
    square => "square",
}

#[test]
fn every_preset_with_a_rule_and_a_format_is_checked_end_to_end() {
    let expected: Vec<&str> = Preset::names()
        .filter(|n| {
            let preset = Preset::get(n).expect("listed").expect("parses");
            preset.signature.is_some() && preset.format.is_some() && preset.confirm.is_none()
        })
        .collect();
    assert_eq!(CHECKED, expected.as_slice());
}
