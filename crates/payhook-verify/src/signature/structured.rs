//! The subset of RFC 8941 structured fields that HTTP message signatures and digests need: dictionaries whose
//! members are items or inner lists, each with parameters, and the serialization of an inner list.
//!
//! The parser follows RFC 8941 §4.2 and is bounded: a dictionary holds at most [`MAX_MEMBERS`] members and an
//! inner list at most [`MAX_ITEMS`] items, so a hostile header costs a bounded amount of work.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::key::LENIENT_BASE64;

/// Most members accepted in one dictionary.
pub const MAX_MEMBERS: usize = 32;
/// Most items accepted in one inner list.
pub const MAX_ITEMS: usize = 64;

/// A structured-field bare item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BareItem {
    /// An integer (at most 15 digits).
    Integer(i64),
    /// A decimal, kept as its validated text.
    Decimal(String),
    /// A string (printable ASCII), unescaped.
    String(String),
    /// A token.
    Token(String),
    /// A byte sequence, decoded.
    Bytes(Vec<u8>),
    /// A boolean.
    Boolean(bool),
}

/// Parameters in the order received; a repeated key keeps its first position and its last value.
pub type Parameters = Vec<(String, BareItem)>;

/// One dictionary member value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// A single item with its parameters.
    Item(BareItem, Parameters),
    /// An inner list of items (each with parameters) and the list's own parameters.
    InnerList(Vec<(BareItem, Parameters)>, Parameters),
}

/// A parse failure; the text says which rule was broken.
pub type ParseError = &'static str;

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.pos += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    fn key(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        match self.peek() {
            Some(b'a'..=b'z' | b'*') => self.pos += 1,
            _ => return Err("a key must start with a lowercase letter or '*'"),
        }
        while matches!(self.peek(), Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')) {
            self.pos += 1;
        }
        Ok(String::from_utf8_lossy(&self.input[start..self.pos]).into_owned())
    }

    fn bare_item(&mut self) -> Result<BareItem, ParseError> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string(),
            Some(b':') => self.bytes(),
            Some(b'?') => self.boolean(),
            Some(b'A'..=b'Z' | b'a'..=b'z' | b'*') => Ok(self.token()),
            _ => Err("not the start of an item"),
        }
    }

    fn number(&mut self) -> Result<BareItem, ParseError> {
        let start = self.pos;
        self.eat(b'-');
        let digits_start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        let int_digits = self.pos - digits_start;
        if int_digits == 0 {
            return Err("a number needs a digit");
        }
        if self.eat(b'.') {
            let frac_start = self.pos;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
            let frac_digits = self.pos - frac_start;
            if int_digits > 12 || !(1..=3).contains(&frac_digits) {
                return Err("a decimal has at most 12 integer and 1 to 3 fraction digits");
            }
            return Ok(BareItem::Decimal(String::from_utf8_lossy(&self.input[start..self.pos]).into_owned()));
        }
        if int_digits > 15 {
            return Err("an integer has at most 15 digits");
        }
        let text = std::str::from_utf8(&self.input[start..self.pos]).map_err(|_| "not ASCII")?;
        text.parse().map(BareItem::Integer).map_err(|_| "integer out of range")
    }

    fn string(&mut self) -> Result<BareItem, ParseError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string"),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(BareItem::String(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(c @ (b'"' | b'\\')) => out.push(char::from(c)),
                        _ => return Err("only \\\" and \\\\ may be escaped in a string"),
                    }
                }
                Some(c @ 0x20..=0x7e) => out.push(char::from(c)),
                Some(_) => return Err("a string holds printable ASCII only"),
            }
            self.pos += 1;
        }
    }

    fn token(&mut self) -> BareItem {
        let start = self.pos;
        self.pos += 1;
        while matches!(
            self.peek(),
            Some(b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
                | Some(b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' | b':' | b'/')
        ) {
            self.pos += 1;
        }
        BareItem::Token(String::from_utf8_lossy(&self.input[start..self.pos]).into_owned())
    }

    fn bytes(&mut self) -> Result<BareItem, ParseError> {
        self.pos += 1;
        let start = self.pos;
        while matches!(self.peek(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=')) {
            self.pos += 1;
        }
        let encoded = &self.input[start..self.pos];
        if !self.eat(b':') {
            return Err("unterminated byte sequence");
        }
        LENIENT_BASE64.decode(encoded).map(BareItem::Bytes).map_err(|_| "byte sequence is not base64")
    }

    fn boolean(&mut self) -> Result<BareItem, ParseError> {
        self.pos += 1;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                Ok(BareItem::Boolean(false))
            }
            Some(b'1') => {
                self.pos += 1;
                Ok(BareItem::Boolean(true))
            }
            _ => Err("a boolean is ?0 or ?1"),
        }
    }

    fn parameters(&mut self) -> Result<Parameters, ParseError> {
        let mut params: Parameters = Vec::new();
        while self.eat(b';') {
            self.skip_sp();
            let key = self.key()?;
            let value = if self.eat(b'=') { self.bare_item()? } else { BareItem::Boolean(true) };
            if let Some(slot) = params.iter_mut().find(|(k, _)| *k == key) {
                slot.1 = value;
            } else if params.len() < MAX_ITEMS {
                params.push((key, value));
            } else {
                return Err("too many parameters");
            }
        }
        Ok(params)
    }

    fn inner_list(&mut self) -> Result<Member, ParseError> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_sp();
            if self.eat(b')') {
                let params = self.parameters()?;
                return Ok(Member::InnerList(items, params));
            }
            if items.len() == MAX_ITEMS {
                return Err("too many items in an inner list");
            }
            let item = self.bare_item()?;
            let params = self.parameters()?;
            items.push((item, params));
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return Err("inner list items are separated by spaces");
            }
        }
    }

    fn member_value(&mut self) -> Result<Member, ParseError> {
        if self.peek() == Some(b'(') {
            return self.inner_list();
        }
        let item = self.bare_item()?;
        Ok(Member::Item(item, self.parameters()?))
    }
}

