//! HMAC machinery shared by every symmetric scheme: a keyed MAC whose key schedule is computed once, a tag
//! whose comparison is constant time, and the decoding of signature text into a fixed buffer.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use hmac::digest::{CtOutput, Output};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Sha256, Sha512};

use super::{Encoding, HmacAlgorithm};

type HmacSha1 = Hmac<Sha1>;
type HmacSha256 = Hmac<Sha256>;
type HmacSha512 = Hmac<Sha512>;

/// Largest decoded signature we ever need to hold (HMAC-SHA512 is 64 bytes);
/// a little slack keeps base64's conservative length estimate happy.
pub(super) const SIG_BUF_LEN: usize = 72;

/// An HMAC with its key schedule already computed, cloned per request so the
/// key never has to be re-hashed.
#[derive(Clone)]
pub(super) enum KeyedMac {
    Sha1(HmacSha1),
    Sha256(HmacSha256),
    Sha512(HmacSha512),
}

impl KeyedMac {
    pub(super) fn new(algorithm: HmacAlgorithm, key: &[u8]) -> Result<Self, hmac::digest::InvalidLength> {
        Ok(match algorithm {
            HmacAlgorithm::Sha1 => Self::Sha1(HmacSha1::new_from_slice(key)?),
            HmacAlgorithm::Sha256 => Self::Sha256(HmacSha256::new_from_slice(key)?),
            HmacAlgorithm::Sha512 => Self::Sha512(HmacSha512::new_from_slice(key)?),
        })
    }

    /// MACs the concatenation of `parts` without building it in memory.
    pub(super) fn compute(&self, parts: &[&[u8]]) -> Tag {
        match self {
            Self::Sha1(mac) => {
                let mut mac = mac.clone();
                for part in parts {
                    mac.update(part);
                }
                Tag::Sha1(mac.finalize())
            }
            Self::Sha256(mac) => {
                let mut mac = mac.clone();
                for part in parts {
                    mac.update(part);
                }
                Tag::Sha256(mac.finalize())
            }
            Self::Sha512(mac) => {
                let mut mac = mac.clone();
                for part in parts {
                    mac.update(part);
                }
                Tag::Sha512(mac.finalize())
            }
        }
    }
}

/// A computed MAC; its equality is constant time (via `subtle`).
pub(super) enum Tag {
    Sha1(CtOutput<HmacSha1>),
    Sha256(CtOutput<HmacSha256>),
    Sha512(CtOutput<HmacSha512>),
}

impl Tag {
    /// Constant-time comparison with a candidate; lengths must match exactly,
    /// so a truncated signature never verifies.
    pub(super) fn matches(&self, candidate: &[u8]) -> bool {
        match self {
            Self::Sha1(tag) => {
                candidate.len() == 20 && CtOutput::<HmacSha1>::from(Output::<HmacSha1>::from_slice(candidate)) == *tag
            }
            Self::Sha256(tag) => {
                candidate.len() == 32
                    && CtOutput::<HmacSha256>::from(Output::<HmacSha256>::from_slice(candidate)) == *tag
            }
            Self::Sha512(tag) => {
                candidate.len() == 64
                    && CtOutput::<HmacSha512>::from(Output::<HmacSha512>::from_slice(candidate)) == *tag
            }
        }
    }

    pub(super) fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Sha1(tag) => tag.into_bytes().to_vec(),
            Self::Sha256(tag) => tag.into_bytes().to_vec(),
            Self::Sha512(tag) => tag.into_bytes().to_vec(),
        }
    }
}

/// Decodes one signature value into `buf`, returning `None` when it is not
/// valid in `encoding` or does not have the length of an `expected`-byte MAC.
/// Such values simply do not match; they are not an error on their own.
pub(super) fn decode_signature<'b>(
    encoding: Encoding,
    value: &str,
    expected: usize,
    buf: &'b mut [u8; SIG_BUF_LEN],
) -> Option<&'b [u8]> {
    match encoding {
        Encoding::Hex => {
            if value.len() != expected * 2 {
                return None;
            }
            let out = buf.get_mut(..expected)?;
            hex::decode_to_slice(value, out).ok()?;
            Some(out)
        }
        Encoding::Base64 => {
            if value.len() != expected.div_ceil(3) * 4 {
                return None;
            }
            let n = STANDARD.decode_slice(value, buf).ok()?;
            buf.get(..n)
        }
        // Senders of the URL-safe alphabet differ about padding; both forms of the exact length are accepted.
        Encoding::Base64Url => {
            let n = if value.ends_with('=') {
                (value.len() == expected.div_ceil(3) * 4).then_some(())?;
                URL_SAFE.decode_slice(value, buf).ok()?
            } else {
                (value.len() == (expected * 4).div_ceil(3)).then_some(())?;
                URL_SAFE_NO_PAD.decode_slice(value, buf).ok()?
            };
            buf.get(..n).filter(|sig| sig.len() == expected)
        }
    }
}
