//! JSON request bodies of the `/v1` routes: one JSON object, every field known, or a 422 naming what was wrong,
//! before the handler does anything.
//!
//! serde reads a struct from a JSON array too (its fields in order), so `[]` would be a bulk replay with every
//! field at its default: no filter, no dry run. A body is therefore taken only when it is an object (its first
//! character other than whitespace is `{`), nested structs only through [`object`], and every request type says
//! `#[serde(deny_unknown_fields)]`.

use crate::http::error::ApiError;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use payhook_store::Store;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A route's JSON body: `None` when the body is empty (each route says whether that is allowed), else the one
/// JSON object `T` takes whole.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) Option<T>);

impl<S: Store, T: DeserializeOwned> FromRequest<Arc<AppState<S>>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState<S>>) -> Result<Self, ApiError> {
        let limit = state.settings.body_limit_bytes;
        let body = Bytes::from_request(request, state).await.map_err(|r| ApiError::from_bytes_rejection(r, limit))?;
        parse(&body).map(JsonBody)
    }
}

/// The body of a route that takes none: nothing, or `{}`.
#[derive(Debug, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoFields {}

/// `body` as one JSON object of type `T`; `None` when it is empty or only whitespace.
pub(crate) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<Option<T>, ApiError> {
    let Some(first) = body.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Ok(None);
    };
    if *first != b'{' {
        return Err(ApiError::Invalid(format!("the body must be a JSON object, not {}", what(*first))));
    }
    serde_json::from_slice(body).map(Some).map_err(|e| ApiError::Invalid(format!("the body is refused: {e}")))
}

/// What a JSON text starting with `first` is, for the message.
fn what(first: u8) -> &'static str {
    match first {
        b'[' => "an array",
        b'"' => "a string",
        b'n' => "null",
        b't' | b'f' => "a boolean",
        b'-' | b'0'..=b'9' => "a number",
        _ => "JSON",
    }
}

/// Reads a nested struct only from a JSON object (`#[serde(deserialize_with = "crate::http::json_body::object")]`),
/// never from an array.
pub(crate) fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
    T::deserialize(serde_json::Value::Object(map)).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[serde(default)]
        a: Option<u32>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default, deserialize_with = "object")]
        inner: Inner,
        #[serde(default)]
        flag: bool,
    }

    fn refused(body: &str) -> String {
        match parse::<Outer>(body.as_bytes()) {
            Err(ApiError::Invalid(message)) => message,
            other => panic!("{body:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn only_an_object_with_known_fields_is_taken() {
        assert_eq!(parse::<Outer>(b" \n").unwrap(), None);
        let taken = parse::<Outer>(br#" {"inner": {"a": 1}, "flag": true}"#).unwrap();
        assert_eq!(taken, Some(Outer { inner: Inner { a: Some(1) }, flag: true }));
        assert_eq!(refused("[]"), "the body must be a JSON object, not an array");
        assert_eq!(refused("[{}, true]"), "the body must be a JSON object, not an array");
        assert_eq!(refused("\"x\""), "the body must be a JSON object, not a string");
        assert_eq!(refused("null"), "the body must be a JSON object, not null");
        assert_eq!(refused("true"), "the body must be a JSON object, not a boolean");
        assert_eq!(refused("-1"), "the body must be a JSON object, not a number");
        assert!(refused(r#"{"unknown": 1}"#).contains("unknown field `unknown`"), "{}", refused(r#"{"unknown": 1}"#));
        assert!(refused(r#"{"inner": []}"#).contains("invalid type: sequence"), "{}", refused(r#"{"inner": []}"#));
        assert!(refused(r#"{"inner": {"b": 1}}"#).contains("unknown field `b`"));
        assert!(refused(r#"{"flag": "yes"}"#).contains("invalid type"));
        assert!(refused("{").contains("EOF"));
        assert!(parse::<NoFields>(b"{}").unwrap().is_some());
        assert!(parse::<NoFields>(br#"{"x": 1}"#).is_err());
    }
}