/// Parses a structured-field dictionary (RFC 8941 §4.2.2); members keep the order in which their key first
/// appeared, and a repeated key takes the last value.
pub fn parse_dictionary(text: &str) -> Result<Vec<(String, Member)>, ParseError> {
    let mut p = Parser { input: text.as_bytes(), pos: 0 };
    let mut members: Vec<(String, Member)> = Vec::new();
    p.skip_sp();
    if p.peek().is_none() {
        return Ok(members);
    }
    loop {
        let key = p.key()?;
        let value =
            if p.eat(b'=') { p.member_value()? } else { Member::Item(BareItem::Boolean(true), p.parameters()?) };
        if let Some(slot) = members.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else if members.len() < MAX_MEMBERS {
            members.push((key, value));
        } else {
            return Err("too many dictionary members");
        }
        p.skip_ows();
        if p.peek().is_none() {
            return Ok(members);
        }
        if !p.eat(b',') {
            return Err("dictionary members are separated by commas");
        }
        p.skip_ows();
        if p.peek().is_none() {
            return Err("a dictionary may not end with a comma");
        }
    }
}

/// Appends the RFC 8941 serialization of a string.
pub fn serialize_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

fn serialize_bare(out: &mut String, item: &BareItem) {
    match item {
        BareItem::Integer(n) => out.push_str(&n.to_string()),
        BareItem::Decimal(text) | BareItem::Token(text) => out.push_str(text),
        BareItem::String(s) => serialize_string(out, s),
        BareItem::Bytes(bytes) => {
            out.push(':');
            out.push_str(&STANDARD.encode(bytes));
            out.push(':');
        }
        BareItem::Boolean(b) => out.push_str(if *b { "?1" } else { "?0" }),
    }
}

/// Appends the serialization of parameters; a `true` boolean is written as the bare key.
pub fn serialize_parameters(out: &mut String, params: &Parameters) {
    for (key, value) in params {
        out.push(';');
        out.push_str(key);
        if *value != BareItem::Boolean(true) {
            out.push('=');
            serialize_bare(out, value);
        }
    }
}

/// Serializes an inner list with its parameters (RFC 8941 §4.1.1.1).
pub fn serialize_inner_list(items: &[(BareItem, Parameters)], params: &Parameters) -> String {
    let mut out = String::from("(");
    for (i, (item, item_params)) in items.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        serialize_bare(&mut out, item);
        serialize_parameters(&mut out, item_params);
    }
    out.push(')');
    serialize_parameters(&mut out, params);
    out
}
