//! What a received request offers to the layers that read it: its [`Headers`], and the [`SignedParts`] its
//! signature covers. Both [`crate::signature`] (which verifies the request) and [`crate::format`] (which reads a
//! verified one) use these; they live here, below both, so that neither module imports the other for them.

use std::borrow::Cow;

/// Read access to request headers.
///
/// The verifier only needs to look headers up by name, so it takes this small
/// trait instead of a concrete HTTP type; that keeps the crate free of HTTP
/// dependencies and lets tests use plain arrays. Implementations must compare
/// names case-insensitively because HTTP header names are case-insensitive;
/// callers always pass lowercase names.
pub trait Headers {
    /// Returns the value of the first header called `name`, if any.
    fn get(&self, name: &str) -> Option<&str>;

    /// Returns the value of an RFC 9421 derived component, named with its
    /// leading `@` (`@method`, `@authority`, `@path`, `@query`,
    /// `@target-uri`, `@scheme`, `@request-target`; see
    /// [`RequestParts`](crate::signature::RequestParts) for the exact forms), if the implementation knows
    /// the request line. Only [`Scheme::HttpMessageSignatures`](crate::signature::Scheme::HttpMessageSignatures) asks; the
    /// default knows nothing, so signatures covering derived components fail
    /// with [`VerifyError::MissingHeader`](crate::signature::VerifyError::MissingHeader) naming the component.
    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let _ = component;
        None
    }
}

impl Headers for [(String, String)] {
    fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl Headers for Vec<(String, String)> {
    fn get(&self, name: &str) -> Option<&str> {
        <[(String, String)] as Headers>::get(self.as_slice(), name)
    }
}

impl Headers for [(&str, &str)] {
    fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }
}

impl<const N: usize> Headers for [(&str, &str); N] {
    fn get(&self, name: &str) -> Option<&str> {
        <[(&str, &str)] as Headers>::get(self.as_slice(), name)
    }
}

/// What a source's signature covers, as far as a format reads it: the body, and headers by lowercase name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SignedParts {
    /// The whole body (or, for a rule that signs fields of it, those fields: counted as the body).
    pub body: bool,
    /// The signed headers.
    pub headers: Vec<String>,
}
