//! The forgery matrix: a field that decides an effect (the event's type, its order, amount, currency, status, the
//! subscription or invoice it changes) comes from signed bytes or is checked against them.
//!
//! The matrix is generated: every built-in signature scheme with the built-in format it is used with (the format
//! of its name, else the generic one), and every preset (its rule with its format, or with the built-in format of
//! its name). Each entry gets a pool of valid signed deliveries — every action `Format::encode` writes, or every
//! example the preset ships — for two orders (`ord_7`, 500 USD and `ord_8`, 900 EUR, each delivery with its own
//! event id), so that a new preset is covered by adding its file. Each delivery is verified at a fixed clock and
//! parsed; then one part at a time is changed: every header (the signature's, its id and timestamp included),
//! every query parameter, and, where the rule leaves the body or part of it unsigned (a declared
//! `unsigned_body`, a `shared-secret` rule, Adyen's per-item signatures, Braintree's form), every JSON leaf or
//! form field. A part takes the value it has in each other delivery of the pool (another example, order or
//! action: "resend with another event's topic header", "another order's `external_reference`"), a junk value, or
//! is removed; a part that names the event type also takes every type the format knows; headers, parameters and
//! leaves that other deliveries carry and this one lacks are added.
//!
//! Each change must be refused (401), leave a body the format cannot read (a dead letter, no effect), make every
//! event ignored, or leave every event with the type and effect of one of the original's: the same order,
//! action, amount and currency; for a subscription or an invoice the same change (id, status, customer, period)
//! at the same time. The event id and the business key may change: they are dedup keys, not effects, and a
//! resend under another id still meets the ledger's state machine (an order is paid once, whatever the event
//! id) and the business key of the signed body.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::event::{Effect, Event, OrderAction};
use payhook_verify::format::{ExampleVars, Format, Outgoing};
use payhook_verify::preset::{Preset, test_secret};
use payhook_verify::signature::{
    Algorithm, Encoding, Headers, HmacAlgorithm, RequestContext, RequestParts, Scheme, Secret, SignatureSpec, Verifier,
};
use serde_json::Value;

/// The verifier's clock; every delivery is signed at it.
const NOW: i64 = 1_764_000_100;
/// The host deliveries are sent to.
const AUTHORITY: &str = "merchant.example";
/// What a part is changed to when it takes no other delivery's value.
const JUNK: &str = "forged-0";
/// The most values listed for one failing part.
const VALUES_SHOWN: usize = 12;
/// The most lines of the failure list the assertion prints (every failing entry and part is counted below it).
const SHOWN: usize = 40;

/// An order the pool's deliveries are about.
struct Order {
    id: &'static str,
    amount_minor: i64,
    currency: &'static str,
    created: i64,
}

/// Two orders with different amounts, currencies and times: the alternative values a forger would reach for.
const ORDERS: [Order; 2] = [
    Order { id: "ord_7", amount_minor: 500, currency: "usd", created: 1_764_000_000 },
    Order { id: "ord_8", amount_minor: 900, currency: "eur", created: 1_764_000_040 },
];

/// Where the signature lives, so how a delivery is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signing {
    /// Headers computed from the body (and the URL and other headers, for a declared rule).
    Headers,
    /// RFC 9421: headers computed from the request line, headers and body.
    Request,
    /// Adyen: inside each notification item.
    AdyenBody,
    /// Braintree: a form field next to the payload.
    BraintreeBody,
}

/// Which parts of the body a forger may change and still be verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyParts {
    /// The whole body is signed: only headers and query parameters are changed.
    Signed,
    /// JSON leaves (an unsigned body, or Adyen's, signed field by field).
    Json,
    /// Form fields (Braintree's `bt_payload` and `bt_signature`).
    Form,
}

