//! `json_pointer::get` answers as `serde_json::Value::pointer` does, for any document and any pointer built from
//! its keys, indexes and the characters RFC 6901 escapes.

use payhook_verify::json_pointer;
use proptest::prelude::*;
use serde_json::Value;

/// Keys and tokens from a small alphabet, so that pointers often hit: escapes, digits, leading zeros and signs.
fn token() -> impl Strategy<Value = String> {
    proptest::string::string_regex("(~0|~1|~|/|a|b|0|1|01|-|\\+)*").expect("a valid regex")
}

fn document() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![Just(Value::Null), any::<i64>().prop_map(Value::from), token().prop_map(Value::from)];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(token(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A pointer that follows `doc`: each step takes an existing key (escaped) or index, or, by `how`, writes the index
/// with a leading zero or a sign, or uses a token that is not there.
fn pointer_into(doc: &Value, steps: &[(usize, u8)]) -> String {
    let mut pointer = String::new();
    let mut at = Some(doc);
    for &(pick, how) in steps {
        let token = match (at, how) {
            (Some(Value::Object(map)), 0..=2) if !map.is_empty() => {
                let (key, next) = map.iter().nth(pick % map.len()).expect("in range");
                at = Some(next);
                key.replace('~', "~0").replace('/', "~1")
            }
            (Some(Value::Array(list)), 0..=2) if !list.is_empty() => {
                let i = pick % list.len();
                at = list.get(i);
                ["", "0", "+"][usize::from(how)].to_owned() + &i.to_string()
            }
            _ => {
                at = None;
                ["-", "", "~", "~2", "a", "0"][pick % 6].to_owned()
            }
        };
        pointer.push('/');
        pointer.push_str(&token);
    }
    pointer
}

proptest! {
    #[test]
    fn resolves_every_pointer_as_serde_json(doc in document(), tokens in proptest::collection::vec(token(), 0..4),
                                            steps in proptest::collection::vec((any::<usize>(), 0u8..4), 0..5),
                                            bare in any::<bool>()) {
        let built: String = tokens.iter().map(|t| format!("/{t}")).collect();
        let built = if bare { built.trim_start_matches('/').to_owned() } else { built };
        let walked = pointer_into(&doc, &steps);
        for pointer in [built, walked] {
            prop_assert_eq!(json_pointer::get(&doc, &pointer), doc.pointer(&pointer), "pointer {:?}", pointer);
        }
    }
}
