//! The `http` feature: the `http` crate's types as a request to verify. [`Headers`] for `http::HeaderMap` (header
//! values that are not visible ASCII read as absent), for `http::request::Parts` and `http::Request<B>` (the RFC
//! 9421 derived components from the method and the URI), and [`Webhook::verify_request`].

use crate::error::Error;
use crate::request::Headers;
use crate::webhook::{Delivery, Webhook};

impl Headers for http::HeaderMap {
    fn get(&self, name: &str) -> Option<&str> {
        http::HeaderMap::get(self, name).and_then(|v| v.to_str().ok())
    }
}

impl Headers for http::request::Parts {
    fn get(&self, name: &str) -> Option<&str> {
        Headers::get(&self.headers, name)
    }
}

impl<B> Headers for http::Request<B> {
    fn get(&self, name: &str) -> Option<&str> {
        Headers::get(self.headers(), name)
    }
}

/// The path and query of `uri`: what [`Webhook::verify`] calls the target.
pub(crate) fn target(uri: &http::Uri) -> &str {
    uri.path_and_query().map_or("/", |pq| pq.as_str())
}

impl Webhook {
    /// [`Webhook::verify`] for an `http::Request` whose body is the raw bytes as received (`Bytes`, `Vec<u8>`,
    /// `String`, …). Requires the `http` feature.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let github = payhook_verify::Webhook::preset("github", ["It's a Secret to Everybody"])?;
    /// let body = r#"{"action":"created","sponsorship":{"node_id":"S_1"}}"#;
    /// let request = http::Request::post("/webhooks/github")
    ///     .header("x-github-event", "sponsorship")
    ///     .header("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
    ///     .header("x-hub-signature-256", "sha256=0000")
    ///     .body(body)?;
    /// let refused = github.verify_request(&request).unwrap_err();
    /// assert_eq!((refused.status(), refused.code()), (401, "mismatch"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn verify_request<B: AsRef<[u8]>>(&self, request: &http::Request<B>) -> Result<Delivery, Error> {
        let target = target(request.uri());
        self.verify(request.method().as_str(), target, request.headers(), request.body().as_ref())
    }
}
