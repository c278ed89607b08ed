//! The `{…}` template syntax shared by signature rules (`signed`), declared formats and confirmation paths:
//! literal text and placeholders, with `{{` and `}}` for literal braces.

/// Splits a `{…}` template into literal text and placeholders; `{{` and `}}` are literal braces.
pub(crate) fn split_template(template: &str) -> Result<Vec<(bool, String)>, String> {
    let mut out: Vec<(bool, String)> = Vec::new();
    let mut literal = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err(format!("unclosed placeholder {{{name}")),
                    }
                }
                if !literal.is_empty() {
                    out.push((false, std::mem::take(&mut literal)));
                }
                out.push((true, name));
            }
            '}' => return Err("a '}' without its '{' (write '}}' for a literal brace)".into()),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        out.push((false, literal));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_into_literals_and_placeholders_with_escaped_braces() {
        let parts = split_template("id:{query:data.id};{{x}}{body}").unwrap();
        assert_eq!(
            parts,
            [
                (false, "id:".to_owned()),
                (true, "query:data.id".to_owned()),
                (false, ";{x}".to_owned()),
                (true, "body".to_owned())
            ]
        );
        assert!(split_template("{body").is_err());
        assert!(split_template("body}").is_err());
    }
}