/// A delivery of the pool before signing.
#[derive(Debug, Clone)]
struct Draft {
    /// The example or action and the order, for reports.
    label: String,
    /// The delivery id a scheme signs or sends (`webhook-id`, `X-GitHub-Delivery`, …).
    msg_id: String,
    headers: Vec<(String, String)>,
    query: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A delivery as it reaches payhook.
#[derive(Debug, Clone)]
struct Delivery {
    label: String,
    headers: Vec<(String, String)>,
    query: Vec<(String, String)>,
    body: Vec<u8>,
}

/// One scheme and format under test, with its pool.
#[derive(Debug)]
struct Entry {
    name: String,
    path: String,
    verifier: Verifier,
    signing: Signing,
    format: Format,
    body_parts: BodyParts,
    drafts: Vec<Draft>,
}

/// What payhook makes of a delivery.
#[derive(Debug)]
enum Outcome {
    /// Answered 401, nothing stored; the verifier's reason.
    Refused(&'static str),
    /// Verified, unreadable: a dead letter without effect.
    DeadLetter(String),
    /// Verified and read.
    Events(Vec<Event>),
}

/// One change that moved an effect (or a delivery of the pool that is not valid to begin with).
#[derive(Debug)]
struct Failure {
    entry: String,
    delivery: String,
    part: String,
    change: String,
    got: String,
    was: String,
}

/// What one entry checked.
#[derive(Debug, Default)]
struct Counts {
    deliveries: usize,
    mutations: usize,
    refused: usize,
    dead: usize,
    ignored: usize,
    same: usize,
    moved: usize,
}

/// A request as the verifier sees it: its headers and its request line (the derived components of RFC 9421, the
/// URL and query parameters of a declared rule), as `payhook-server`'s `HttpHeaders` gives them.
struct Request<'a> {
    headers: &'a [(String, String)],
    path: &'a str,
    query: Option<String>,
}

impl Headers for Request<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        <[(String, String)] as Headers>::get(self.headers, name)
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let query = self.query.as_deref().map(|q| format!("?{q}")).unwrap_or_default();
        Some(match component {
            "@method" => Cow::Borrowed("POST"),
            "@authority" => Cow::Borrowed(AUTHORITY),
            "@scheme" => Cow::Borrowed("https"),
            "@path" => Cow::Borrowed(self.path),
            "@query" => Cow::Owned(if query.is_empty() { "?".to_owned() } else { query }),
            "@target-uri" => Cow::Owned(format!("https://{AUTHORITY}{}{query}", self.path)),
            "@request-target" => Cow::Owned(format!("{}{query}", self.path)),
            _ => return None,
        })
    }
}

/// The query string of `pairs`, form-encoded, or `None` without parameters.
fn query_string(pairs: &[(String, String)]) -> Option<String> {
    (!pairs.is_empty()).then(|| form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish())
}

