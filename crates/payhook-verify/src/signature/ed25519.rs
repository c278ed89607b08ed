//! Ed25519 keys as Standard Webhooks (`whpk_` / `whsk_`) and RFC 9421 (`ed25519`) configure them.
//!
//! A public key can only verify; a private key can sign and also verify, through the public key derived from it,
//! so one secret serves both the sender and the receiver side of a test or of `payhook send`.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

/// An Ed25519 public key, with its signing half when the configured secret was private.
#[derive(Clone)]
pub(super) struct Ed25519Key {
    verifying: VerifyingKey,
    signing: Option<SigningKey>,
}

impl Ed25519Key {
    /// A verify-only key from its 32 raw bytes; rejects byte strings that are not a curve point.
    pub(super) fn from_public(bytes: &[u8]) -> Result<Self, &'static str> {
        let raw: &[u8; 32] = bytes.try_into().map_err(|_| "an Ed25519 public key is 32 bytes")?;
        let verifying = VerifyingKey::from_bytes(raw).map_err(|_| "not a valid Ed25519 public key")?;
        Ok(Self { verifying, signing: None })
    }

    /// A signing key from its 32-byte seed, or from the 64-byte seed-then-public-key form that the Standard
    /// Webhooks tooling writes (whose public half must then match the seed).
    pub(super) fn from_private(bytes: &[u8]) -> Result<Self, &'static str> {
        let (seed, public) = match bytes.len() {
            32 => (bytes, None),
            64 => {
                let (seed, public) = bytes.split_at(32);
                (seed, Some(public))
            }
            _ => return Err("an Ed25519 private key is a 32-byte seed or 64 bytes of seed and public key"),
        };
        let seed: &[u8; 32] = seed.try_into().map_err(|_| "an Ed25519 seed is 32 bytes")?;
        let signing = SigningKey::from_bytes(seed);
        let verifying = signing.verifying_key();
        if public.is_some_and(|p| p != verifying.as_bytes()) {
            return Err("the public half of the Ed25519 key does not belong to its seed");
        }
        Ok(Self { verifying, signing: Some(signing) })
    }

    /// Checks a 64-byte signature over `message`; any other length simply does not verify. Strict verification
    /// rejects the malleable and small-order forms that genuine signers never produce.
    pub(super) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(raw) = <&[u8; 64]>::try_from(signature) else {
            return false;
        };
        self.verifying.verify_strict(message, &Signature::from_bytes(raw)).is_ok()
    }

    /// Signs `message`, or returns `None` for a verify-only key.
    pub(super) fn sign(&self, message: &[u8]) -> Option<[u8; 64]> {
        self.signing.as_ref().map(|key| key.sign(message).to_bytes())
    }

    /// Whether this key can sign.
    pub(super) fn can_sign(&self) -> bool {
        self.signing.is_some()
    }
}
