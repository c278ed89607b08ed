// Verifies deliveries with the providers' own SDKs.
//
// Reads one JSON object a line on stdin:
//   {"provider", "secret", "url", "headers": {name: value}, "body", "notification_url"?}
// and answers each with one line on stdout, as soon as it is checked:
//   {"provider", "valid": true|false, "error": string|null, "event": string|null}
// `valid` is the SDK's verdict on the signature; `event` is the event type the SDK read from the body when its
// verifier also parses (null otherwise); `error` says why the SDK refused, or what it could not parse after the
// signature was accepted. A line that is not JSON, or names an unknown provider, stops the script (exit 2).
//
// Providers: paddle, square, razorpay, polar, standard-webhooks, coinbase-commerce, github, gocardless,
// mercado-pago, braintree, stripe. Each SDK is loaded on first use.

import { createInterface } from "node:readline";
import { braintreeGateway } from "./braintree.mjs";

const verifiers = {
  // @paddle/paddle-node-sdk: Webhooks.isSignatureValid(body, secret, header), then unmarshal for the event type (a
  // parse failure after a good signature is reported, not hidden).
  // The SDK refuses a `ts` more than 5 s old. A Paddle client must exist: it installs the crypto the verifier uses.
  async paddle(d) {
    const { Paddle } = await import("@paddle/paddle-node-sdk");
    const paddle = new Paddle("pdl_sdbx_apikey_interop_offline");
    const header = d.header("paddle-signature");
    const valid = await paddle.webhooks.isSignatureValid(d.body, d.secret, header);
    if (!valid) return { valid, error: "isSignatureValid returned false" };
    try {
      const event = await paddle.webhooks.unmarshal(d.body, d.secret, header);
      return { valid, event: event?.eventType ?? null };
    } catch (e) {
      return { valid, error: `signature accepted, body not parsed: ${message(e)}` };
    }
  },

  // square: WebhooksHelper.verifySignature over the notification URL as registered and the body.
  async square(d) {
    const { WebhooksHelper } = await import("square");
    const valid = await WebhooksHelper.verifySignature({
      requestBody: d.body,
      signatureHeader: d.header("x-square-hmacsha256-signature"),
      signatureKey: d.secret,
      notificationUrl: d.notification_url,
    });
    return { valid, error: valid ? null : "verifySignature returned false" };
  },

  // razorpay: Razorpay.validateWebhookSignature(body, signature, secret).
  async razorpay(d) {
    const { default: Razorpay } = await import("razorpay");
    const valid = Razorpay.validateWebhookSignature(d.body, d.header("x-razorpay-signature"), d.secret);
    return { valid, error: valid ? null : "validateWebhookSignature returned false" };
  },

  // @polar-sh/sdk: validateEvent(body, headers, secret) verifies (Standard Webhooks, keyed with the secret's
  // UTF-8 bytes) and then parses the event. A parse failure after a good signature is reported, not hidden.
  async polar(d) {
    const { validateEvent, WebhookVerificationError } = await import("@polar-sh/sdk/webhooks");
    try {
      const event = validateEvent(d.body, d.headers, d.secret);
      return { valid: true, event: event.type };
    } catch (e) {
      if (e instanceof WebhookVerificationError) return { valid: false, error: message(e) };
      return { valid: true, error: `signature accepted, body not parsed: ${message(e)}` };
    }
  },

  // standardwebhooks: new Webhook(secret).verify(body, headers).
  async "standard-webhooks"(d) {
    const { Webhook } = await import("standardwebhooks");
    const event = new Webhook(d.secret).verify(d.body, d.headers);
    return { valid: true, event: event?.type ?? null };
  },

  // coinbase-commerce-node: Webhook.verifyEventBody(body, header, secret) checks and returns the event.
  async "coinbase-commerce"(d) {
    const { default: coinbase } = await import("coinbase-commerce-node");
    const event = coinbase.Webhook.verifyEventBody(d.body, d.header("x-cc-webhook-signature"), d.secret);
    return { valid: true, event: event?.type ?? null };
  },

  // @octokit/webhooks-methods: verify(secret, body, signature).
  async github(d) {
    const { verify } = await import("@octokit/webhooks-methods");
    const valid = await verify(d.secret, d.body, d.header("x-hub-signature-256"));
    const action = valid ? safeJson(d.body)?.action : null;
    const event = valid && action ? `${d.header("x-github-event")}.${action}` : null;
    return { valid, event, error: valid ? null : "verify returned false" };
  },

  // gocardless-nodejs: webhooks.parse(body, secret, header) checks and returns the batch of events.
  async gocardless(d) {
    const { parse } = await import("gocardless-nodejs/webhooks");
    const events = parse(d.body, d.secret, d.header("webhook-signature"));
    const types = events.map((e) => `${e.resource_type}.${e.action}`);
    return { valid: true, event: types.join(",") };
  },

  // mercadopago: WebhookSignatureValidator.validate over the data.id query parameter, x-request-id and ts (the
  // body is not signed); five minutes' tolerance, as payhook's default.
  async "mercado-pago"(d) {
    const { WebhookSignatureValidator } = await import("mercadopago");
    const url = new URL(d.url);
    WebhookSignatureValidator.validate({
      xSignature: d.header("x-signature"),
      xRequestId: d.header("x-request-id"),
      dataId: url.searchParams.get("data.id"),
      secret: d.secret,
      toleranceSeconds: 300,
    });
    return { valid: true };
  },

  // braintree: gateway.webhookNotification.parse(bt_signature, bt_payload) from the form body checks the signature
  // (HMAC-SHA1 keyed with the private key's SHA-1, selected by the public key) and parses the notification.
  async braintree(d) {
    const gateway = await braintreeGateway(d.secret);
    const form = new URLSearchParams(d.body);
    const notification = await gateway.webhookNotification.parse(form.get("bt_signature"), form.get("bt_payload"));
    return { valid: true, event: notification.kind };
  },

  // stripe: stripe.webhooks.constructEvent(body, header, secret), five minutes' tolerance.
  async stripe(d) {
    const { default: Stripe } = await import("stripe");
    const stripe = new Stripe("sk_test_interop_offline");
    const event = stripe.webhooks.constructEvent(d.body, d.header("stripe-signature"), d.secret);
    return { valid: true, event: event.type };
  },
};