fn pairs_of(text: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(text).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

impl Entry {
    fn url(&self, query: &[(String, String)]) -> String {
        match query_string(query) {
            Some(q) => format!("https://{AUTHORITY}{}?{q}", self.path),
            None => format!("https://{AUTHORITY}{}", self.path),
        }
    }

    /// `draft` signed as its provider would send it.
    fn sign(&self, draft: &Draft) -> Result<Delivery, String> {
        let mut headers = draft.headers.clone();
        let mut body = draft.body.clone();
        match self.signing {
            Signing::Headers => {
                let url = self.url(&draft.query);
                let context = RequestContext { url: Some(&url), headers: &draft.headers };
                headers.extend(self.verifier.sign_with(&draft.body, NOW, &draft.msg_id, &context));
            }
            Signing::Request => {
                let query = query_string(&draft.query);
                let borrowed: Vec<(&str, &str)> = draft.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let parts = RequestParts {
                    method: "POST",
                    scheme: "https",
                    authority: AUTHORITY,
                    path: &self.path,
                    query: query.as_deref(),
                    headers: &borrowed,
                };
                headers.extend(self.verifier.sign_request(&parts, &draft.body, NOW, None));
            }
            Signing::AdyenBody => body = self.verifier.adyen_sign_body(&draft.body).map_err(|e| e.to_string())?,
            Signing::BraintreeBody => {
                body = self.verifier.braintree_sign_body(&draft.body).map_err(|e| e.to_string())?;
            }
        }
        Ok(Delivery { label: draft.label.clone(), headers, query: draft.query.clone(), body })
    }

    /// Verifies `d` at [`NOW`] and, when it verifies, reads it, as `payhook-server`'s ingest does.
    fn outcome(&self, d: &Delivery) -> Outcome {
        let request = Request { headers: &d.headers, path: &self.path, query: query_string(&d.query) };
        if let Err(e) = self.verifier.verify(&request, &d.body, NOW) {
            return Outcome::Refused(e.code());
        }
        match self.format.parse_delivery(&request, &d.body) {
            Ok(events) => Outcome::Events(events),
            Err(e) => Outcome::DeadLetter(e.to_string()),
        }
    }

    /// The event types the format knows: a forger's candidates for any part that names one.
    fn known_types(&self) -> BTreeSet<String> {
        let listed: &[&str] = match &self.format {
            Format::Declared(d) => return d.mapped().map(|(t, _)| t.to_owned()).collect(),
            // The types each built-in format's module documentation lists.
            Format::Generic => &[
                "payment.succeeded",
                "payment.failed",
                "payment.refunded",
                "payment.disputed",
                "subscription.created",
                "subscription.updated",
                "subscription.deleted",
                "invoice.paid",
                "invoice.payment_failed",
                "invoice.refunded",
            ],
            Format::Stripe => &[
                "payment_intent.succeeded",
                "payment_intent.payment_failed",
                "charge.refunded",
                "charge.dispute.created",
                "checkout.session.completed",
                "customer.subscription.created",
                "customer.subscription.updated",
                "customer.subscription.deleted",
                "invoice.paid",
                "invoice.payment_succeeded",
                "invoice.payment_failed",
            ],
            Format::Paystack => &[
                "charge.success",
                "refund.processed",
                "charge.dispute.create",
                "subscription.create",
                "subscription.not_renew",
                "subscription.disable",
                "invoice.update",
                "invoice.payment_failed",
            ],
            Format::Shopify => &["orders/paid", "orders/cancelled", "refunds/create", "disputes/create"],
            Format::Adyen => &["AUTHORISATION", "REFUND", "CHARGEBACK"],
            Format::Braintree => &[
                "transaction_settled",
                "transaction_disbursed",
                "transaction_settlement_declined",
                "dispute_opened",
                "subscription_charged_successfully",
                "subscription_charged_unsuccessfully",
                "subscription_canceled",
                "subscription_expired",
                "subscription_went_active",
                "subscription_went_past_due",
            ],
        };
        listed.iter().map(|t| (*t).to_owned()).collect()
    }

    /// Builds the pool, changes every delivery one part at a time, and records what moved an effect.
    fn check(&self, failures: &mut Vec<Failure>) -> Counts {
        let mut counts = Counts::default();
        let fail = |delivery: &str, part: &str, change: &str, got: String, was: String| Failure {
            entry: self.name.clone(),
            delivery: delivery.to_owned(),
            part: part.to_owned(),
            change: change.to_owned(),
            got,
            was,
        };
        // The pool: every draft signed; each must verify and be read, or the matrix has nothing to stand on.
        let mut pool: Vec<(Delivery, Vec<Event>)> = Vec::new();
        for draft in &self.drafts {
            let valid = "a valid delivery".to_owned();
            match self.sign(draft).map(|signed| (self.outcome(&signed), signed)) {
                Ok((Outcome::Events(events), signed)) => pool.push((signed, events)),
                Ok((Outcome::Refused(reason), _)) => {
                    failures.push(fail(&draft.label, "(the delivery)", "none", format!("refused: {reason}"), valid));
                }
                Ok((Outcome::DeadLetter(reason), _)) => {
                    failures.push(fail(
                        &draft.label,
                        "(the delivery)",
                        "none",
                        format!("dead letter: {reason}"),
                        valid,
                    ));
                }
                Err(e) => failures.push(fail(&draft.label, "(the delivery)", "none", format!("unsigned: {e}"), valid)),
            }
        }
        counts.deliveries = pool.len();
        let deliveries: Vec<Delivery> = pool.iter().map(|(d, _)| d.clone()).collect();
        let mut types = self.known_types();
        types.extend(pool.iter().flat_map(|(_, events)| events.iter().map(|e| e.event_type.clone())));
        for (d, original) in &pool {
            // The pool includes `d`: a part never takes its own value, and `d` adds nothing it lacks.
            let types = Types { known: &types, own: original.iter().map(|e| e.event_type.as_str()).collect() };
            changes(self, &deliveries, d, &types, &mut |change: Change| {
                counts.mutations += 1;
                match self.outcome(&change.delivery) {
                    Outcome::Refused(_) => counts.refused += 1,
                    Outcome::DeadLetter(_) => counts.dead += 1,
                    Outcome::Events(events) if events.iter().all(|e| e.effect == Effect::Ignored) => {
                        counts.ignored += 1;
                    }
                    Outcome::Events(events) => {
                        let moved = events
                            .iter()
                            .any(|m| m.effect != Effect::Ignored && !original.iter().any(|o| same_fact(o, m)));
                        if moved {
                            counts.moved += 1;
                            let (got, was) = (describe(&events), describe(original));
                            failures.push(fail(&d.label, &change.part, &change.change, got, was));
                        } else {
                            counts.same += 1;
                        }
                    }
                }
            });
        }
        // No entry passes for want of deliveries: every draft is in the pool (two orders at least), and each
        // delivery had parts changed (its content type and signature at least, or its body).
        let expected = self.drafts.len().max(ORDERS.len());
        if counts.deliveries < expected || counts.mutations < 3 * expected {
            let got = format!("{} deliveries, {} changes", counts.deliveries, counts.mutations);
            let was = format!("{expected} deliveries and {} changes at least", 3 * expected);
            failures.push(fail("(all)", "(coverage)", "none", got, was));
        }
        counts
    }
}

/// The deliveries `format` encodes for every action it has an event for, for both orders.
fn encoded_drafts(format: &Format) -> Vec<Draft> {
    let content_type = match format {
        Format::Braintree => "application/x-www-form-urlencoded",
        _ => "application/json",
    };
    let mut drafts = Vec::new();
    for order in &ORDERS {
        for action in OrderAction::ALL.into_iter().filter(|a| format.encodes(*a)) {
            let name = format!("{action:?}").to_ascii_lowercase();
            let event_id = format!("evt_{}_{name}", order.id);
            let out = Outgoing {
                event_id: &event_id,
                action,
                order_id: order.id,
                amount_minor: order.amount_minor,
                currency: order.currency,
                created: order.created,
            };
            let mut headers = owned(&[("content-type", content_type)]);
            headers.extend(format.encode_headers(&out));
            drafts.push(Draft {
                label: format!("{name} {}", order.id),
                msg_id: format!("msg_{}_{name}", order.id),
                headers,
                query: Vec::new(),
                body: format.encode(&out),
            });
        }
    }
    drafts
}

/// The preset's examples rendered for both orders; one that does not render is a failure of the matrix.
fn example_drafts(preset: &Preset, failures: &mut Vec<Failure>, entry: &str) -> Vec<Draft> {
    let mut drafts = Vec::new();
    for order in &ORDERS {
        for (i, example) in preset.examples.iter().enumerate() {
            let event_id = format!("evt_{}_{i}", order.id);
            let vars = ExampleVars::for_order(&event_id, order.id, order.amount_minor, order.currency, order.created);
            let label = format!("{} {}", example.event, order.id);
            match example.render(&vars) {
                Ok(rendered) => {
                    let mut headers = owned(&[("content-type", "application/json")]);
                    headers.extend(rendered.headers);
                    drafts.push(Draft {
                        label,
                        msg_id: format!("msg_{}_{i}", order.id),
                        headers,
                        query: rendered.query.map(|q| pairs_of(q.as_bytes())).unwrap_or_default(),
                        body: rendered.body,
                    });
                }
                Err(e) => failures.push(Failure {
                    entry: entry.to_owned(),
                    delivery: label,
                    part: "(the example)".into(),
                    change: "none".into(),
                    got: format!("does not render: {e}"),
                    was: "a delivery".into(),
                }),
            }
        }
    }
    drafts
}

fn verifier(scheme: Scheme, secret: &str) -> Verifier {
    Verifier::new(scheme, &[Secret::new(secret)], 300).unwrap_or_else(|e| panic!("the matrix's test secret: {e}"))
}

/// A body-only HMAC, for a preset that describes a format only (it is signed with a built-in scheme).
fn body_hmac() -> Scheme {
    Scheme::Hmac {
        header: "x-signature".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: Some("sha256=".into()),
    }
}

/// A declared rule signs the body when it covers `{body}` and is a signature (a shared secret proves nothing of
/// the body); otherwise, at most some JSON fields (`{json:/pointer}`) are signed and the verifier says which.
fn declared_body_parts(spec: &SignatureSpec) -> BodyParts {
    let signed = !spec.unsigned_body && spec.algorithm != Algorithm::SharedSecret && spec.signed.contains("{body}");
    if signed { BodyParts::Signed } else { BodyParts::Json }
}

/// The built-in schemes, each once.
fn built_in_schemes() -> [Scheme; 9] {
    [
        Scheme::Stripe,
        Scheme::StandardWebhooks,
        Scheme::Github,
        Scheme::Paystack,
        Scheme::Shopify,
        Scheme::Adyen,
        Scheme::Braintree,
        Scheme::HttpMessageSignatures,
        body_hmac(),
    ]
}

/// A secret in the form `scheme` decodes, and how its signature travels and what of the body it leaves unsigned.
/// Exhaustive on purpose: a new scheme does not compile here until the matrix knows how to sign with it (and
/// [`built_in_schemes`] lists it).
fn setup_of(scheme: &Scheme) -> (String, Signing, BodyParts) {
    let key = b"payhook-forgery-matrix-key";
    match scheme {
        Scheme::Stripe => ("whsec_payhook-forgery-matrix".into(), Signing::Headers, BodyParts::Signed),
        Scheme::StandardWebhooks => (format!("whsec_{}", STANDARD.encode(key)), Signing::Headers, BodyParts::Signed),
        Scheme::Github | Scheme::Paystack | Scheme::Shopify | Scheme::Hmac { .. } => {
            ("forgery-matrix-secret".into(), Signing::Headers, BodyParts::Signed)
        }
        // The signature is inside each item; the item's other fields are not signed.
        Scheme::Adyen => (hex::encode(key), Signing::AdyenBody, BodyParts::Json),
        // The signature is a form field next to the payload it covers.
        Scheme::Braintree => ("forgery_public:forgery_private".into(), Signing::BraintreeBody, BodyParts::Form),
        // The body is bound by its signed `Content-Digest`.
        Scheme::HttpMessageSignatures => {
            (format!("hmac-sha256:k1:{}", STANDARD.encode(key)), Signing::Request, BodyParts::Signed)
        }
        Scheme::Declared(d) => {
            let spec = d.spec();
            (test_secret(spec), Signing::Headers, declared_body_parts(spec))
        }
    }
}

/// Every built-in scheme with the built-in format it is used with: the format of its name, else the generic one.
fn built_in_entries() -> Vec<Entry> {
    built_in_schemes()
        .into_iter()
        .map(|scheme| {
            let format = Format::built_in(scheme.name()).unwrap_or(Format::Generic);
            let (secret, signing, body_parts) = setup_of(&scheme);
            Entry {
                name: format!("scheme {} + format {}", scheme.name(), format.name()),
                path: format!("/webhooks/{}", scheme.name()),
                signing,
                body_parts,
                drafts: encoded_drafts(&format),
                verifier: verifier(scheme, &secret),
                format,
            }
        })
        .collect()
}

/// Every preset: its rule (or a body HMAC for a format-only preset), its format (or the built-in format of its
/// name, else the generic one), its examples (or, without examples, what its format encodes).
fn preset_entries(failures: &mut Vec<Failure>) -> Vec<Entry> {
    let mut entries = Vec::new();
    for name in Preset::names() {
        let preset = Preset::get(name).expect("a listed preset").unwrap_or_else(|e| panic!("{e}"));
        let scheme = preset.scheme(None).unwrap_or_else(|e| panic!("{e}"));
        let format = preset.format().unwrap_or_else(|e| panic!("{e}"));
        let format = format.unwrap_or_else(|| Format::built_in(name).unwrap_or(Format::Generic));
        let entry = format!("preset {name} (format {})", format.name());
        let scheme = scheme.unwrap_or_else(body_hmac);
        let (secret, signing, body_parts) = setup_of(&scheme);
        let drafts = if preset.examples.is_empty() {
            encoded_drafts(&format)
        } else {
            example_drafts(&preset, failures, &entry)
        };
        entries.push(Entry {
            name: entry,
            path: format!("/webhooks/{name}"),
            signing,
            verifier: verifier(scheme, &secret),
            format,
            body_parts,
            drafts,
        });
    }
    entries
}

/// A short account of events, for reports.
fn describe(events: &[Event]) -> String {
    let facts: Vec<String> = events
        .iter()
        .map(|e| match &e.effect {
            Effect::Order { order_id, action, money } => {
                let money =
                    money.as_ref().map_or("no money".to_owned(), |m| format!("{} {}", m.amount_minor, m.currency));
                format!("{}: {action:?} {} ({money})", e.event_type, order_id.as_str())
            }
            Effect::Subscription(change) => format!("{}: {change:?} at {}", e.event_type, e.occurred_at),
            Effect::Invoice(change) => format!("{}: {change:?} at {}", e.event_type, e.occurred_at),
            Effect::Ignored => format!("{}: ignored", e.event_type),
        })
        .collect();
    facts.join("; ")
}

/// Whether `changed` asks the same of the ledger as `original`: same type and effect (and, for billing effects,
/// whose order is their time, the same time).
fn same_fact(original: &Event, changed: &Event) -> bool {
    original.event_type == changed.event_type
        && original.effect == changed.effect
        && (matches!(changed.effect, Effect::Order { .. }) || original.occurred_at == changed.occurred_at)
}

/// The event types a forger may write into a part that names the delivery's type.
#[derive(Debug)]
struct Types<'a> {
    /// Every type the format knows, and every type of the pool.
    known: &'a BTreeSet<String>,
    /// The types of the delivery being changed.
    own: Vec<&'a str>,
}

