//! The crate's front door: a [`Webhook`] for one provider, its [`Builder`], and what verifying a request gives,
//! a [`Delivery`].

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::confirm::Confirm;
use crate::error::{ConfigError, Error};
use crate::event::{Event, OrderAction};
use crate::format::{EffectSpec, ExampleVars, Format, FormatSpecError, Outgoing};
use crate::preset::Preset;
use crate::request::Headers;
use crate::signature::{Nonce, Scheme, Secret, Verified, Verifier};

/// The providers verified by code of their own; every other name is a preset.
const BUILT_IN: [&str; 7] = ["adyen", "braintree", "github", "paystack", "shopify", "standard-webhooks", "stripe"];

/// Every name [`Webhook::preset`] accepts, sorted.
pub(crate) fn provider_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BUILT_IN.iter().copied().chain(Preset::names()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn built_in_scheme(name: &str) -> Option<Scheme> {
    Some(match name {
        "stripe" => Scheme::Stripe,
        "standard-webhooks" => Scheme::StandardWebhooks,
        "github" => Scheme::Github,
        "paystack" => Scheme::Paystack,
        "shopify" => Scheme::Shopify,
        "adyen" => Scheme::Adyen,
        "braintree" => Scheme::Braintree,
        _ => return None,
    })
}

/// The seconds a signed timestamp may be away from the clock, either way, unless [`Builder::tolerance_secs`] says
/// otherwise: what Stripe's and the Standard Webhooks libraries allow.
pub const DEFAULT_TOLERANCE_SECS: u64 = 300;

/// One provider's webhooks: verifies a delivery on its raw bytes and reads it as [`Event`]s.
///
/// Built once (keys are decoded then, so a bad secret fails at start) and shared: cloning is cheap, and
/// [`Webhook::verify`] takes `&self`.
#[derive(Debug, Clone)]
pub struct Webhook {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    verifier: Verifier,
    format: Format,
    confirm: Option<Confirm>,
}

/// Where a [`Builder`]'s scheme comes from.
#[derive(Debug)]
enum SchemeSource {
    Ready(Scheme),
    /// A preset's rule, compiled at [`Builder::build`] with the notification URL.
    Preset(Box<Preset>),
}

/// Builds a [`Webhook`]: its secrets (with their `not_after` while one is rotated out), the tolerance of its
/// timestamps, and what a scheme needs beyond them.
#[derive(Debug)]
#[must_use]
pub struct Builder {
    name: String,
    scheme: SchemeSource,
    format: Format,
    confirm: Option<Confirm>,
    secrets: Vec<Secret>,
    tolerance_secs: u64,
    notification_url: Option<String>,
    required_components: Option<Vec<String>>,
}

impl Webhook {
    /// The provider called `name` with its `secrets`: a provider verified by code of its own (`stripe`,
    /// `standard-webhooks`, `github`, `paystack`, `shopify`, `adyen`, `braintree`) or a preset (`paddle`,
    /// `razorpay`, `square`, …; [`crate::providers`] lists them all, with an example each).
    ///
    /// ```
    /// let stripe = payhook_verify::Webhook::preset("stripe", ["whsec_test_secret"])?;
    /// # Ok::<(), payhook_verify::ConfigError>(())
    /// ```
    pub fn preset<S: Into<Secret>>(name: &str, secrets: impl IntoIterator<Item = S>) -> Result<Self, ConfigError> {
        Self::builder(name)?.secrets(secrets).build()
    }

    /// A [`Builder`] for the provider called `name` (see [`Webhook::preset`]), for more than its secrets.
    pub fn builder(name: &str) -> Result<Builder, ConfigError> {
        let unknown = || ConfigError::UnknownProvider { name: name.to_owned() };
        let preset = Preset::get(name).transpose()?;
        let scheme = match (built_in_scheme(name), &preset) {
            (Some(scheme), _) => SchemeSource::Ready(scheme),
            (None, Some(preset)) if preset.signature.is_some() => SchemeSource::Preset(Box::new(preset.clone())),
            _ => return Err(unknown()),
        };
        let declared = match &preset {
            Some(preset) => preset.format()?,
            None => None,
        };
        let format = match (Format::built_in(name), declared) {
            (Some(format), _) | (None, Some(format)) => format,
            // Standard Webhooks says how to sign, not what the payload holds: payhook's generic format.
            (None, None) if name == "standard-webhooks" => Format::Generic,
            (None, None) => return Err(unknown()),
        };
        let confirm = match &preset {
            Some(preset) => preset.confirm()?,
            None => None,
        };
        Ok(Builder::new(name.to_owned(), scheme, format, confirm))
    }

    /// A [`Builder`] for any scheme and format: a generic HMAC (`Scheme::Hmac`), RFC 9421 message signatures
    /// (`Scheme::HttpMessageSignatures`), or a rule and format declared as data (`Scheme::Declared`,
    /// `Format::Declared`).
    pub fn custom(scheme: Scheme, format: Format) -> Builder {
        Builder::new(scheme.name().to_owned(), SchemeSource::Ready(scheme), format, None)
    }

    /// The provider's name (`stripe`, `paddle`, …), or the custom scheme's.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The signature verifier, for what the rest of this API does not say (the scheme, what its signature covers).
    pub fn verifier(&self) -> &Verifier {
        &self.inner.verifier
    }

    /// Verifies a request, `method` and `target` (its path with the query string, `/webhooks/stripe?x=1`) as
    /// received, its headers and its raw body, against the system clock, and reads its events.
    ///
    /// The body must be the bytes as received: a body parsed and serialized again is not what was signed.
    pub fn verify(
        &self,
        method: &str,
        target: &str,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
    ) -> Result<Delivery, Error> {
        self.verify_at(method, target, headers, body, now_unix())
    }

    /// [`Webhook::verify`] with the clock at `now_unix` (seconds): for tests, and for a service with a clock of
    /// its own.
    pub fn verify_at(
        &self,
        method: &str,
        target: &str,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Delivery, Error> {
        let request = RequestView { method, target, headers };
        let verified = self.inner.verifier.verify(&request, body, now_unix)?;
        let confirm = match &self.inner.confirm {
            Some(confirm) => {
                let url = format!("{}{}", confirm.base_url(), confirm.path_for(&request)?);
                Some(Confirmation { url, signed: SignedValues::capture(confirm, &request) })
            }
            None => None,
        };
        let mut events = self.inner.format.parse_delivery(&request, body)?.into_iter();
        let first = events.next().ok_or(Error::Unreadable(crate::format::ParseError::NotSingle(0)))?;
        Ok(Delivery { verified, first, more: events.collect(), confirm })
    }

    /// The events of the provider's API `answer` about the resource a delivery names, for a provider whose
    /// signature does not cover the body (Mercado Pago): GET [`Delivery::confirm_url`] with your access token and
    /// pass the answer's body here. The answer must be about the signed resource.
    pub fn confirm(&self, delivery: &Delivery, answer: &[u8]) -> Result<Vec<Event>, Error> {
        match (&self.inner.confirm, &delivery.confirm) {
            (Some(confirm), Some(confirmation)) => Ok(confirm.events(&confirmation.signed, answer)?),
            _ => Ok(delivery.events().cloned().collect()),
        }
    }

    /// Signs `body`, POSTed to `url` at `now_unix`, as the provider would: for tests of a handler. Signed with the
    /// first secret that can sign (an Ed25519 public key cannot); Adyen's and Braintree's signatures go into the
    /// body.
    pub fn sign(&self, url: &str, body: impl Into<Vec<u8>>, now_unix: i64) -> Result<SignedRequest, Error> {
        self.sign_with_headers(url, body.into(), Vec::new(), now_unix)
    }

    fn sign_with_headers(
        &self,
        url: &str,
        body: Vec<u8>,
        headers: Vec<(String, String)>,
        now_unix: i64,
    ) -> Result<SignedRequest, Error> {
        let id = message_id(&body, now_unix);
        let (body, mut headers) = self.inner.verifier.sign_delivery(url, body, headers, now_unix, &id)?;
        let authority = url.split_once("://").map_or(url, |(_, rest)| rest).split(['/', '?', '#']).next();
        if let Some(authority) = authority.filter(|a| !a.is_empty()) {
            headers.insert(0, ("host".to_owned(), authority.to_owned()));
        }
        Ok(SignedRequest { target: target_of(url).to_owned(), headers, body })
    }

    /// One of the provider's example deliveries, signed at `now_unix` for `url` (its query string is the
    /// example's): for tests of a handler. `event` is one of the provider's event types that has an example
    /// (`transaction.completed`), or an effect (`pay`, `refund`, `fail`, `dispute`); the event is about the order
    /// `order_id`, for 19.99 USD (in the currency's minor unit where the provider sends one). `None` when the
    /// provider has no such example.
    pub fn example(&self, event: &str, order_id: &str, url: &str, now_unix: i64) -> Option<SignedRequest> {
        let event_id = format!("evt_{}", message_id(event.as_bytes(), now_unix).trim_start_matches("msg_"));
        let base = url.split(['?', '#']).next().unwrap_or(url);
        let action = OrderAction::from_generic_type(event).or_else(|| effect_action(event));
        let format = &self.inner.format;
        if let Format::Declared(declared) = format {
            let example = declared.examples().iter().find(|e| e.event == event).or_else(|| {
                let effect = declared.effect_of(event).or_else(|| action.map(EffectSpec::from))?;
                declared.example_for(effect)
            })?;
            let vars = ExampleVars::for_order(&event_id, order_id, 1999, "usd", now_unix);
            let rendered = example.render(&vars).ok()?;
            let url = match &rendered.query {
                Some(query) => format!("{base}?{query}"),
                None => base.to_owned(),
            };
            return self.sign_with_headers(&url, rendered.body, rendered.headers, now_unix).ok();
        }
        let action = action.filter(|a| format.encodes(*a))?;
        let outgoing =
            Outgoing { event_id: &event_id, action, order_id, amount_minor: 1999, currency: "usd", created: now_unix };
        self.sign_with_headers(base, format.encode(&outgoing), format.encode_headers(&outgoing), now_unix).ok()
    }
}

fn effect_action(name: &str) -> Option<OrderAction> {
    OrderAction::ALL.into_iter().find(|a| EffectSpec::from(*a).name() == name)
}

/// A unique-enough id for a signed test delivery: Standard Webhooks' `webhook-id`, an RFC 9421 nonce.
fn message_id(body: &[u8], now_unix: i64) -> String {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::new().chain_update(now_unix.to_be_bytes()).chain_update(body).finalize();
    format!("msg_{}", hex::encode(&digest[..8]))
}

/// The path and query of `url`.
fn target_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let target = rest.find('/').map_or("/", |at| &rest[at..]);
    target.split('#').next().unwrap_or(target)
}

/// The system clock in unix seconds (0 before 1970, which no signature is from).
fn now_unix() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Builder {
    fn new(name: String, scheme: SchemeSource, format: Format, confirm: Option<Confirm>) -> Self {
        Self {
            name,
            scheme,
            format,
            confirm,
            secrets: Vec::new(),
            tolerance_secs: DEFAULT_TOLERANCE_SECS,
            notification_url: None,
            required_components: None,
        }
    }

    /// Adds a secret. Several may be given while one is rotated out: a delivery signed with any of them verifies,
    /// and one given as `Secret::new(old).with_not_after(unix_secs)` verifies nothing after that second.
    pub fn secret(mut self, secret: impl Into<Secret>) -> Self {
        self.secrets.push(secret.into());
        self
    }

    /// Adds every secret of `secrets` (see [`Builder::secret`]).
    pub fn secrets<S: Into<Secret>>(mut self, secrets: impl IntoIterator<Item = S>) -> Self {
        self.secrets.extend(secrets.into_iter().map(Into::into));
        self
    }

    /// How far, in seconds and either way, a signed timestamp may be from the clock ([`DEFAULT_TOLERANCE_SECS`]
    /// unless set): an older delivery is refused as a replay, a newer one as a forgery.
    pub fn tolerance_secs(mut self, secs: u64) -> Self {
        self.tolerance_secs = secs;
        self
    }

    /// The URL registered with the provider, for a preset whose signature covers it (Square): what `{url}` is.
    /// Without it the request's own URL is used (`X-Forwarded-Proto`, else `https`, then `Host` and the target).
    pub fn notification_url(mut self, url: impl Into<String>) -> Self {
        self.notification_url = Some(url.into());
        self
    }

    /// The components every RFC 9421 signature must cover (by default `@method`, `@authority`, `@path` and
    /// `content-digest`); only `Scheme::HttpMessageSignatures` reads them, and `content-digest` is required
    /// whatever the list says.
    pub fn required_components<S: Into<String>>(mut self, components: impl IntoIterator<Item = S>) -> Self {
        self.required_components = Some(components.into_iter().map(Into::into).collect());
        self
    }

    /// The webhook: its keys decoded, its format checked against what the signature covers.
    pub fn build(self) -> Result<Webhook, ConfigError> {
        let scheme = match self.scheme {
            SchemeSource::Ready(scheme) => scheme,
            SchemeSource::Preset(preset) => preset
                .scheme(self.notification_url)?
                .ok_or_else(|| ConfigError::UnknownProvider { name: self.name.clone() })?,
        };
        let mut verifier = Verifier::new(scheme, &self.secrets, self.tolerance_secs)?;
        if let Some(components) = self.required_components {
            verifier = verifier.with_required_components(components)?;
        }
        check_signed(&verifier, &self.format)?;
        Ok(Webhook { inner: Arc::new(Inner { name: self.name, verifier, format: self.format, confirm: self.confirm }) })
    }
}

/// Refuses a format that reads a part of the delivery the signature does not cover, as payhook's configuration
/// does: a declared format must name such fields `unsigned`, a built-in one needs the body signed (Adyen's format
/// reads only what each item's signature covers).
fn check_signed(verifier: &Verifier, format: &Format) -> Result<(), ConfigError> {
    let signed = verifier.signed_parts();
    match format {
        Format::Declared(declared) => declared.check_signed(&signed).map_err(ConfigError::Unsigned),
        Format::Adyen if *verifier.scheme() == Scheme::Adyen => Ok(()),
        built_in if !signed.body => Err(ConfigError::Unsigned(FormatSpecError {
            key: built_in.name().to_owned(),
            reason: format!("reads the body, which the {} signature does not cover", verifier.scheme().name()),
        })),
        _ => Ok(()),
    }
}

/// A verified delivery and the events it carries: one for every provider but those that batch (an Adyen
/// notification carries several items).
#[derive(Debug, Clone)]
pub struct Delivery {
    verified: Verified,
    first: Event,
    more: Vec<Event>,
    confirm: Option<Confirmation>,
}

impl Delivery {
    /// The delivery's event (the first one of a batch).
    pub fn event(&self) -> &Event {
        &self.first
    }

    /// Every event of the delivery, in the order of the body.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        std::iter::once(&self.first).chain(&self.more)
    }

    /// Every event of the delivery, owned.
    pub fn into_events(self) -> Vec<Event> {
        let mut events = Vec::with_capacity(1 + self.more.len());
        events.push(self.first);
        events.extend(self.more);
        events
    }

    /// What the signature check found: which secret matched (to see when a rotated-out one stops being used), the
    /// scheme's delivery id and signed timestamp.
    pub fn verified(&self) -> &Verified {
        &self.verified
    }

    /// A signature to claim once: an RFC 9421 signature's nonce, or the signature of a rule that does not sign the
    /// body (Mercado Pago's). Claim it in a table with a unique key on key id and nonce, kept until
    /// [`Nonce::expires_at`], refusing it with another body; otherwise a replay within the tolerance verifies again.
    pub fn nonce(&self) -> Option<&Nonce> {
        self.verified.nonce()
    }

    /// For a provider whose signature does not cover the body (Mercado Pago), the provider's API URL of the
    /// signed resource: GET it with your access token and read the answer with [`Webhook::confirm`]; the
    /// delivery's own events decide nothing. `None` for every other provider.
    pub fn confirm_url(&self) -> Option<&str> {
        self.confirm.as_ref().map(|c| c.url.as_str())
    }
}

