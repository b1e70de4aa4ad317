//! SCRAM (RFC 5802) with SHA-256 (RFC 7677) and SHA-512, as Kafka clients speak it: the
//! credential a password derives, the server's side of the exchange, and a client's side (for
//! Tailstream's own tools and the tests).
//!
//! The exchange is two round trips of text. Client first: `n,,n=user,r=cnonce`; server first:
//! `r=cnonce+snonce,s=salt,i=iterations`; client final: `c=biws,r=nonce,p=proof`; server
//! final: `v=signature`. The server never sees the password: it holds `StoredKey = H(ClientKey)`
//! and `ServerKey`, checks that `proof XOR HMAC(StoredKey, AuthMessage)` hashes to StoredKey,
//! and proves it holds ServerKey by signing the same AuthMessage.
//!
//! Every message is bounded (`CLIENT_MESSAGE_BYTES_MAX`) and parsed before anything in it is
//! used; a user the server does not know gets a decoy salt derived from the user name (so the
//! answer does not tell who exists) and fails at the proof like a wrong password.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;
use tailstream_wire::messages::{ScramCredential, ScramMechanism};
use thiserror::Error;

/// Fewest iterations a credential may have (Kafka's minimum): fewer makes a stolen
/// StoredKey cheap to brute-force.
pub const ITERATIONS_MIN: u32 = 4096;
/// Most iterations a client accepts from a server, and a credential may have (Kafka's
/// maximum): bounds what deriving the salted password costs, for a client a hostile server
/// asks, and for a broker checking a PLAIN password.
pub const ITERATIONS_MAX: u32 = 16384;
/// Iterations of a credential the CLI makes unless told otherwise (Kafka's default).
pub const ITERATIONS_DEFAULT: u32 = 4096;
/// Longest client message the server parses.
pub const CLIENT_MESSAGE_BYTES_MAX: usize = 2048;
/// Random bytes in a nonce (base64: 32 characters).
const NONCE_BYTES: usize = 24;
/// Bytes of a new credential's salt.
const SALT_BYTES: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// Wrong password, unknown user, or a message that does not continue this exchange.
    #[error("authentication failed")]
    Failed,
    #[error("{0} iterations (accepted: {ITERATIONS_MIN} to {ITERATIONS_MAX})")]
    Iterations(u32),
}

fn hmac(mechanism: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    // Both HMACs take keys of any length: `new_from_slice` cannot fail for them.
    match mechanism {
        ScramMechanism::Sha256 => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        ScramMechanism::Sha512 => {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }
}

fn hash(mechanism: ScramMechanism, data: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// SCRAM's Hi: PBKDF2 with the mechanism's HMAC.
fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut out = vec![0u8; mechanism.key_bytes()];
    match mechanism {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
        }
    }
    out
}

/// The credential `password` makes with `salt` and `iterations`.
pub fn derive(
    mechanism: ScramMechanism,
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> ScramCredential {
    let salted = salted_password(mechanism, password.as_bytes(), salt, iterations);
    let client_key = hmac(mechanism, &salted, b"Client Key");
    ScramCredential {
        mechanism,
        salt: Bytes::copy_from_slice(salt),
        iterations,
        stored_key: Bytes::from(hash(mechanism, &client_key)),
        server_key: Bytes::from(hmac(mechanism, &salted, b"Server Key")),
    }
}

/// A new credential for `password`, with a fresh random salt.
pub fn new_credential(
    mechanism: ScramMechanism,
    password: &str,
    iterations: u32,
) -> Result<ScramCredential, ScramError> {
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
        return Err(ScramError::Iterations(iterations));
    }
    let salt: [u8; SALT_BYTES] = rand::random();
    Ok(derive(mechanism, password, &salt, iterations))
}