impl Types<'_> {
    /// The known types, when `value` is the delivery's type or a piece of it (`X-Shopify-Topic: orders/paid`,
    /// `X-GitHub-Event: sponsorship` of `sponsorship.created`); nothing for other parts, whose values are
    /// not types.
    fn for_value(&self, value: &str) -> impl Iterator<Item = &String> {
        let names_type = !value.is_empty() && self.own.iter().any(|t| t.contains(value));
        self.known.iter().filter(move |_| names_type)
    }
}

/// One change of one part of a delivery, and the delivery it makes.
#[derive(Debug)]
struct Change {
    part: String,
    change: String,
    delivery: Delivery,
}

/// The values each name has across the pool's lists of pairs (for headers, by lowercase name).
fn pool_of<'a>(
    lists: impl Iterator<Item = &'a [(String, String)]>,
    lowercase: bool,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut pool: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for list in lists {
        for (k, v) in list {
            let k = if lowercase { k.to_ascii_lowercase() } else { k.clone() };
            pool.entry(k).or_default().insert(v.clone());
        }
    }
    pool
}

/// Every change of one named pair of `current`: each value of the pool, each event type (for a part that names
/// the type), the junk value, removal; a name `current` lacks is added with each value of the pool.
fn pair_changes(
    current: &[(String, String)],
    pool: &BTreeMap<String, BTreeSet<String>>,
    types: &Types<'_>,
    lowercase: bool,
    mut emit: impl FnMut(&str, String, Vec<(String, String)>),
) {
    let same = |a: &str, b: &str| if lowercase { a.eq_ignore_ascii_case(b) } else { a == b };
    for (name, values) in pool {
        let Some(at) = current.iter().position(|(k, _)| same(k, name)) else {
            for value in values {
                let mut changed = current.to_vec();
                changed.push((name.clone(), value.clone()));
                emit(name, format!("added {value:?}"), changed);
            }
            continue;
        };
        let mine = &current[at].1;
        let mut tried: BTreeSet<String> = values.iter().chain(types.for_value(mine)).cloned().collect();
        tried.insert(JUNK.to_owned());
        tried.remove(mine);
        for value in tried {
            let mut changed = current.to_vec();
            // Every copy of the name takes the value: the verifier and the format read the first.
            for (k, v) in &mut changed {
                if same(k, name) {
                    v.clone_from(&value);
                }
            }
            emit(name, format!("= {value:?}"), changed);
        }
        let removed: Vec<(String, String)> = current.iter().filter(|(k, _)| !same(k, name)).cloned().collect();
        emit(name, "removed".into(), removed);
    }
}

