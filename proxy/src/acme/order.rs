//! One certificate order (RFC 8555 §7.4): account, order, authorizations, a challenge of
//! the preferred type the server offers (HTTP-01 or TLS-ALPN-01), finalize with a CSR,
//! download.

use std::time::{Duration, Instant};

use config::AcmeChallenge;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::stack::Stack;
use openssl::x509::extension::SubjectAlternativeName;
use openssl::x509::{X509NameBuilder, X509ReqBuilder};
use serde_json::{json, Value};

use super::client::{Client, Response};
use super::jws::{b64, AccountKey};

/// How long an order may take from the first request to the certificate.
const ORDER_DEADLINE: Duration = Duration::from_secs(90);
/// Pause between polls of an authorization or an order in progress.
const POLL: Duration = Duration::from_millis(500);
/// Times a request is signed again after the server refused its nonce (RFC 8555 §6.5).
const BAD_NONCE_RETRIES: u32 = 5;

/// A challenge to answer: published before the server is told to validate, withdrawn
/// after.
pub struct Challenge<'a> {
    pub kind: AcmeChallenge,
    /// The HTTP-01 token (the file name under `/.well-known/acme-challenge/`).
    pub token: &'a str,
    /// The identifier validated (TLS-ALPN-01 answers by its server name).
    pub domain: &'a str,
    pub key_authorization: &'a str,
}

/// Makes the listeners answer a challenge (`true`) or stop answering it (`false`).
pub type Publish<'p> = &'p dyn Fn(&Challenge<'_>, bool) -> Result<(), String>;

/// A session with the ACME server: the directory, the latest nonce, the account URL.
pub struct Session<'a> {
    client: &'a Client,
    key: &'a AccountKey,
    directory: Value,
    nonce: Option<String>,
    kid: Option<String>,
}

