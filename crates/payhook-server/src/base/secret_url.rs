//! URLs that may carry secrets, and the one form in which payhook shows them.
//!
//! Sink and alert URLs often hold a credential: a Slack incoming webhook's path
//! (`https://hooks.slack.com/services/T000/B000/XXXX`), a `?token=…` query, or `user:password@` before the host.
//! A [`SecretUrl`] keeps the full URL to itself and shows only its redacted form, in `Display` and in `Debug`
//! alike, so that a log line, a stored error, an API answer, a dashboard page or an alert can name the endpoint
//! without the credential: `https://hooks.slack.com/services/…`.
//!
//! The redacted form is the scheme, the host and a non-default port, then:
//! - nothing, when the path is empty or `/` and there is no query and no fragment;
//! - `/…`, when the path has one segment, or only a query or fragment follows (the single segment is often the
//!   secret itself: `https://webhook.site/<uuid>`);
//! - `/<first segment>/…`, when more segments follow and the first reads like a word (at most 16 ASCII letters,
//!   digits, `-`, `_` or `.`): `services`, `api`, `hooks`; a token-like first segment
//!   (`https://api.telegram.org/bot<token>/…`) is elided like the rest.
//!
//! User info, the rest of the path, the query and the fragment are never shown. [`redact_urls`] applies the same
//! form to every `http(s)://` URL inside a text (an error message from a dependency, a row stored by an older
//! version), as a second line of defence.

use std::borrow::Cow;
use std::fmt;

/// The longest first path segment that is shown.
const SHOWN_SEGMENT_MAX_CHARS: usize = 16;

/// An `http` or `https` URL whose `Display` and `Debug` print only its redacted form (see the module
/// documentation). The full URL is reachable only inside this crate, for building the request.
#[derive(Clone)]
pub struct SecretUrl {
    url: reqwest::Url,
    shown: String,
}

/// Why a configured URL cannot be used. The messages never repeat the URL.
#[derive(Debug, thiserror::Error)]
pub enum SecretUrlError {
    /// The text is not a URL at all.
    #[error("not a valid URL")]
    Invalid(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A URL, but not `http` or `https`.
    #[error("not an http(s) URL")]
    NotHttp,
    /// A URL, but not of the scheme the broker takes.
    #[error("not a {} URL", .0.join(" or "))]
    WrongScheme(&'static [&'static str]),
}

impl SecretUrl {
    /// Parses an `http` or `https` URL with the HTTP client's own parser, so that what is shown and what is
    /// requested can never disagree.
    pub fn parse(text: &str) -> Result<Self, SecretUrlError> {
        let url = reqwest::Url::parse(text).map_err(|e| SecretUrlError::Invalid(Box::new(e)))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(SecretUrlError::NotHttp);
        }
        let shown = redact(&url);
        Ok(Self { url, shown })
    }

    /// Parses a broker URL (`nats://`, `redis://`, …) whose scheme is one of `schemes`. It is shown in the same
    /// redacted form: a broker URL's user info holds its password.
    pub fn parse_broker(text: &str, schemes: &'static [&'static str]) -> Result<Self, SecretUrlError> {
        let url = reqwest::Url::parse(text).map_err(|e| SecretUrlError::Invalid(Box::new(e)))?;
        if !schemes.contains(&url.scheme()) || url.host_str().is_none() {
            return Err(SecretUrlError::WrongScheme(schemes));
        }
        let shown = redact(&url);
        Ok(Self { url, shown })
    }

    /// The redacted form: scheme, host, non-default port and at most a harmless first path segment.
    pub fn redacted(&self) -> &str {
        &self.shown
    }

    /// The full URL, secrets included: only for building the request that is sent to it.
    pub(crate) fn expose(&self) -> &reqwest::Url {
        &self.url
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SecretUrl").field(&self.shown).finish()
    }
}

/// The redacted form of a parsed URL.
fn redact(url: &reqwest::Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    let segments: Vec<&str> = url.path().split('/').filter(|s| !s.is_empty()).collect();
    let elided = !segments.is_empty() || url.query().is_some() || url.fragment().is_some();
    match segments.as_slice() {
        [first, _, ..] if reads_like_a_word(first) => {
            shown.push('/');
            shown.push_str(first);
            shown.push_str("/…");
        }
        _ if elided => shown.push_str("/…"),
        _ => {}
    }
    shown
}