/// The JSON leaves of `value` (scalars, empty arrays and objects) by pointer.
fn leaves(value: &Value, at: String, out: &mut BTreeMap<String, Value>) {
    let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                leaves(v, format!("{at}/{}", escape(k)), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{at}/{i}"), out);
            }
        }
        leaf => {
            out.insert(at, leaf.clone());
        }
    }
}

/// The parent's pointer and the last token of `pointer`, unescaped.
fn split_pointer(pointer: &str) -> (&str, String) {
    let at = pointer.rfind('/').unwrap_or(0);
    (&pointer[..at], pointer[at + 1..].replace("~1", "/").replace("~0", "~"))
}

/// `root` with the leaf at `pointer` set to `value` (`None`: removed); `None` when its parent is not there.
fn with_leaf(root: &Value, pointer: &str, value: Option<&Value>) -> Option<Value> {
    let mut root = root.clone();
    let (parent, token) = split_pointer(pointer);
    match root.pointer_mut(parent)? {
        Value::Object(map) => match value {
            Some(v) => {
                map.insert(token, v.clone());
            }
            None => {
                map.remove(&token)?;
            }
        },
        Value::Array(items) => {
            let i: usize = token.parse().ok()?;
            match value {
                Some(v) => *items.get_mut(i)? = v.clone(),
                None if i < items.len() => {
                    items.remove(i);
                }
                None => return None,
            }
        }
        _ => return None,
    }
    Some(root)
}

