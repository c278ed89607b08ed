//! A delivery's request headers as they were received, and their stored form.
//!
//! Stored as a JSON object whose values are arrays of strings, each header's values in arrival order:
//! `{"stripe-signature": ["t=1,v1=ab", "t=1,v1=cd"], "content-type": ["application/json"]}`. Rows written
//! before that hold an object of strings, where a repeated header was written as a duplicate key; both read the
//! same way (a string is a one-value list, and a key seen again adds its values after the earlier ones), so no
//! stored row needs rewriting.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The request headers of a delivery: every value of a repeated header kept, in the order it arrived.
///
/// Names are lower case (HTTP field names are case-insensitive); headers are listed in the order their name
/// first appeared. Values that were not UTF-8 are kept with each invalid sequence replaced by U+FFFD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceivedHeaders {
    fields: Vec<(String, Vec<String>)>,
}

impl ReceivedHeaders {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one value of `name` after the values it already has.
    pub fn append(&mut self, name: &str, value: impl Into<String>) {
        let name = name.to_ascii_lowercase();
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => values.push(value.into()),
            None => self.fields.push((name, vec![value.into()])),
        }
    }

    /// Every value of `name` (any case), in arrival order; empty when it was not sent.
    pub fn get_all(&self, name: &str) -> &[String] {
        self.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map_or(&[], |(_, values)| values.as_slice())
    }

    /// Each header with its values, in the order the names first appeared.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.fields.iter().map(|(name, values)| (name.as_str(), values.as_slice()))
    }

    /// Whether there are no headers (a delivery whose headers were pruned, for one).
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The stored form: a JSON object of arrays.
    pub fn to_json(&self) -> String {
        // A map of strings to lists of strings always serializes.
        serde_json::to_string(self).unwrap_or_else(|_| unreachable!("headers serialize"))
    }

    /// Reads the stored form, either one: an object of arrays, or the older object of strings (with duplicate
    /// keys for repeated headers).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

impl<N: AsRef<str>, V: Into<String>> FromIterator<(N, V)> for ReceivedHeaders {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut headers = Self::new();
        for (name, value) in pairs {
            headers.append(name.as_ref(), value);
        }
        headers
    }
}

/// A format's header lookup reads the first value of a repeated header, as the live request's did.
impl payhook_core::signature::Headers for ReceivedHeaders {
    fn get(&self, name: &str) -> Option<&str> {
        self.get_all(name).first().map(String::as_str)
    }
}

impl Serialize for ReceivedHeaders {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (name, values) in &self.fields {
            map.serialize_entry(name, values)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ReceivedHeaders {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeadersVisitor)
    }
}

/// Visits every entry of the object in document order, so that duplicate keys are all seen (a map type would
/// keep only the last).
struct HeadersVisitor;

impl<'de> Visitor<'de> for HeadersVisitor {
    type Value = ReceivedHeaders;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of header names to a string or an array of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut headers = ReceivedHeaders::new();
        while let Some((name, values)) = map.next_entry::<String, OneOrMany>()? {
            for value in values.0 {
                headers.append(&name, value);
            }
        }
        Ok(headers)
    }
}

/// One header's stored values: a string (the older form) or an array of strings.
struct OneOrMany(Vec<String>);

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ValuesVisitor;

        impl<'de> Visitor<'de> for ValuesVisitor {
            type Value = OneOrMany;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![value.to_owned()]))
            }

            fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![value]))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(1));
                while let Some(value) = seq.next_element::<String>()? {
                    values.push(value);
                }
                Ok(OneOrMany(values))
            }
        }

        deserializer.deserialize_any(ValuesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payhook_core::signature::Headers;

    fn sample() -> ReceivedHeaders {
        [("Stripe-Signature", "t=1,v1=aa"), ("content-type", "application/json"), ("stripe-signature", "t=1,v1=bb")]
            .into_iter()
            .collect()
    }

    #[test]
    fn repeated_headers_keep_every_value_in_arrival_order() {
        let headers = sample();
        assert_eq!(headers.get_all("stripe-signature"), ["t=1,v1=aa", "t=1,v1=bb"]);
        assert_eq!(headers.get("STRIPE-SIGNATURE"), Some("t=1,v1=aa"), "a lookup reads the first value");
        assert_eq!(headers.get_all("x-missing"), [] as [String; 0]);
        let names: Vec<&str> = headers.iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["stripe-signature", "content-type"]);
    }

    #[test]
    fn the_stored_form_is_an_object_of_arrays_and_reads_back_the_same() {
        let headers = sample();
        let json = headers.to_json();
        assert_eq!(json, r#"{"stripe-signature":["t=1,v1=aa","t=1,v1=bb"],"content-type":["application/json"]}"#);
        assert_eq!(ReceivedHeaders::from_json(&json).unwrap(), headers);
    }

    #[test]
    fn an_older_row_of_strings_with_duplicate_keys_reads_as_lists_in_order() {
        let old =
            r#"{"stripe-signature":"t=1,v1=aa","content-type":"application/json","stripe-signature":"t=1,v1=bb"}"#;
        assert_eq!(ReceivedHeaders::from_json(old).unwrap(), sample());
        assert_eq!(ReceivedHeaders::from_json("{}").unwrap(), ReceivedHeaders::new());
    }

    #[test]
    fn anything_but_an_object_of_strings_or_string_arrays_is_refused() {
        for bad in ["[]", "\"x\"", r#"{"a":1}"#, r#"{"a":["b",2]}"#, r#"{"a":null}"#, "{", ""] {
            assert!(ReceivedHeaders::from_json(bad).is_err(), "{bad:?} was read");
        }
    }
}
