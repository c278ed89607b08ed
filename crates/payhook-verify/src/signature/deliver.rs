//! A whole delivery signed as its provider sends it: the signature in the headers, in the body (Adyen, Braintree),
//! or over the request line (RFC 9421, and declared rules that sign the URL). `payhook send`, `payhook trigger`,
//! the benchmark and [`Webhook::sign`](crate::Webhook::sign) all sign through here.

use super::{RequestContext, RequestParts, Scheme, Verifier, VerifyError};

/// A delivery as signed: the body (with the signature in it for Adyen and Braintree) and the headers to send.
pub type SignedDelivery = (Vec<u8>, Vec<(String, String)>);

/// A URL taken apart as far as signing needs: `scheme://authority/path?query`.
struct Url<'a> {
    scheme: &'a str,
    authority: &'a str,
    path: &'a str,
    query: Option<&'a str>,
}

impl<'a> Url<'a> {
    /// Splits `url`; without `scheme://` it is `https`, without a path `/`.
    fn split(url: &'a str) -> Self {
        let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
        let (rest, _fragment) = rest.split_once('#').unwrap_or((rest, ""));
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        Self { scheme, authority, path, query }
    }
}

impl Verifier {
    /// Signs `body`, POSTed to `url` with `headers` (the unsigned ones the provider also sends), the way this
    /// verifier's provider does, at `now_unix` with the first secret that can sign; returns the body and the
    /// headers to send. A `content-type` header is added (a form for Braintree, JSON for the others). Adyen's and
    /// Braintree's signatures go into the body; an RFC 9421 signature covers the request line and
    /// `content-type`, with `msg_id` as its nonce; `msg_id` is also Standard Webhooks' `webhook-id`, GitHub's
    /// `X-GitHub-Delivery` and Shopify's `X-Shopify-Webhook-Id`.
    pub fn sign_delivery(
        &self,
        url: &str,
        mut body: Vec<u8>,
        mut headers: Vec<(String, String)>,
        now_unix: i64,
        msg_id: &str,
    ) -> Result<SignedDelivery, VerifyError> {
        let content_type = match self.scheme() {
            Scheme::Braintree => "application/x-www-form-urlencoded",
            _ => "application/json",
        };
        headers.push(("content-type".to_owned(), content_type.to_owned()));
        match self.scheme() {
            Scheme::Adyen => body = self.adyen_sign_body(&body)?,
            Scheme::Braintree => body = self.braintree_sign_body(&body)?,
            Scheme::HttpMessageSignatures => {
                let url = Url::split(url);
                let parts = RequestParts {
                    method: "POST",
                    scheme: url.scheme,
                    authority: url.authority,
                    path: url.path,
                    query: url.query,
                    headers: &[("content-type", "application/json")],
                };
                headers.extend(self.sign_request(&parts, &body, now_unix, Some(msg_id)));
            }
            _ => {
                let context = RequestContext { url: Some(url), headers: &headers };
                let signature = self.sign_with(&body, now_unix, msg_id, &context);
                headers.extend(signature);
            }
        }
        Ok((body, headers))
    }
}

#[cfg(test)]
mod tests {
    use super::Url;

    #[test]
    fn a_url_splits_into_the_parts_a_signature_covers() {
        let url = Url::split("https://pay.example.com:8443/webhooks/acme?data.id=1&type=order#top");
        assert_eq!((url.scheme, url.authority, url.path), ("https", "pay.example.com:8443", "/webhooks/acme"));
        assert_eq!(url.query, Some("data.id=1&type=order"));
        let bare = Url::split("example.com");
        assert_eq!((bare.scheme, bare.authority, bare.path, bare.query), ("https", "example.com", "/", None));
    }
}