/// A junk value of the leaf's kind.
fn junk_like(value: &Value) -> Value {
    match value {
        Value::Number(_) => Value::from(4242),
        Value::Bool(b) => Value::Bool(!b),
        _ => Value::String(JUNK.to_owned()),
    }
}

/// Every change of one JSON leaf of `d`'s body: each value the same pointer has in the pool, each event type (for
/// a leaf that names the type), a junk value, removal; leaves of the pool that `d` lacks (under an object it has)
/// are added.
fn json_changes(
    d: &Delivery,
    pool: &BTreeMap<String, BTreeMap<String, Value>>,
    types: &Types<'_>,
    emit: &mut impl FnMut(Change),
) {
    let Ok(root) = serde_json::from_slice::<Value>(&d.body) else { return };
    let mut mine = BTreeMap::new();
    leaves(&root, String::new(), &mut mine);
    let mut changed = |pointer: &str, change: String, value: Option<&Value>| {
        if let Some(body) = with_leaf(&root, pointer, value) {
            let delivery = Delivery { body: body.to_string().into_bytes(), ..d.clone() };
            emit(Change { part: format!("body {pointer}"), change, delivery });
        }
    };
    for (pointer, values) in pool {
        match mine.get(pointer) {
            Some(current) => {
                let mut tried: BTreeMap<String, Value> = values.clone();
                for t in types.for_value(current.as_str().unwrap_or_default()) {
                    tried.insert(Value::String(t.clone()).to_string(), Value::String(t.clone()));
                }
                let junk = junk_like(current);
                tried.insert(junk.to_string(), junk);
                tried.remove(&current.to_string());
                for (text, value) in &tried {
                    changed(pointer, format!("= {text}"), Some(value));
                }
                changed(pointer, "removed".into(), None);
            }
            None if root.pointer(pointer).is_none() => {
                for (text, value) in values {
                    changed(pointer, format!("added {text}"), Some(value));
                }
            }
            None => {}
        }
    }
}