impl<'a> Session<'a> {
    pub fn open(
        client: &'a Client,
        key: &'a AccountKey,
        directory_url: &str,
    ) -> Result<Session<'a>, String> {
        let r = client.request("GET", directory_url, None)?;
        if r.status != 200 {
            return Err(format!("directory {directory_url}: status {}", r.status));
        }
        let directory = serde_json::from_slice(&r.body)
            .map_err(|e| format!("directory {directory_url}: {e}"))?;
        Ok(Session {
            client,
            key,
            directory,
            nonce: None,
            kid: None,
        })
    }

    fn endpoint(&self, name: &str) -> Result<String, String> {
        self.directory[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("the ACME directory has no `{name}`"))
    }

    fn fresh_nonce(&mut self) -> Result<String, String> {
        if let Some(n) = self.nonce.take() {
            return Ok(n);
        }
        let r = self
            .client
            .request("HEAD", &self.endpoint("newNonce")?, None)?;
        r.header("replay-nonce")
            .map(str::to_string)
            .ok_or_else(|| "newNonce gave no Replay-Nonce".to_string())
    }

    /// A signed POST (None: POST-as-GET); an error status becomes the server's problem text.
    fn post(&mut self, url: &str, payload: Option<&Value>) -> Result<Response, String> {
        for _ in 0..=BAD_NONCE_RETRIES {
            let nonce = self.fresh_nonce()?;
            let body = self.key.sign(url, &nonce, self.kid.as_deref(), payload)?;
            let r = self.client.request("POST", url, Some(&body))?;
            self.nonce = r.header("replay-nonce").map(str::to_string);
            if r.status < 400 {
                return Ok(r);
            }
            let problem: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            if problem["type"].as_str() == Some("urn:ietf:params:acme:error:badNonce") {
                continue;
            }
            return Err(format!(
                "{url}: status {}: {}",
                r.status,
                problem["detail"].as_str().unwrap_or("(no detail)")
            ));
        }
        Err(format!(
            "{url}: the server refused {} nonces in a row",
            BAD_NONCE_RETRIES + 1
        ))
    }

    fn post_json(
        &mut self,
        url: &str,
        payload: Option<&Value>,
    ) -> Result<(Value, Response), String> {
        let r = self.post(url, payload)?;
        let v = serde_json::from_slice(&r.body).map_err(|e| format!("{url}: not JSON: {e}"))?;
        Ok((v, r))
    }

    /// Registers the account (or finds it: same key, same account).
    pub fn account(&mut self, contact: &[String]) -> Result<(), String> {
        let url = self.endpoint("newAccount")?;
        let r = self.post(
            &url,
            Some(&json!({"termsOfServiceAgreed": true, "contact": contact})),
        )?;
        self.kid = Some(
            r.header("location")
                .ok_or("newAccount gave no account URL")?
                .to_string(),
        );
        Ok(())
    }

    /// Orders a certificate for `domain`, answering each authorization with the first type
    /// of `preference` the server offers; `publish` makes the listeners answer it until the
    /// authorization ends. The certificate chain (PEM) and its new key.
    pub fn order(
        &mut self,
        domain: &str,
        preference: &[AcmeChallenge],
        publish: Publish<'_>,
    ) -> Result<(String, PKey<Private>), String> {
        let deadline = Instant::now() + ORDER_DEADLINE;
        let new_order = self.endpoint("newOrder")?;
        let (order, r) = self.post_json(
            &new_order,
            Some(&json!({"identifiers": [{"type": "dns", "value": domain}]})),
        )?;
        let order_url = r
            .header("location")
            .ok_or("newOrder gave no order URL")?
            .to_string();
        let authorizations: Vec<String> = order["authorizations"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        for authz in &authorizations {
            self.authorize(authz, domain, preference, publish, deadline)?;
        }
        let key = super::jws::new_p256_key()?;
        let csr = csr(domain, &key).map_err(|e| format!("CSR for {domain}: {e}"))?;
        let finalize = order["finalize"]
            .as_str()
            .ok_or("the order has no finalize URL")?
            .to_string();
        self.post(&finalize, Some(&json!({"csr": b64(&csr)})))?;
        let order = self.poll(&order_url, deadline, "order", &["valid"])?;
        let cert_url = order["certificate"]
            .as_str()
            .ok_or("the valid order has no certificate URL")?;
        let r = self.post(cert_url, None)?;
        let chain = String::from_utf8(r.body).map_err(|_| "the certificate is not PEM text")?;
        if !chain.contains("-----BEGIN CERTIFICATE-----") {
            return Err("the certificate download is not PEM".to_string());
        }
        Ok((chain, key))
    }

    fn authorize(
        &mut self,
        url: &str,
        domain: &str,
        preference: &[AcmeChallenge],
        publish: Publish<'_>,
        deadline: Instant,
    ) -> Result<(), String> {
        let (authz, _) = self.post_json(url, None)?;
        if authz["status"] == "valid" {
            return Ok(());
        }
        let offered = authz["challenges"].as_array().cloned().unwrap_or_default();
        let Some((kind, challenge)) = preference.iter().find_map(|kind| {
            offered
                .iter()
                .find(|c| c["type"] == kind.as_str())
                .map(|c| (*kind, c))
        }) else {
            let names: Vec<&str> = offered.iter().filter_map(|c| c["type"].as_str()).collect();
            let wanted: Vec<&str> = preference.iter().map(|k| k.as_str()).collect();
            return Err(format!(
                "the server offers none of the challenge types answered ({}): it offers {}",
                wanted.join(", "),
                names.join(", ")
            ));
        };
        let (Some(token), Some(challenge_url)) =
            (challenge["token"].as_str(), challenge["url"].as_str())
        else {
            return Err(format!(
                "the {} challenge has no token or URL",
                kind.as_str()
            ));
        };
        let key_authorization = format!("{token}.{}", self.key.thumbprint);
        let answer = Challenge {
            kind,
            token,
            domain: authz["identifier"]["value"].as_str().unwrap_or(domain),
            key_authorization: &key_authorization,
        };
        publish(&answer, true)?;
        let outcome = self
            .post(challenge_url, Some(&json!({})))
            .and_then(|_| self.poll(url, deadline, "authorization", &["valid"]));
        let _ = publish(&answer, false);
        outcome.map(|_| ())
    }

    /// Polls `url` until its status is one of `done`; `invalid` (or the deadline) fails with
    /// the server's reason.
    fn poll(
        &mut self,
        url: &str,
        deadline: Instant,
        what: &str,
        done: &[&str],
    ) -> Result<Value, String> {
        loop {
            let (v, _) = self.post_json(url, None)?;
            let status = v["status"].as_str().unwrap_or("");
            if done.contains(&status) {
                return Ok(v);
            }
            if status == "invalid" {
                let detail = v["challenges"]
                    .as_array()
                    .and_then(|c| c.iter().find_map(|c| c["error"]["detail"].as_str()))
                    .or_else(|| v["error"]["detail"].as_str())
                    .unwrap_or("no reason given");
                return Err(format!("{what} invalid: {detail}"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{what} still `{status}` after {} s",
                    ORDER_DEADLINE.as_secs()
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}

fn csr(domain: &str, key: &PKey<Private>) -> Result<Vec<u8>, openssl::error::ErrorStack> {
    let mut b = X509ReqBuilder::new()?;
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_text("CN", domain)?;
    b.set_subject_name(&name.build())?;
    b.set_pubkey(key)?;
    let mut extensions = Stack::new()?;
    extensions.push(
        SubjectAlternativeName::new()
            .dns(domain)
            .build(&b.x509v3_context(None))?,
    )?;
    b.add_extensions(&extensions)?;
    b.sign(key, MessageDigest::sha256())?;
    b.build().to_der()
}