fn reads_like_a_word(segment: &str) -> bool {
    segment.len() <= SHOWN_SEGMENT_MAX_CHARS
        && segment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `text` with every `http://` or `https://` URL in it replaced by its redacted form; a URL that does not parse
/// is cut after its scheme (`https://…`). Borrowed when `text` holds no URL.
///
/// A URL ends at whitespace, a quote, `<`, `>`, `\` or a backtick; a closing `)` or `]` without its opening one
/// inside the URL, and trailing `.`, `,`, `;`, `:`, `!` or `?`, are taken to be the surrounding text's.
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    let Some(mut at) = find_scheme(text, 0) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    loop {
        let end = url_end(text, at);
        out.push_str(&text[copied..at]);
        let candidate = &text[at..end];
        match SecretUrl::parse(candidate) {
            Ok(url) => out.push_str(url.redacted()),
            Err(_) => {
                let scheme = &candidate[..candidate.find("://").map_or(0, |i| i + 3)];
                out.push_str(scheme);
                out.push('…');
            }
        }
        copied = end;
        match find_scheme(text, end) {
            Some(next) => at = next,
            None => break,
        }
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// The byte offset of the next `http://` or `https://` (in any case) at or after `from`.
fn find_scheme(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    (from..bytes.len()).find(|&i| {
        let rest = &bytes[i..];
        let starts = |prefix: &[u8]| rest.len() >= prefix.len() && rest[..prefix.len()].eq_ignore_ascii_case(prefix);
        starts(b"http://") || starts(b"https://")
    })
}

/// Where the URL starting at `start` ends (exclusive), by the rules of [`redact_urls`].
fn url_end(text: &str, start: usize) -> usize {
    let bytes = text.as_bytes();
    let mut end = bytes[start..]
        .iter()
        .position(|b| b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'<' | b'>' | b'\\' | b'`'))
        .map_or(bytes.len(), |n| start + n);
    loop {
        let token = &text[start..end];
        let trailing = match token.as_bytes().last() {
            Some(b'.' | b',' | b';' | b':' | b'!' | b'?') => true,
            Some(b')') => token.matches('(').count() < token.matches(')').count(),
            Some(b']') => token.matches('[').count() < token.matches(']').count(),
            _ => false,
        };
        // Never shorter than the scheme itself, so the loop ends and the slice stays inside the text.
        if !trailing || token.len() <= "http://".len() {
            return end;
        }
        end -= 1;
    }
}

/// Redacts every URL in what an outbox row shows of its failures: its last error and, for an alert, its text.
///
/// The dispatcher never writes a URL's secret parts into these, but a row recorded by an older version may hold
/// the HTTP client's message with the sink's full URL in it; every listing (API, dashboard, CLI) goes through here.
pub fn redact_outbox_row(row: &mut payhook_store::OutboxView) {
    if let Some(error) = &mut row.last_error
        && let std::borrow::Cow::Owned(redacted) = redact_urls(error)
    {
        *error = redacted;
    }
    if row.kind == payhook_store::OutboxKind::Alert {
        for field in ["text", "last_text"] {
            if let Some(serde_json::Value::String(text)) = row.payload.get_mut(field)
                && let std::borrow::Cow::Owned(redacted) = redact_urls(text)
            {
                *text = redacted;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        SecretUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}")).to_string()
    }

    #[test]
    fn a_slack_webhook_shows_its_host_and_first_segment_only() {
        assert_eq!(
            shown("https://hooks.slack.com/services/T000/B000/XXXXsecret"),
            "https://hooks.slack.com/services/…"
        );
    }

    #[test]
    fn user_info_is_never_shown() {
        assert_eq!(shown("https://user:pa55word@shop.example/"), "https://shop.example");
        assert_eq!(shown("https://token-only@shop.example/hooks/in"), "https://shop.example/hooks/…");
    }

    #[test]
    fn queries_and_fragments_are_elided() {
        assert_eq!(shown("https://shop.example/?token=s3cret"), "https://shop.example/…");
        assert_eq!(shown("https://shop.example#s3cret"), "https://shop.example/…");
        assert_eq!(shown("https://shop.example/api/in?token=s3cret#frag"), "https://shop.example/api/…");
    }

    #[test]
    fn deep_paths_keep_their_first_segment_and_a_single_segment_is_elided() {
        assert_eq!(shown("https://shop.example/a/b/c/d/s3cret"), "https://shop.example/a/…");
        assert_eq!(shown("https://webhook.site/8d3c2a8e-1f6b-4d4e-9b1e-3c0f5a7b9d21"), "https://webhook.site/…");
        assert_eq!(shown("https://shop.example/hooks/"), "https://shop.example/…");
    }

    #[test]
    fn a_token_like_first_segment_is_elided_too() {
        assert_eq!(
            shown("https://api.telegram.org/bot123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage"),
            "https://api.telegram.org/…"
        );
        assert_eq!(shown("https://shop.example/s3cr3t-PLANTED-token/in"), "https://shop.example/…");
    }

    #[test]
    fn ports_are_shown_unless_they_are_the_schemes_default() {
        assert_eq!(shown("https://shop.example:8443/hooks/payhook"), "https://shop.example:8443/hooks/…");
        assert_eq!(shown("https://shop.example:443/"), "https://shop.example");
        assert_eq!(shown("http://127.0.0.1:9000/x"), "http://127.0.0.1:9000/…");
    }

    #[test]
    fn ipv6_hosts_keep_their_brackets() {
        assert_eq!(shown("http://[::1]:8080/hooks/abc?k=v"), "http://[::1]:8080/hooks/…");
        assert_eq!(shown("https://[2001:db8::1]/"), "https://[2001:db8::1]");
    }

    #[test]
    fn no_path_shows_none() {
        assert_eq!(shown("https://shop.example"), "https://shop.example");
        assert_eq!(shown("https://shop.example/"), "https://shop.example");
    }

    #[test]
    fn debug_prints_the_redacted_form_too() {
        let url = SecretUrl::parse("https://u:p4ss@hooks.slack.com/services/T/B/s3cret?x=y").unwrap();
        let debug = format!("{url:?}");
        assert_eq!(debug, r#"SecretUrl("https://hooks.slack.com/services/…")"#);
        assert_eq!(url.expose().as_str(), "https://u:p4ss@hooks.slack.com/services/T/B/s3cret?x=y");
    }

    #[test]
    fn only_http_and_https_urls_are_accepted_and_errors_do_not_repeat_them() {
        for bad in ["ftp://s3cret@host/x", "mailto:s3cret@host", "s3cret", "https://", "https://host:99999/s3cret"] {
            let err = SecretUrl::parse(bad).map(|u| u.to_string()).unwrap_err();
            let text = format!("{err} {err:?}");
            assert!(!text.contains("s3cret"), "{bad}: {text}");
        }
    }

    #[test]
    fn urls_inside_a_text_are_redacted_and_the_rest_is_kept() {
        let text = "error sending request for url (https://hooks.slack.com/services/T0/B0/s3cret?token=s3cret): \
                    connection refused; see HTTP://u:s3cret@h.example/a/b/s3cret, or https://h.example/s3cret.";
        let out = redact_urls(text);
        assert!(!out.contains("s3cret"), "{out}");
        assert_eq!(
            out,
            "error sending request for url (https://hooks.slack.com/services/…): connection refused; see \
             http://h.example/a/…, or https://h.example/…."
        );
        assert!(matches!(redact_urls("no url here"), Cow::Borrowed(_)));
        assert_eq!(redact_urls("cut https://[::1 s3cret"), "cut https://… s3cret");
        assert_eq!(redact_urls("a \"https://h.example/x/s3cret\" b"), "a \"https://h.example/x/…\" b");
        assert_eq!(redact_urls("http://"), "http://…");
        assert_eq!(redact_urls("(http://h.example/path_(x)/s3cret)"), "(http://h.example/…)");
    }
}