// An error as one line; a schema error (Polar's SDK validates with zod) as the fields it found wrong.
function message(e) {
  if (!(e instanceof Error)) return String(e);
  const issues = e.cause?.issues ?? e.rawValue?.issues;
  if (Array.isArray(issues)) {
    const fields = issues.map((i) => `${i.path.join(".")} (${i.expected ?? i.code})`);
    return `${e.name}: fields the SDK's schema refuses: ${fields.join(", ")}`;
  }
  return `${e.name}: ${e.message}`.replace(/\s+/g, " ");
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

// The delivery with its header names lowercased and a case-insensitive lookup.
function delivery(input) {
  const headers = {};
  for (const [name, value] of Object.entries(input.headers ?? {})) headers[name.toLowerCase()] = value;
  return { ...input, headers, header: (name) => headers[name.toLowerCase()] };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  const input = JSON.parse(line);
  const verifier = verifiers[input.provider];
  if (!verifier) {
    console.error(`verify.mjs: no SDK verifier for provider ${JSON.stringify(input.provider)}`);
    process.exit(2);
  }
  let answer;
  try {
    answer = await verifier(delivery(input));
  } catch (e) {
    // Every SDK here reports a refused signature by throwing (or returning false, handled above).
    answer = { valid: false, error: message(e) };
  }
  const { valid, error = null, event = null } = answer;
  process.stdout.write(`${JSON.stringify({ provider: input.provider, valid, error, event })}\n`);
}
