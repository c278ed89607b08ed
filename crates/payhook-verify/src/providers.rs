//! Every provider [`Webhook::preset`](crate::Webhook::preset) knows, by name, with an example each.
//!
//! Each example verifies one of the provider's example deliveries (shaped like its documented one, signed as it
//! signs, made with [`Webhook::example`](crate::Webhook::example)) and reads its event. In a handler, the method,
//! target, headers and body are the request's; the clock is the system's ([`Webhook::verify`](crate::Webhook::verify)).
//! The secrets shown are placeholders: each section says where the provider shows yours.
//!
//! Names verified by code of their own: `stripe`, `standard-webhooks`, `github`, `paystack`, `shopify`, `adyen`,
//! `braintree`. The others are presets, rules and formats written as data (`presets/NAME.toml` in the crate's
//! source, which cites the provider's documentation); a service's own provider is declared the same way
//! ([`signature::SignatureSpec`](crate::signature::SignatureSpec), [`format::FormatSpec`](crate::format::FormatSpec))
//! and verified with [`Webhook::custom`](crate::Webhook::custom).
//!
//! ## Stripe: `stripe`
//!
//! The secret: the endpoint's signing secret `whsec_…`, used as is. The order id: `metadata.order_id` of the
//! PaymentIntent and Charge (`client_reference_id` for Checkout).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let stripe = Webhook::preset("stripe", ["whsec_your_endpoint_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/stripe";
//! # let sent = stripe.example("pay", "ord_1", url, now).ok_or("no example")?;
//! let delivery = stripe.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payment_intent.succeeded");
//! assert_eq!(delivery.event().order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Standard Webhooks (Svix and the providers built on it): `standard-webhooks`
//!
//! The secret: `whsec_…` (HMAC, `v1`) or `whpk_…` (an Ed25519 public key, `v1a`). The order id: `data.order_id`
//! (payhook's generic format: `{id, type, created, data}`).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let standard_webhooks = Webhook::preset("standard-webhooks", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/standard-webhooks";
//! # let sent = standard_webhooks.example("pay", "ord_1", url, now).ok_or("no example")?;
//! let delivery = standard_webhooks.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payment.succeeded");
//! assert_eq!(delivery.event().order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## GitHub Marketplace and GitHub Sponsors: `github`
//!
//! The secret: GitHub > your app's settings (Marketplace listing webhook) or your Sponsors dashboard > Webhooks >
//! Secret. The order id: none: subscriptions only (marketplace account id or sponsorship node_id).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let github = Webhook::preset("github", ["github_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/github";
//! # let sent = github.example("marketplace_purchase.purchased", "ord_1", url, now).ok_or("no example")?;
//! let delivery = github.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "marketplace_purchase.purchased");
//! # Ok(())
//! # }
//! ```
//!
//! ## Paystack: `paystack`
//!
//! The secret: your secret key `sk_live_…` (Paystack signs with it). The order id: the transaction `reference`.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let paystack = Webhook::preset("paystack", ["sk_test_your_secret_key"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/paystack";
//! # let sent = paystack.example("pay", "ord_1", url, now).ok_or("no example")?;
//! let delivery = paystack.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "charge.success");
//! assert_eq!(delivery.event().order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Shopify: `shopify`
//!
//! The secret: the app's API secret (or the store's webhook signing secret). The order id: Shopify's order `id`; the
//! topic comes from `X-Shopify-Topic`, confirmed by the body.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let shopify = Webhook::preset("shopify", ["shopify_app_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/shopify";
//! # let sent = shopify.example("pay", "ord_1", url, now).ok_or("no example")?;
//! let delivery = shopify.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "orders/paid");
//! assert_eq!(delivery.event().order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Adyen: `adyen`
//!
//! The secret: the HMAC key of the webhook (hex). The order id: `merchantReference`; each notification item is an
//! event (`Delivery::events`), and Adyen expects the answer `\[accepted\]`.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let adyen = Webhook::preset("adyen", ["44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/adyen";
//! # let sent = adyen.example("pay", "ord_1", url, now).ok_or("no example")?;
//! let delivery = adyen.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "AUTHORISATION");
//! assert_eq!(delivery.event().order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Braintree: `braintree`
//!
//! The secret: `PUBLIC_KEY:PRIVATE_KEY`, the API key pair. The order id: the transaction's `order-id`; the form
//! body's `bt_payload` is base64 XML signed by `bt_signature`.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let braintree = Webhook::preset("braintree", ["your_public_key:your_private_key"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/braintree";
//! # let sent = braintree.example("pay", "ord_1", url, now).ok_or("no example")?;
//! let delivery = braintree.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "transaction_settled");
//! assert_eq!(delivery.event().order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Checkout.com: `checkout`
//!
//! The secret: Checkout.com Dashboard > Developers > Workflows > your workflow > webhook action > Signature key (the
//! key you entered). The order id: data.reference: the reference you pass when requesting the payment (disputes:
//! data.payment_reference).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let checkout = Webhook::preset("checkout", ["checkout_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/checkout";
//! # let sent = checkout.example("payment_captured", "ord_1", url, now).ok_or("no example")?;
//! let delivery = checkout.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payment_captured");
//! # Ok(())
//! # }
//! ```
//!
//! ## Coinbase Commerce: `coinbase-commerce`
//!
//! The secret: Coinbase Commerce > Settings > Notifications > Webhook subscriptions > Show shared secret. The order
//! id: event.data.metadata.order_id: pass {"order_id": …} as the charge's metadata when you create it.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let coinbase_commerce = Webhook::preset("coinbase-commerce", ["coinbase-commerce_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/coinbase-commerce";
//! # let sent = coinbase_commerce.example("charge:confirmed", "ord_1", url, now).ok_or("no example")?;
//! let delivery = coinbase_commerce.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "charge:confirmed");
//! # Ok(())
//! # }
//! ```
//!
//! ## Flutterwave: `flutterwave`
//!
//! The secret: Flutterwave dashboard > Settings > Webhooks > Secret hash (a value you choose; the same one signs
//! every webhook). The order id: data.tx_ref (v4: data.reference): the tx_ref you pass when you initiate the payment.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let flutterwave = Webhook::preset("flutterwave", ["flutterwave_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/flutterwave";
//! # let sent = flutterwave.example("charge.completed.successful", "ord_1", url, now).ok_or("no example")?;
//! let delivery = flutterwave.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "charge.completed.successful");
//! # Ok(())
//! # }
//! ```
//!
//! ## GoCardless: `gocardless`
//!
//! The secret: GoCardless dashboard > Developers > Webhook endpoints > the endpoint > Secret. The order id:
//! resource_metadata.order_id: pass metadata {"order_id": …} when you create the payment (and the refund).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let gocardless = Webhook::preset("gocardless", ["gocardless_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/gocardless";
//! # let sent = gocardless.example("payments.confirmed", "ord_1", url, now).ok_or("no example")?;
//! let delivery = gocardless.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payments.confirmed");
//! # Ok(())
//! # }
//! ```
//!
//! ## Lemon Squeezy: `lemon-squeezy`
//!
//! The secret: Lemon Squeezy > Settings > Webhooks > your webhook > Signing secret (the one you entered). The order
//! id: meta.custom_data.order_id: pass checkout\[custom\]\[order_id\] when you create the checkout; else the order's
//! identifier (data.attributes.identifier).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let lemon_squeezy = Webhook::preset("lemon-squeezy", ["lemon-squeezy_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/lemon-squeezy";
//! # let sent = lemon_squeezy.example("order_created", "ord_1", url, now).ok_or("no example")?;
//! let delivery = lemon_squeezy.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "order_created");
//! # Ok(())
//! # }
//! ```
//!
//! ## Mercado Pago: `mercado-pago`
//!
//! The secret: Mercado Pago > Your integrations > your application > Webhooks > Configure notifications > Secret
//! signature. The order id: data.external_reference (Orders API notifications): the external_reference you set when
//! you create the order; register the order in payhook first.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let mercado_pago = Webhook::preset("mercado-pago", ["mercado-pago_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/mercado-pago";
//! # let sent = mercado_pago.example("order.processed", "ord_1", url, now).ok_or("no example")?;
//! let delivery = mercado_pago.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "order.processed");
//! // Mercado Pago signs the order id, not the body: the order is read from its API.
//! let url = delivery.confirm_url().ok_or("no confirmation")?;
//! let id = url.rsplit('/').next().ok_or("no id")?;
//! let answer = format!(r#"{{"id": "{id}", "status": "processed", "external_reference": "ord_1",
//!     "last_updated_date": "2026-01-01T00:00:00Z"}}"#);
//! let events = mercado_pago.confirm(&delivery, answer.as_bytes())?;
//! assert_eq!(events[0].order_id().map(|o| o.as_str()), Some("ord_1"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Mollie (next-gen webhooks): `mollie`
//!
//! The secret: Mollie Dashboard > Developers > Webhooks > your webhook > Signing secret (or the `secret` returned by
//! POST /v2/webhooks). The order id: entityId: the payment link (pl_…) or sales invoice (invoice_…) the event is
//! about.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let mollie = Webhook::preset("mollie", ["mollie_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/mollie";
//! # let sent = mollie.example("payment-link.paid", "ord_1", url, now).ok_or("no example")?;
//! let delivery = mollie.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payment-link.paid");
//! # Ok(())
//! # }
//! ```
//!
//! ## Paddle Billing: `paddle`
//!
//! The secret: Paddle > Developer tools > Notifications > your destination > Secret key (pdl_ntfset_…, used whole).
//! The order id: the Paddle transaction id (txn_…): data.id of transaction.* events, data.transaction_id of
//! adjustments (refunds, chargebacks).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let paddle = Webhook::preset("paddle", ["paddle_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/paddle";
//! # let sent = paddle.example("transaction.completed", "ord_1", url, now).ok_or("no example")?;
//! let delivery = paddle.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "transaction.completed");
//! # Ok(())
//! # }
//! ```
//!
//! ## Polar: `polar`
//!
//! The secret: Polar > Settings > Webhooks > your endpoint > Secret (used as written, polar_whs_… included). The
//! order id: data.metadata.order_id: pass metadata {"order_id": …} when you create the checkout; else Polar's order
//! id (data.id).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let polar = Webhook::preset("polar", ["polar_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/polar";
//! # let sent = polar.example("order.paid", "ord_1", url, now).ok_or("no example")?;
//! let delivery = polar.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "order.paid");
//! # Ok(())
//! # }
//! ```
//!
//! ## Razorpay: `razorpay`
//!
//! The secret: Razorpay Dashboard > Account & Settings > Webhooks > your webhook > Secret (the one you entered). The
//! order id: the Razorpay order id (order_…): payload.payment.entity.order_id, present on payment, order, refund and
//! dispute events.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let razorpay = Webhook::preset("razorpay", ["razorpay_secret"])?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/razorpay";
//! # let sent = razorpay.example("payment.captured", "ord_1", url, now).ok_or("no example")?;
//! let delivery = razorpay.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payment.captured");
//! # Ok(())
//! # }
//! ```
//!
//! ## Square: `square`
//!
//! The secret: Square Developer Console > your application > Webhooks > Subscriptions > your subscription > Signature
//! key. The order id: the Square payment id: data.object.payment.id; refunds: data.object.refund.payment_id;
//! disputes: data.object.dispute.disputed_payment.payment_id.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use payhook_verify::Webhook;
//! let square = Webhook::builder("square")?
//!     .secret("square_secret")
//!     .notification_url("https://shop.example/webhooks/square") // Square signs the URL registered with it
//!     .build()?;
//! # let now = 1_767_225_600;
//! # let url = "https://shop.example/webhooks/square";
//! # let sent = square.example("payment.updated", "ord_1", url, now).ok_or("no example")?;
//! let delivery = square.verify_at("POST", &sent.target, &sent.headers, &sent.body, now)?;
//! assert_eq!(delivery.event().event_type, "payment.updated");
//! # Ok(())
//! # }
//! ```