/// The credential an unknown user seems to have: derived from `secret` (the cluster's) and
/// the name alone, so every broker, at every restart, answers an unknown user with the same
/// salt and iterations, as it would a known one; no password derives its keys.
pub fn decoy_credential(mechanism: ScramMechanism, name: &str, secret: &[u8]) -> ScramCredential {
    let part = |label: &str| {
        let mut input = Vec::with_capacity(label.len() + name.len() + 2);
        input.extend_from_slice(label.as_bytes());
        input.push(mechanism as u8);
        input.push(0);
        input.extend_from_slice(name.as_bytes());
        hmac(mechanism, secret, &input)
    };
    let size = mechanism.key_bytes();
    ScramCredential {
        mechanism,
        salt: Bytes::from(
            part("salt")
                .into_iter()
                .take(SALT_BYTES)
                .collect::<Vec<u8>>(),
        ),
        iterations: ITERATIONS_DEFAULT,
        stored_key: Bytes::from(part("stored").into_iter().take(size).collect::<Vec<u8>>()),
        server_key: Bytes::from(part("server").into_iter().take(size).collect::<Vec<u8>>()),
    }
}

/// Whether a credential is one the server can use: its keys are the mechanism's size and its
/// iterations within bounds (checked when a user is created, and again when one is loaded).
pub fn check_credential(credential: &ScramCredential) -> Result<(), String> {
    let size = credential.mechanism.key_bytes();
    if credential.stored_key.len() != size || credential.server_key.len() != size {
        return Err(format!(
            "{} keys must be {size} bytes",
            credential.mechanism.sasl_name()
        ));
    }
    if credential.salt.is_empty() || credential.salt.len() > 256 {
        return Err("a salt is 1 to 256 bytes".into());
    }
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&credential.iterations) {
        return Err(format!(
            "{} iterations (accepted: {ITERATIONS_MIN} to {ITERATIONS_MAX})",
            credential.iterations
        ));
    }
    Ok(())
}

/// Whether `password` is the one `credential` was derived from (PLAIN's check: costs one
/// derivation, `iterations` HMACs).
pub fn password_matches(credential: &ScramCredential, password: &str) -> bool {
    let fresh = derive(
        credential.mechanism,
        password,
        &credential.salt,
        credential.iterations,
    );
    bool::from(
        fresh
            .stored_key
            .as_ref()
            .ct_eq(credential.stored_key.as_ref()),
    )
}

fn nonce() -> String {
    let bytes: [u8; NONCE_BYTES] = rand::random();
    BASE64.encode(bytes)
}

/// A SCRAM name with `=2C` and `=3D` decoded; any other `=` is malformed.
fn decode_name(raw: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("a name has a bad '=' escape")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn encode_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn printable_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// The client's first message, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub user: String,
    /// `n,,` or `y,,` (or with `a=` the same user): the client final's `c=` must repeat it.
    gs2_header: String,
    /// The message without its GS2 header: the start of AuthMessage.
    bare: String,
    nonce: String,
}

