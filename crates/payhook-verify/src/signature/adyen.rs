//! Adyen's notification HMAC: the signature travels inside each notification item rather than in a header, and
//! covers eight of the item's fields instead of the raw body.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::{Encoding, Key, Scheme, Verified, VerifyError};

/// The most notification items one delivery may carry; Adyen batches far fewer, and the bound keeps a hostile
/// body from costing one HMAC per item without limit.
pub(super) const MAX_ITEMS: usize = 1_000;

/// The string Adyen signs for one `NotificationRequestItem` object:
/// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`.
///
/// `value` and `currency` come from the item's `amount` object. A missing field (or `null`) is an empty string, a
/// number is written in its JSON form and a string as sent; `success` is Adyen's `"true"`/`"false"` string (a JSON
/// boolean is written the same way). Values are joined as they are, without escaping, as Adyen's own libraries do.
pub fn adyen_signing_string(item: &Value) -> String {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let amount = &item["amount"];
    [
        text(&item["pspReference"]),
        text(&item["originalReference"]),
        text(&item["merchantAccountCode"]),
        text(&item["merchantReference"]),
        text(&amount["value"]),
        text(&amount["currency"]),
        text(&item["eventCode"]),
        text(&item["success"]),
    ]
    .join(":")
}

/// Parses an Adyen notification body into its document; the items are reached with [`items_mut`] or [`items`].
pub(super) fn parse(body: &[u8]) -> Result<Value, VerifyError> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|_| VerifyError::Malformed("Adyen notification is not JSON".into()))?;
    let count = doc["notificationItems"]
        .as_array()
        .ok_or_else(|| VerifyError::Malformed("Adyen notification has no notificationItems array".into()))?
        .len();
    if count == 0 {
        return Err(VerifyError::Malformed("Adyen notification has no items".into()));
    }
    if count > MAX_ITEMS {
        return Err(VerifyError::Malformed(format!("Adyen notification has more than {MAX_ITEMS} items")));
    }
    Ok(doc)
}

/// The `NotificationRequestItem` objects of a parsed notification, in order.
pub(super) fn items(doc: &Value) -> Result<Vec<&Value>, VerifyError> {
    let list = doc["notificationItems"].as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .enumerate()
        .map(|(i, wrapper)| match &wrapper["NotificationRequestItem"] {
            item @ Value::Object(_) => Ok(item),
            _ => Err(VerifyError::Malformed(format!("notification item #{i} has no NotificationRequestItem object"))),
        })
        .collect()
}

/// The `NotificationRequestItem` objects of a parsed notification, for filling in signatures.
pub(super) fn items_mut(doc: &mut Value) -> Result<Vec<&mut serde_json::Map<String, Value>>, VerifyError> {
    let list = doc["notificationItems"].as_array_mut().map(Vec::as_mut_slice).unwrap_or_default();
    list.iter_mut()
        .enumerate()
        .map(|(i, wrapper)| match &mut wrapper["NotificationRequestItem"] {
            Value::Object(item) => Ok(item),
            _ => Err(VerifyError::Malformed(format!("notification item #{i} has no NotificationRequestItem object"))),
        })
        .collect()
}

/// The base64 `additionalData.hmacSignature` of one item.
pub(super) fn signature_of(item: &Value, index: usize) -> Result<&str, VerifyError> {
    item["additionalData"]["hmacSignature"]
        .as_str()
        .ok_or_else(|| VerifyError::Malformed(format!("notification item #{index} has no hmacSignature")))
}

impl super::Verifier {
    pub(super) fn verify_adyen(&self, body: &[u8]) -> Result<Verified, VerifyError> {
        let doc = parse(body)?;
        let items = items(&doc)?;
        let mut first_index = None;
        for (i, item) in items.iter().enumerate() {
            let signature = signature_of(item, i)?;
            let signed = adyen_signing_string(item);
            let index = self
                .find_match(&[signed.as_bytes()], || std::iter::once(signature), Encoding::Base64, 32)
                .ok_or(VerifyError::Mismatch)?;
            first_index.get_or_insert(index);
        }
        let secret_index = first_index.ok_or(VerifyError::Mismatch)?;
        Ok(Verified { secret_index, delivery_id: None, timestamp: None, nonce: None })
    }

    /// Fills in `additionalData.hmacSignature` of every notification item of
    /// an Adyen notification body, signed with the first configured secret,
    /// and returns the re-serialised body.
    ///
    /// The item's other fields are kept; the JSON is re-encoded (Adyen's
    /// signature covers fields, not bytes). Fails with
    /// [`VerifyError::Malformed`] when the body is not an Adyen notification
    /// with at least one item, or when this verifier is not for
    /// [`Scheme::Adyen`].
    pub fn adyen_sign_body(&self, body: &[u8]) -> Result<Vec<u8>, VerifyError> {
        let (Scheme::Adyen, Some(key)) = (&self.scheme, self.keys.first().and_then(Key::mac)) else {
            return Err(VerifyError::Malformed("this verifier is not for Adyen".into()));
        };
        let mut doc = parse(body)?;
        for item in items_mut(&mut doc)? {
            let signed = adyen_signing_string(&serde_json::Value::Object(item.clone()));
            let signature = STANDARD.encode(key.compute(&[signed.as_bytes()]).into_bytes());
            let additional = item.entry("additionalData").or_insert_with(|| serde_json::json!({}));
            if !additional.is_object() {
                *additional = serde_json::json!({});
            }
            additional["hmacSignature"] = serde_json::Value::String(signature);
        }
        serde_json::to_vec(&doc).map_err(|_| VerifyError::Malformed("cannot re-encode the notification".into()))
    }
}