/// What a confirmation needs of the request after it is gone.
#[derive(Debug, Clone)]
struct Confirmation {
    url: String,
    signed: SignedValues,
}

/// The signed parts a confirmation reads (the query string, named headers), copied out of the request.
#[derive(Debug, Clone)]
struct SignedValues {
    query: Option<String>,
    headers: Vec<(String, String)>,
}

impl SignedValues {
    fn capture(confirm: &Confirm, request: &(impl Headers + ?Sized)) -> Self {
        let mut headers = Vec::new();
        let mut query = None;
        for part in confirm.reads() {
            if let Some(name) = part.strip_prefix("header:")
                && let Some(value) = request.get(name)
            {
                headers.push((name.to_owned(), value.to_owned()));
            } else if part.starts_with("query:") {
                query = request.derived("@query").map(Cow::into_owned);
            }
        }
        Self { query, headers }
    }
}

impl Headers for SignedValues {
    fn get(&self, name: &str) -> Option<&str> {
        <[(String, String)] as Headers>::get(&self.headers, name)
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        (component == "@query").then(|| self.query.as_deref().map(Cow::Borrowed)).flatten()
    }
}

/// A request as a provider sends it, for tests: POST it to `target` with `headers` and `body`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SignedRequest {
    /// The path and query string.
    pub target: String,
    /// The headers, signature included.
    pub headers: Vec<(String, String)>,
    /// The body (with the signature in it for Adyen and Braintree).
    pub body: Vec<u8>,
}