/// Parses a client's first message (`n,,n=user,r=nonce[,ext...]`).
pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst, ScramError> {
    if message.len() > CLIENT_MESSAGE_BYTES_MAX {
        return Err(ScramError::Malformed("the first message is too long"));
    }
    let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    let (flag, rest) = text
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    match flag {
        "n" | "y" => {}
        _ if flag.starts_with("p=") => return Err(ScramError::Unsupported("channel binding")),
        _ => return Err(ScramError::Malformed("a bad channel binding flag")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    let gs2_header = format!("{flag},{authzid},");
    let mut parts = bare.split(',');
    let user = match parts.next() {
        Some(name) if name.starts_with("m=") => {
            return Err(ScramError::Unsupported("mandatory extensions"));
        }
        Some(name) => decode_name(
            name.strip_prefix("n=")
                .ok_or(ScramError::Malformed("no user name"))?,
        )?,
        None => return Err(ScramError::Malformed("no user name")),
    };
    let nonce = parts
        .next()
        .and_then(|part| part.strip_prefix("r="))
        .ok_or(ScramError::Malformed("no nonce"))?;
    if !printable_nonce(nonce) {
        return Err(ScramError::Malformed("a bad nonce"));
    }
    for extension in parts {
        // Kafka's delegation tokens authenticate through SCRAM with this extension.
        if extension.starts_with("tokenauth=") {
            return Err(ScramError::Unsupported("delegation tokens"));
        }
    }
    if !authzid.is_empty() {
        let asked = decode_name(
            authzid
                .strip_prefix("a=")
                .ok_or(ScramError::Malformed("a bad authorization id"))?,
        )?;
        // Kafka's rule: a client may only act as the user it authenticates as.
        if asked != user {
            return Err(ScramError::Unsupported(
                "an authorization id of another user",
            ));
        }
    }
    if user.is_empty() {
        return Err(ScramError::Malformed("an empty user name"));
    }
    Ok(ClientFirst {
        user,
        gs2_header,
        bare: bare.to_owned(),
        nonce: nonce.to_owned(),
    })
}

/// The server's side of one exchange, between its first message and the client's final one.
#[derive(Clone)]
pub struct ServerExchange {
    mechanism: ScramMechanism,
    /// `None`: the user is unknown (or has no credential of this mechanism); the exchange
    /// goes on with a decoy salt and fails at the proof.
    credential: Option<ScramCredential>,
    gs2_header: String,
    nonce: String,
    /// `client-first-bare,server-first`.
    auth_prefix: String,
}

impl std::fmt::Debug for ServerExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No key material in logs.
        f.debug_struct("ServerExchange")
            .field("mechanism", &self.mechanism)
            .field("known", &self.credential.is_some())
            .finish()
    }
}

impl ServerExchange {
    /// Answers `first` with the server's first message. `credential` is the user's for this
    /// mechanism, if any; `decoy_key` (secret, per process) makes an unknown user's salt.
    pub fn start(
        mechanism: ScramMechanism,
        first: &ClientFirst,
        credential: Option<ScramCredential>,
        decoy_key: &[u8],
    ) -> (ServerExchange, Vec<u8>) {
        Self::start_with_nonce(mechanism, first, credential, decoy_key, &nonce())
    }