/// Every single-part change of `d` for `entry`, given the pool's values.
fn changes(entry: &Entry, pool: &[Delivery], d: &Delivery, types: &Types<'_>, emit: &mut impl FnMut(Change)) {
    let headers = pool_of(pool.iter().map(|p| p.headers.as_slice()), true);
    pair_changes(&d.headers, &headers, types, true, |name, change, headers| {
        emit(Change { part: format!("header {name}"), change, delivery: Delivery { headers, ..d.clone() } });
    });
    let query = pool_of(pool.iter().map(|p| p.query.as_slice()), false);
    pair_changes(&d.query, &query, types, false, |name, change, query| {
        emit(Change { part: format!("query {name}"), change, delivery: Delivery { query, ..d.clone() } });
    });
    match entry.body_parts {
        BodyParts::Signed => {}
        BodyParts::Form => {
            let forms: Vec<Vec<(String, String)>> = pool.iter().map(|p| pairs_of(&p.body)).collect();
            let fields = pool_of(forms.iter().map(Vec::as_slice), false);
            pair_changes(&pairs_of(&d.body), &fields, types, false, |name, change, form| {
                let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(&form).finish().into_bytes();
                emit(Change { part: format!("form {name}"), change, delivery: Delivery { body, ..d.clone() } });
            });
        }
        BodyParts::Json => {
            let mut leaves_pool: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
            for p in pool {
                let Ok(root) = serde_json::from_slice::<Value>(&p.body) else { continue };
                let mut found = BTreeMap::new();
                leaves(&root, String::new(), &mut found);
                for (pointer, value) in found {
                    leaves_pool.entry(pointer).or_default().insert(value.to_string(), value);
                }
            }
            json_changes(d, &leaves_pool, types, emit);
        }
    }
}

