//! The account key and the JSON Web Signatures (RFC 7515, ES256) every ACME request carries.

use openssl::bn::BigNumContext;
use openssl::ec::{EcGroup, EcKey};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::{hash, MessageDigest};
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use serde_json::{json, Value};

/// base64url without padding (RFC 7515 §2).
pub fn b64(bytes: &[u8]) -> String {
    openssl::base64::encode_block(bytes)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_")
}

/// A fresh ECDSA P-256 key.
pub fn new_p256_key() -> Result<PKey<Private>, String> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| e.to_string())?;
    let key = EcKey::generate(&group).map_err(|e| e.to_string())?;
    PKey::from_ec_key(key).map_err(|e| e.to_string())
}

/// The ACME account's key pair.
pub struct AccountKey {
    key: PKey<Private>,
    /// The public key as a JWK, members in the order RFC 7638 hashes them.
    jwk: Value,
    /// RFC 7638 thumbprint: the second half of every key authorization.
    pub thumbprint: String,
}

impl AccountKey {
    pub fn new(key: PKey<Private>) -> Result<AccountKey, String> {
        let ec = key
            .ec_key()
            .map_err(|_| "the account key is not an EC key".to_string())?;
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| e.to_string())?;
        let mut ctx = BigNumContext::new().map_err(|e| e.to_string())?;
        let (mut x, mut y) = (
            openssl::bn::BigNum::new().map_err(|e| e.to_string())?,
            openssl::bn::BigNum::new().map_err(|e| e.to_string())?,
        );
        ec.public_key()
            .affine_coordinates(&group, &mut x, &mut y, &mut ctx)
            .map_err(|_| "the account key is not a P-256 key".to_string())?;
        let coordinate = |n: &openssl::bn::BigNum| n.to_vec_padded(32).map(|v| b64(&v));
        let (x, y) = (
            coordinate(&x).map_err(|e| e.to_string())?,
            coordinate(&y).map_err(|e| e.to_string())?,
        );
        // Lexicographic member order and no whitespace: the thumbprint's canonical form.
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        let digest =
            hash(MessageDigest::sha256(), canonical.as_bytes()).map_err(|e| e.to_string())?;
        Ok(AccountKey {
            key,
            jwk: json!({"crv": "P-256", "kty": "EC", "x": x, "y": y}),
            thumbprint: b64(&digest),
        })
    }

    /// The flattened JWS of `payload` (None: POST-as-GET's empty payload) for `url`,
    /// identified by the account URL `kid` or, before there is one, by the key itself.
    pub fn sign(
        &self,
        url: &str,
        nonce: &str,
        kid: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<Vec<u8>, String> {
        let mut protected = json!({"alg": "ES256", "nonce": nonce, "url": url});
        match kid {
            Some(kid) => protected["kid"] = json!(kid),
            None => protected["jwk"] = self.jwk.clone(),
        }
        let protected = b64(protected.to_string().as_bytes());
        let payload = payload.map_or_else(String::new, |p| b64(p.to_string().as_bytes()));
        let signing_input = format!("{protected}.{payload}");
        let digest =
            hash(MessageDigest::sha256(), signing_input.as_bytes()).map_err(|e| e.to_string())?;
        let ec = self.key.ec_key().map_err(|e| e.to_string())?;
        let sig = EcdsaSig::sign(&digest, &ec).map_err(|e| e.to_string())?;
        // JWS wants r || s, each 32 bytes, not DER.
        let mut raw = sig.r().to_vec_padded(32).map_err(|e| e.to_string())?;
        raw.extend(sig.s().to_vec_padded(32).map_err(|e| e.to_string())?);
        let body = json!({"protected": protected, "payload": payload, "signature": b64(&raw)});
        Ok(body.to_string().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_has_no_padding_and_url_safe_letters() {
        assert_eq!(b64(&[0xfb, 0xff]), "-_8");
        assert_eq!(b64(b""), "");
    }

    #[test]
    fn a_signature_verifies_with_the_account_key() {
        let key = new_p256_key().unwrap();
        let account = AccountKey::new(key.clone()).unwrap();
        let body: Value = serde_json::from_slice(
            &account
                .sign("https://a/b", "n", Some("k"), Some(&json!({})))
                .unwrap(),
        )
        .unwrap();
        let input = format!(
            "{}.{}",
            body["protected"].as_str().unwrap(),
            body["payload"].as_str().unwrap()
        );
        let mut sig64 = body["signature"].as_str().unwrap().replace('-', "+");
        sig64 = sig64.replace('_', "/");
        sig64.push_str(&"=".repeat((4 - sig64.len() % 4) % 4));
        let raw = openssl::base64::decode_block(&sig64).unwrap();
        let r = openssl::bn::BigNum::from_slice(&raw[..32]).unwrap();
        let s = openssl::bn::BigNum::from_slice(&raw[32..]).unwrap();
        let sig = EcdsaSig::from_private_components(r, s).unwrap();
        let digest = hash(MessageDigest::sha256(), input.as_bytes()).unwrap();
        assert!(sig.verify(&digest, &key.ec_key().unwrap()).unwrap());
    }
}
