// A Braintree gateway for the API key pair "PUBLIC_KEY:PRIVATE_KEY" (payhook's form of a Braintree secret), for
// sign.mjs and verify.mjs: webhook signatures need no network, so the sandbox environment never gets a request.
export async function braintreeGateway(secret) {
  const { default: braintree } = await import("braintree");
  const [publicKey, privateKey] = secret.split(":");
  return new braintree.BraintreeGateway({
    environment: braintree.Environment.Sandbox,
    merchantId: "interop_merchant",
    publicKey,
    privateKey,
  });
}