/// A received request as the verifier reads it: the headers as given, and the RFC 9421 derived components from the
/// method, the target and the `Host` header (`X-Forwarded-Proto`, else `https`, is the scheme).
struct RequestView<'a, H: ?Sized> {
    method: &'a str,
    target: &'a str,
    headers: &'a H,
}

impl<H: Headers + ?Sized> RequestView<'_, H> {
    fn scheme(&self) -> &str {
        match self.headers.get("x-forwarded-proto") {
            Some(proto) if proto.eq_ignore_ascii_case("http") => "http",
            _ => "https",
        }
    }

    fn authority(&self) -> &str {
        self.headers.get("host").unwrap_or("")
    }

    fn path_and_query(&self) -> (&str, Option<&str>) {
        let target = self.target.split('#').next().unwrap_or(self.target);
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        (if path.is_empty() { "/" } else { path }, query)
    }
}

impl<H: Headers + ?Sized> Headers for RequestView<'_, H> {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let (path, query) = self.path_and_query();
        let query = || query.map_or_else(|| "?".to_owned(), |q| format!("?{q}"));
        Some(match component {
            "@method" => Cow::Borrowed(self.method),
            "@authority" => Cow::Borrowed(self.authority()),
            "@scheme" => Cow::Borrowed(self.scheme()),
            "@path" => Cow::Borrowed(path),
            "@query" => Cow::Owned(query()),
            "@target-uri" => Cow::Owned(format!(
                "{}://{}{path}{}",
                self.scheme(),
                self.authority(),
                self.path_and_query().1.map(|q| format!("?{q}")).unwrap_or_default()
            )),
            "@request-target" => {
                Cow::Owned(format!("{path}{}", self.path_and_query().1.map(|q| format!("?{q}")).unwrap_or_default()))
            }
            _ => return None,
        })
    }
}
