//! JSON pointers (RFC 6901) resolved without allocating.
//!
//! Every format reads its fields through pointers such as `/data/order_id`. `serde_json::Value::pointer` gives the
//! same answers, but builds two `String`s per reference token (it unescapes `~1` and `~0` with `str::replace`) on
//! every read: several per delivery, on the path every webhook takes. Here a token is borrowed from the pointer and
//! only a token that holds a `~` is unescaped.

use serde_json::Value;
use std::borrow::Cow;

/// The value `pointer` refers to in `root`, exactly as [`Value::pointer`] resolves it: `""` is the whole document,
/// any other pointer starts with `/`, `~1` reads as `/` and `~0` as `~`, and an array index is a decimal number
/// without a sign or a leading zero.
pub fn get<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(root, |target, token| {
        let token = unescape(token);
        match target {
            Value::Object(map) => map.get(token.as_ref()),
            Value::Array(list) => index(&token).and_then(|i| list.get(i)),
            _ => None,
        }
    })
}

fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') { Cow::Owned(token.replace("~1", "/").replace("~0", "~")) } else { Cow::Borrowed(token) }
}

/// An array index as RFC 6901 writes it: `0`, or digits without a leading zero (no sign, no `+`).
fn index(token: &str) -> Option<usize> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::get;
    use serde_json::json;

    #[test]
    fn resolves_as_serde_json_does() {
        let doc = json!({
            "data": {"order_id": "o_1", "amount": 1999, "items": [{"id": "a"}, {"id": "b"}]},
            "a/b": 1, "m~n": 2, "": 3, "~1": 4, " ": 5,
        });
        for p in [
            "",
            "/",
            "/data",
            "/data/order_id",
            "/data/items/1/id",
            "/data/items/01",
            "/data/items/-",
            "/data/items/2",
            "/data/items/+1",
            "/a~1b",
            "/m~0n",
            "/~01",
            "/ ",
            "data",
            "/data/amount/x",
            "/missing/deeper",
        ] {
            assert_eq!(get(&doc, p), doc.pointer(p), "pointer {p:?}");
        }
        assert_eq!(get(&doc, "/data/items/1/id"), Some(&json!("b")));
    }
}