    /// [`ServerExchange::start`] with a given server nonce, for tests and benchmarks that
    /// replay an exchange. A server must never reuse a nonce: use `start`.
    pub fn start_with_nonce(
        mechanism: ScramMechanism,
        first: &ClientFirst,
        credential: Option<ScramCredential>,
        decoy_key: &[u8],
        server_nonce: &str,
    ) -> (ServerExchange, Vec<u8>) {
        let credential = credential.filter(|c| c.mechanism == mechanism);
        let (salt, iterations) = match &credential {
            Some(c) => (c.salt.to_vec(), c.iterations),
            None => (
                hmac(mechanism, decoy_key, first.user.as_bytes())
                    .into_iter()
                    .take(SALT_BYTES)
                    .collect(),
                ITERATIONS_DEFAULT,
            ),
        };
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!("r={nonce},s={},i={iterations}", BASE64.encode(&salt));
        let exchange = ServerExchange {
            mechanism,
            credential,
            gs2_header: first.gs2_header.clone(),
            nonce,
            auth_prefix: format!("{},{server_first}", first.bare),
        };
        (exchange, server_first.into_bytes())
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Checks the client's final message; on success, the server's final message.
    pub fn finish(&self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        if message.len() > CLIENT_MESSAGE_BYTES_MAX {
            return Err(ScramError::Malformed("the final message is too long"));
        }
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        // The proof is the last attribute; what precedes it is signed.
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut parts = without_proof.split(',');
        let binding = parts
            .next()
            .and_then(|part| part.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        let nonce = parts
            .next()
            .and_then(|part| part.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        let binding = BASE64
            .decode(binding)
            .map_err(|_| ScramError::Malformed("channel binding is not base64"))?;
        // Ends with, as Kafka checks it: librdkafka (2.0 at least) sends its own nonce again in
        // front of the combined one. The proof signs the nonce as sent either way.
        if binding != self.gs2_header.as_bytes() || !nonce.ends_with(&self.nonce) {
            return Err(ScramError::Failed);
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("the proof is not base64"))?;
        let Some(credential) = &self.credential else {
            return Err(ScramError::Failed);
        };
        if proof.len() != self.mechanism.key_bytes() {
            return Err(ScramError::Failed);
        }
        let auth_message = format!("{},{without_proof}", self.auth_prefix);
        let client_signature = hmac(
            self.mechanism,
            &credential.stored_key,
            auth_message.as_bytes(),
        );
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let stored_key = hash(self.mechanism, &client_key);
        if !bool::from(stored_key.as_slice().ct_eq(credential.stored_key.as_ref())) {
            return Err(ScramError::Failed);
        }
        let server_signature = hmac(
            self.mechanism,
            &credential.server_key,
            auth_message.as_bytes(),
        );
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

/// A client's side of one exchange.
#[derive(Debug)]
pub struct ClientExchange {
    mechanism: ScramMechanism,
    password: String,
    nonce: String,
    bare: String,
}

/// What the client checks the server's final message against.
#[derive(Debug)]
pub struct ExpectedServerFinal {
    signature: Vec<u8>,
}

impl ClientExchange {
    /// Starts an exchange; the first message to send is [`ClientExchange::first_message`].
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> ClientExchange {
        Self::with_nonce(mechanism, user, password, &nonce())
    }

    fn with_nonce(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        nonce: &str,
    ) -> ClientExchange {
        ClientExchange {
            mechanism,
            password: password.to_owned(),
            nonce: nonce.to_owned(),
            bare: format!("n={},r={nonce}", encode_name(user)),
        }
    }

    pub fn first_message(&self) -> Vec<u8> {
        format!("n,,{}", self.bare).into_bytes()
    }

    /// The final message answering the server's first one, and what its final must be.
    pub fn final_message(
        self,
        server_first: &[u8],
    ) -> Result<(Vec<u8>, ExpectedServerFinal), ScramError> {
        let text =
            std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let mut parts = text.split(',');
        let mut field = |prefix: &'static str| {
            parts
                .next()
                .and_then(|part| part.strip_prefix(prefix))
                .ok_or(ScramError::Malformed("a server first message out of shape"))
        };
        let nonce = field("r=")?;
        let salt = field("s=")?;
        let iterations = field("i=")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Failed);
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| ScramError::Malformed("the salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| ScramError::Malformed("iterations are not a number"))?;
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(ScramError::Iterations(iterations));
        }
        let salted = salted_password(self.mechanism, self.password.as_bytes(), &salt, iterations);
        let client_key = hmac(self.mechanism, &salted, b"Client Key");
        let stored_key = hash(self.mechanism, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.bare);
        let signature = hmac(self.mechanism, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac(self.mechanism, &salted, b"Server Key");
        let expected = ExpectedServerFinal {
            signature: hmac(self.mechanism, &server_key, auth_message.as_bytes()),
        };
        let message = format!("{without_proof},p={}", BASE64.encode(proof));
        Ok((message.into_bytes(), expected))
    }
}

impl ExpectedServerFinal {
    /// Whether the server proved it holds the user's ServerKey.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text =
            std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let signature = text
            .strip_prefix("v=")
            .ok_or(ScramError::Failed)
            .and_then(|s| BASE64.decode(s).map_err(|_| ScramError::Failed))?;
        if bool::from(signature.as_slice().ct_eq(&self.signature)) {
            Ok(())
        } else {
            Err(ScramError::Failed)
        }
    }
}

#[cfg(test)]
#[path = "scram_tests.rs"]
mod tests;