/// The failures grouped by entry and part: how many changes moved an effect, which values, one example.
fn grouped(failures: &[Failure]) -> Vec<String> {
    let mut groups: BTreeMap<(&str, &str), Vec<&Failure>> = BTreeMap::new();
    for f in failures {
        groups.entry((&f.entry, &f.part)).or_default().push(f);
    }
    groups
        .into_iter()
        .map(|((entry, part), list)| {
            let values: BTreeSet<&str> = list.iter().map(|f| f.change.as_str()).collect();
            let shown: Vec<&str> = values.iter().take(VALUES_SHOWN).copied().collect();
            let more = if values.len() > shown.len() {
                format!(" (+{} more)", values.len() - shown.len())
            } else {
                String::new()
            };
            let first = list[0];
            format!(
                "{entry} | {part} | {} change(s): {}{more} | e.g. {} {}: {} (was {})",
                list.len(),
                shown.join(", "),
                first.delivery,
                first.change,
                first.got,
                first.was
            )
        })
        .collect()
}

/// The matrix: for every scheme, format and preset, no change of one part of a valid delivery moves an effect
/// (another order, action, amount, currency, type or status); it is refused, unreadable, ignored or the same.
#[test]
fn no_unsigned_part_changes_which_order_is_paid_or_how() {
    let started = Instant::now();
    let mut failures: Vec<Failure> = Vec::new();
    let mut entries = built_in_entries();
    entries.extend(preset_entries(&mut failures));
    let report: Vec<Counts> = entries.iter().map(|entry| entry.check(&mut failures)).collect();

    println!("forgery matrix: deliveries, changes (refused / dead letter / ignored / same effect / moved) per entry");
    for (entry, c) in entries.iter().zip(&report) {
        println!(
            "  {}: {} deliveries, {} changes ({} / {} / {} / {} / {})",
            entry.name, c.deliveries, c.mutations, c.refused, c.dead, c.ignored, c.same, c.moved
        );
    }
    let total: usize = report.iter().map(|c| c.mutations).sum();
    println!("  {} entries, {total} changes in {:.2?}", entries.len(), started.elapsed());

    // Every built-in format and every preset took part.
    for format in Format::ALL {
        let covered = entries.iter().zip(&report).any(|(e, c)| e.format.name() == format.name() && c.mutations > 0);
        assert!(covered, "no entry of the matrix reads the {} format", format.name());
    }
    let presets = entries.iter().filter(|e| e.name.starts_with("preset ")).count();
    assert_eq!(presets, Preset::names().count(), "every preset is an entry");

    for f in &failures {
        println!("  FAIL {} | {} | {} {} | got {} | was {}", f.entry, f.delivery, f.part, f.change, f.got, f.was);
    }
    let lines = grouped(&failures);
    let shown: Vec<&str> = lines.iter().take(SHOWN).map(String::as_str).collect();
    let header = "entry | part | changes | e.g. delivery change: got (was)";
    assert!(
        failures.is_empty(),
        "{} change(s) in {} (entry, part) group(s) moved an effect ({header}):\n{}{}",
        failures.len(),
        lines.len(),
        shown.join("\n"),
        if lines.len() > SHOWN { format!("\n… and {} more group(s)", lines.len() - SHOWN) } else { String::new() }
    );
}
