// Signs deliveries with the providers' own SDKs, for payhook to verify.
//
// Reads one JSON object a line on stdin:
//   {"provider", "secret", "body", "id"?, "timestamp"?}
// (`id` names the message where the rule signs one, `timestamp` is in seconds; both default to fresh values) and
// answers each with one line on stdout:
//   {"headers": {name: value}, "body"}
// where `headers` are the signature headers the SDK made. A line that is not JSON, or names a provider without an
// SDK signer, stops the script (exit 2).
//
// Providers: standard-webhooks and polar (standardwebhooks' Webhook.sign), github (@octokit/webhooks-methods
// sign), coinbase-commerce (coinbase-commerce-node Webhook.computeSignature), stripe
// (stripe.webhooks.generateTestHeaderString), braintree (its testing gateway's sampleSignature). Each SDK is loaded on first use.

import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { braintreeGateway } from "./braintree.mjs";

const signers = {
  // standardwebhooks: new Webhook(secret).sign(id, date, body); the secret is whsec_ and the key's base64.
  async "standard-webhooks"(d) {
    const { Webhook } = await import("standardwebhooks");
    return standardHeaders(new Webhook(d.secret), d);
  },

  // Polar signs with Standard Webhooks keyed with the secret's UTF-8 bytes, polar_whs_ prefix included: the key
  // @polar-sh/sdk's validateEvent hands standardwebhooks (the secret's base64), so this is what Polar's SDK accepts.
  async polar(d) {
    const { Webhook } = await import("standardwebhooks");
    return standardHeaders(new Webhook(Buffer.from(d.secret, "utf-8").toString("base64")), d);
  },

  // @octokit/webhooks-methods: sign(secret, body) is "sha256=" and the hex HMAC-SHA256.
  async github(d) {
    const { sign } = await import("@octokit/webhooks-methods");
    return { "x-hub-signature-256": await sign(d.secret, d.body) };
  },

  // coinbase-commerce-node: Webhook.computeSignature(body, secret) is the hex HMAC-SHA256.
  async "coinbase-commerce"(d) {
    const { default: coinbase } = await import("coinbase-commerce-node");
    return { "x-cc-webhook-signature": coinbase.Webhook.computeSignature(d.body, d.secret) };
  },

  // braintree: the signature its testing gateway puts on a sample notification (sampleSignature: the public key,
  // "|", the hex HMAC-SHA1 keyed with the private key's SHA-1), over the bt_payload of the body given; Braintree's
  // signature travels in the form body, so this signer answers a body.
  async braintree(d) {
    const gateway = await braintreeGateway(d.secret);
    const payload = new URLSearchParams(d.body).get("bt_payload");
    const form = new URLSearchParams({ bt_signature: gateway.webhookTesting.sampleSignature(payload), bt_payload: payload });
    return { headers: { "content-type": "application/x-www-form-urlencoded" }, body: form.toString() };
  },

  // stripe: stripe.webhooks.generateTestHeaderString({payload, secret, timestamp}) is "t=…,v1=…".
  async stripe(d) {
    const { default: Stripe } = await import("stripe");
    const stripe = new Stripe("sk_test_interop_offline");
    const header = stripe.webhooks.generateTestHeaderString({
      payload: d.body,
      secret: d.secret,
      timestamp: d.timestamp,
    });
    return { "stripe-signature": header };
  },
};

function standardHeaders(webhook, d) {
  const id = d.id ?? `msg_${randomUUID().replaceAll("-", "")}`;
  const signature = webhook.sign(id, new Date(d.timestamp * 1000), d.body);
  return { "webhook-id": id, "webhook-timestamp": String(d.timestamp), "webhook-signature": signature };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  const input = JSON.parse(line);
  const signer = signers[input.provider];
  if (!signer) {
    console.error(`sign.mjs: no SDK signer for provider ${JSON.stringify(input.provider)}`);
    process.exit(2);
  }
  const timestamp = input.timestamp ?? Math.floor(Date.now() / 1000);
  const signed = await signer({ ...input, timestamp });
  // A signer whose signature travels in the body (Braintree's) answers {headers, body}; the others, headers.
  const { headers, body } = signed.headers && "body" in signed ? signed : { headers: signed, body: input.body };
  process.stdout.write(`${JSON.stringify({ headers, body })}\n`);
}
