//! Confirmation from the provider's API: for a provider whose signature does not cover the body (Mercado Pago signs
//! the resource id, a request id and the time), the effect is read from the provider's own answer about the signed
//! resource, not from the notification's unsigned body.
//!
//! A preset says how in its `[confirm]` table: the API's base URL, the path of the resource built from the parts
//! the signature covers (`/v1/orders/{query:data.id}`), the answer's field that must repeat the signed id, and a
//! `[confirm.format]` that reads the answer as any declared format reads a body. The request itself (a `GET` with
//! the provider's access token) is the server's; this module builds its path and reads its answer, without IO.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::event::Event;
use crate::format::{DeclaredFormat, Format, FormatSpec, FormatSpecError, ParseError};
use crate::request::Headers;

/// A preset's `[confirm]` table as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmSpec {
    /// The API's base URL (`https://api.mercadopago.com`); a source may point it elsewhere (a sandbox, a test).
    pub base_url: String,
    /// The resource's path, a template of literal text and `{query:NAME}` / `{header:NAME}` parts the signature
    /// covers.
    pub path: String,
    /// Where the provider documents the resource.
    pub docs: String,
    /// Fields of the answer that must repeat a signed part (ASCII case aside), as `signature.body_must_match`.
    #[serde(default)]
    pub answer_must_match: BTreeMap<String, String>,
    /// How the answer is read.
    pub format: FormatSpec,
}

/// One piece of the path template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathPart {
    Text(String),
    Query(String),
    Header(String),
}

/// A compiled `[confirm]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    base_url: String,
    path: Vec<PathPart>,
    answer_must_match: Vec<(String, PathPart)>,
    format: Format,
}

/// Why a delivery could not be confirmed from what it carries, or the answer does not confirm it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfirmError {
    /// A signed part the path needs is absent.
    #[error("the delivery has no {0}, which the confirmation's path needs")]
    Missing(String),
    /// The answer is about another resource than the signed one.
    #[error("the provider's answer {0} is not the signed resource's")]
    OtherResource(String),
    /// The answer cannot be read.
    #[error("the provider's answer cannot be read: {0}")]
    Answer(#[from] ParseError),
}

fn compile_part(text: &str) -> Result<PathPart, String> {
    match text.split_once(':') {
        Some(("query", name)) if !name.is_empty() => Ok(PathPart::Query(name.to_owned())),
        Some(("header", name)) if !name.is_empty() => Ok(PathPart::Header(name.to_ascii_lowercase())),
        _ => Err(format!("{{{text}}}: expected {{query:NAME}} or {{header:NAME}}")),
    }
}

/// Percent-encodes everything but letters, digits, `-`, `_` and `~`, so a value stays one path segment.
fn path_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Confirm {
    /// Checks `spec` and compiles it under the preset's `name`.
    pub fn new(name: &str, spec: &ConfirmSpec) -> Result<Self, FormatSpecError> {
        let err = |key: &str, reason: String| FormatSpecError { key: format!("confirm.{key}"), reason };
        if !(spec.base_url.starts_with("https://") || spec.base_url.starts_with("http://")) {
            return Err(err("base_url", "must be an http(s) URL".into()));
        }
        let pieces = crate::template::split_template(&spec.path).map_err(|e| err("path", e))?;
        let path = pieces
            .into_iter()
            .map(|(placeholder, t)| if placeholder { compile_part(&t) } else { Ok(PathPart::Text(t)) })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err("path", e))?;
        if !path.iter().any(|p| !matches!(p, PathPart::Text(_))) {
            return Err(err("path", "must name the signed resource ({query:NAME} or {header:NAME})".into()));
        }
        let answer_must_match = spec
            .answer_must_match
            .iter()
            .map(|(pointer, part)| Ok((pointer.clone(), compile_part(part).map_err(|e| err("answer_must_match", e))?)))
            .collect::<Result<Vec<_>, FormatSpecError>>()?;
        let format = DeclaredFormat::new(name, &spec.format)
            .map_err(|e| FormatSpecError { key: format!("confirm.format.{}", e.key), reason: e.reason })?;
        Ok(Self {
            base_url: spec.base_url.trim_end_matches('/').to_owned(),
            path,
            answer_must_match,
            format: Format::Declared(std::sync::Arc::new(format)),
        })
    }

    /// The API's base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The header and query names the path and the answer's checks read: each must be covered by the signature.
    pub fn reads(&self) -> impl Iterator<Item = String> + '_ {
        self.path.iter().chain(self.answer_must_match.iter().map(|(_, p)| p)).filter_map(|p| match p {
            PathPart::Text(_) => None,
            PathPart::Query(n) => Some(format!("query:{n}")),
            PathPart::Header(n) => Some(format!("header:{n}")),
        })
    }

    fn value(part: &PathPart, request: &(impl Headers + ?Sized)) -> Result<String, ConfirmError> {
        match part {
            PathPart::Text(t) => Ok(t.clone()),
            PathPart::Header(h) => {
                request.get(h).map(str::to_owned).ok_or_else(|| ConfirmError::Missing(format!("header {h}")))
            }
            PathPart::Query(name) => {
                let query = request.derived("@query").unwrap_or(std::borrow::Cow::Borrowed("?"));
                let query = query.strip_prefix('?').unwrap_or(&query);
                form_urlencoded::parse(query.as_bytes())
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| ConfirmError::Missing(format!("query parameter {name}")))
            }
        }
    }

    /// The resource's path for a verified request (values percent-encoded as one segment each).
    pub fn path_for(&self, request: &(impl Headers + ?Sized)) -> Result<String, ConfirmError> {
        let mut out = String::new();
        for part in &self.path {
            match part {
                PathPart::Text(t) => out.push_str(t),
                other => out.push_str(&path_segment(&Self::value(other, request)?)),
            }
        }
        Ok(out)
    }

    /// The events of the provider's `answer` about the resource a verified `request` names: the answer must be
    /// about that resource, and is read with `[confirm.format]`.
    pub fn events(&self, request: &(impl Headers + ?Sized), answer: &[u8]) -> Result<Vec<Event>, ConfirmError> {
        let json: Value = serde_json::from_slice(answer).map_err(|e| ParseError::Json(e.to_string()))?;
        for (pointer, part) in &self.answer_must_match {
            let signed = Self::value(part, request)?;
            let stated = match crate::json_pointer::get(&json, pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Number(_)) => v.to_string(),
                _ => String::new(),
            };
            if !stated.eq_ignore_ascii_case(&signed) {
                return Err(ConfirmError::OtherResource(pointer.clone()));
            }
        }
        Ok(self.format.parse_answer(answer)?)
    }

    /// The format that reads the provider's answers: a stored confirmation is replayed with it.
    pub fn format(&self) -> &Format {
        &self.format
    }
}

impl Format {
    /// Parses a provider's answer (a body without headers) into its events.
    fn parse_answer(&self, answer: &[u8]) -> Result<Vec<Event>, ParseError> {
        let no_headers: [(&str, &str); 0] = [];
        self.parse_delivery(&no_headers, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_value_is_one_segment_whatever_it_holds() {
        assert_eq!(path_segment("ORD01ABC"), "ORD01ABC");
        assert_eq!(path_segment("../admin?x=1#"), "%2E%2E%2Fadmin%3Fx%3D1%23");
    }
}
