//! The authentication phase of a Kafka connection on a listener that requires it: before
//! anything else, requests are read and answered one at a time (ApiVersions, SaslHandshake v1,
//! SaslAuthenticate), and anything else closes the connection. The phase ends with the
//! principal the client proved to be, or a closed connection, within
//! `listeners.handshake_timeout_ms` of the connection opening.
//!
//! Mechanisms: SCRAM-SHA-256/512 (`tailstream_auth::scram`, against the user's credential)
//! and PLAIN (the password checked against the same credential). A failure is answered with
//! SASL_AUTHENTICATION_FAILED and a message the client shows, then the connection is closed,
//! as Kafka does.

use crate::authenticator::{Authenticator, DERIVATION_WAIT, Mechanism};
use crate::frames::{Phase, read_frame, write_answer};
use crate::handlers::sasl::{authenticate_refused, handshake_refused};
use crate::handlers::{Answer, Body, encode};
use crate::handlers::{api_versions, headed};
use crate::shared::{ConnectionLimits, Kafka};
use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_auth::plain::parse_plain;
use tailstream_auth::scram::{
    ServerExchange, decoy_credential, parse_client_first, password_matches,
};
use tailstream_kafka_wire::{Decoded, RequestBody, decode_request};
use tailstream_net::{Closed, Standing};
use tailstream_net::{StreamReader, StreamWriter};
use tailstream_wire::messages::{ScramCredential, ScramMechanism};
use tokio::io::{AsyncReadExt, BufReader, BufWriter};
use tokio::time::Instant;

/// Where an exchange is.
enum Stage {
    /// No mechanism chosen yet.
    Start,
    Chosen(Mechanism),
    /// SCRAM: the server's first message was sent.
    ScramSent {
        exchange: Box<ServerExchange>,
        user: String,
        /// The credential's StoredKey: what the session is later checked to still hold.
        stored_key: Bytes,
    },
}

/// Who a connection proved to be, and with which credential (its StoredKey), so the session
/// can be checked against the user's current credentials later.
pub(crate) struct Proven {
    pub principal: Principal,
    pub stored_key: Option<Bytes>,
}

/// What one step answered, and whether the phase goes on.
enum Step {
    Continue(Stage),
    /// The user, and the StoredKey of the credential it proved.
    Authenticated(String, Bytes),
    /// Answered (with the refusal), then the connection closes for this reason.
    Refused(String),
}

/// Runs the phase on a new connection, until `deadline` (`handshake_timeout` from its
/// opening, the TLS handshake included). `Ok` with the client's principal once it
/// authenticated; every answer is written and flushed by then.
pub(crate) async fn authenticate(
    reader: &mut BufReader<StreamReader>,
    out: &mut BufWriter<StreamWriter>,
    kafka: &Arc<Kafka>,
    limits: &ConnectionLimits,
    standing: &Standing,
    deadline: Instant,
) -> Result<Proven, Closed> {
    let Some(auth) = &kafka.authenticator else {
        return Ok(Proven {
            principal: Principal::Anonymous,
            stored_key: None,
        });
    };
    let phase = async {
        let mut stage = Stage::Start;
        loop {
            let mut size = [0u8; 4];
            size[0] = match reader.read_u8().await {
                Ok(byte) => byte,
                Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(Closed::ByPeer);
                }
                Err(error) => return Err(Closed::Io(format!("reading a request: {error}"))),
            };
            let deadline = Instant::now() + limits.request_read_timeout;
            let (bytes, _permit) =
                read_frame(reader, size, deadline, limits, Phase::Authenticating).await?;
            let (correlation_id, version, api, body) = match decode_request(bytes) {
                Ok(Decoded::Request { header, api, body }) => {
                    (header.correlation_id, header.api_version, api, *body)
                }
                Ok(Decoded::ApiVersionsFallback { header }) => {
                    let answer = api_versions::unsupported_version();
                    send(out, header.correlation_id, answer).await?;
                    continue;
                }
                Err(error) => {
                    metrics::counter!(crate::metrics::REQUESTS_REFUSED).increment(1);
                    return Err(Closed::BadInput(error.to_string()));
                }
            };
            let (answer, step) = match body {
                RequestBody::ApiVersions(_) => {
                    (api_versions::answer(version), Step::Continue(stage))
                }
                RequestBody::SaslHandshake(request) => {
                    handshake(auth, version, stage, &request.mechanism)
                }
                RequestBody::SaslAuthenticate(request) => {
                    exchange(auth, version, stage, request.auth_bytes).await
                }
                // `read_frame` reads no other API in this phase.
                _ => {
                    return Err(Closed::Unauthenticated(format!(
                        "a {} request before authenticating",
                        api.name()
                    )));
                }
            };
            // Proven before the client hears it authenticated: from then on it is never
            // closed to make room (unless it already was chosen to be).
            if matches!(step, Step::Authenticated(..)) && !standing.proven() {
                return Err(Closed::Evicted);
            }
            send(out, correlation_id, headed(api, version, answer)).await?;
            match step {
                Step::Continue(next) => stage = next,
                Step::Authenticated(user, stored_key) => {
                    return Ok(Proven {
                        principal: Principal::User(user),
                        stored_key: Some(stored_key),
                    });
                }
                Step::Refused(why) => return Err(Closed::Unauthenticated(why)),
            }
        }
    };
    match tokio::time::timeout_at(deadline, phase).await {
        Ok(done) => done,
        Err(_) => Err(Closed::Unauthenticated(format!(
            "no authentication within {} ms (listeners.handshake_timeout_ms)",
            limits.handshake_timeout.as_millis()
        ))),
    }
}

async fn send(
    out: &mut BufWriter<StreamWriter>,
    correlation_id: i32,
    answer: Answer,
) -> Result<(), Closed> {
    let body: Body = match answer {
        Answer::Ready(body) => body,
        Answer::Later(later) => later.await,
        Answer::Silent => return Ok(()),
    };
    let parts = body.map_err(|reason| Closed::Io(format!("answer not encodable: {reason}")))?;
    write_answer(out, correlation_id, &parts).await?;
    tokio::io::AsyncWriteExt::flush(out)
        .await
        .map_err(|e| Closed::Io(format!("sending an answer: {e}")))
}

fn handshake(auth: &Authenticator, version: i16, stage: Stage, mechanism: &str) -> (Answer, Step) {
    if !matches!(stage, Stage::Start) {
        let answer = handshake_refused(version, &auth.names, ResponseError::IllegalSaslState);
        return (answer, Step::Refused("a second SaslHandshake".into()));
    }
    match Mechanism::from_name(mechanism).filter(|m| auth.mechanisms.contains(m)) {
        Some(chosen) => {
            let response = SaslHandshakeResponse::default().with_mechanisms(
                auth.names
                    .iter()
                    .map(|n| crate::handlers::str_bytes(n))
                    .collect(),
            );
            (
                Answer::Ready(encode(&response, version)),
                Step::Continue(Stage::Chosen(chosen)),
            )
        }
        None => (
            handshake_refused(
                version,
                &auth.names,
                ResponseError::UnsupportedSaslMechanism,
            ),
            Step::Refused(format!("mechanism {mechanism:?} is not enabled")),
        ),
    }
}

fn failed(version: i16, mechanism: Mechanism, why: String) -> (Answer, Step) {
    metrics::counter!(crate::metrics::AUTHENTICATIONS, "mechanism" => mechanism.name(), "outcome" => "failed")
        .increment(1);
    let message = format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        mechanism.name()
    );
    (
        authenticate_refused(version, ResponseError::SaslAuthenticationFailed, &message),
        Step::Refused(why),
    )
}

fn succeeded(
    version: i16,
    mechanism: Mechanism,
    user: String,
    stored_key: Bytes,
    auth_bytes: Vec<u8>,
) -> (Answer, Step) {
    metrics::counter!(crate::metrics::AUTHENTICATIONS, "mechanism" => mechanism.name(), "outcome" => "ok")
        .increment(1);
    let response = SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(auth_bytes));
    (
        Answer::Ready(encode(&response, version)),
        Step::Authenticated(user, stored_key),
    )
}

/// The credential `user`'s exchange checks against (a decoy when the user does not exist or
/// has none for the mechanism), or the step that refuses.
async fn credential_of(
    auth: &Authenticator,
    version: i16,
    mechanism: Mechanism,
    user: &str,
) -> Result<ScramCredential, (Answer, Step)> {
    match auth.credentials.lookup(user).await {
        Ok(credentials) => {
            let wanted = |m: ScramMechanism| credentials.iter().find(|c| c.mechanism == m).cloned();
            let found = match mechanism {
                Mechanism::Scram(scram) => wanted(scram),
                // PLAIN checks against whichever credential the user has (SHA-256 first: the
                // cheaper derivation).
                Mechanism::Plain => {
                    wanted(ScramMechanism::Sha256).or_else(|| wanted(ScramMechanism::Sha512))
                }
            };
            let scram = match mechanism {
                Mechanism::Scram(scram) => scram,
                Mechanism::Plain => ScramMechanism::Sha256,
            };
            Ok(found.unwrap_or_else(|| decoy_credential(scram, user, &auth.decoy_key)))
        }
        Err(why) => {
            metrics::counter!(crate::metrics::AUTHENTICATIONS, "mechanism" => mechanism.name(), "outcome" => "error")
                .increment(1);
            // The reason stays in this broker's log: a client that has not authenticated is
            // told nothing about the cluster's insides.
            tracing::warn!(%why, user, "looking up credentials failed");
            let message = "this broker could not check credentials now: retry";
            Err((
                authenticate_refused(version, ResponseError::SaslAuthenticationFailed, message),
                Step::Refused(format!("looking up credentials: {why}")),
            ))
        }
    }
}

async fn exchange(
    auth: &Authenticator,
    version: i16,
    stage: Stage,
    bytes: Bytes,
) -> (Answer, Step) {
    match stage {
        Stage::Start => (
            authenticate_refused(
                version,
                ResponseError::IllegalSaslState,
                "SaslAuthenticate before SaslHandshake",
            ),
            Step::Refused("SaslAuthenticate before SaslHandshake".into()),
        ),
        Stage::Chosen(Mechanism::Plain) => {
            let plain = match parse_plain(&bytes) {
                Ok(plain) => plain,
                Err(error) => return failed(version, Mechanism::Plain, error.to_string()),
            };
            let credential = match credential_of(auth, version, Mechanism::Plain, &plain.user).await
            {
                Ok(credential) => credential,
                Err(refused) => return refused,
            };
            // One derivation (`iterations` HMACs, a millisecond or more), a decoy's as a real
            // user's: off the runtime's workers, a bounded number at once.
            let slot =
                tokio::time::timeout(DERIVATION_WAIT, auth.derivations.clone().acquire_owned())
                    .await;
            let Ok(Ok(slot)) = slot else {
                return failed(
                    version,
                    Mechanism::Plain,
                    "too many PLAIN attempts at once".into(),
                );
            };
            let password = plain.password;
            let stored_key = credential.stored_key.clone();
            // The slot goes with the derivation: held until it ends, even if this connection
            // is dropped meanwhile (evicted, timed out).
            let matches = tokio::task::spawn_blocking(move || {
                let _slot = slot;
                password_matches(&credential, &password)
            })
            .await
            .unwrap_or(false);
            if matches {
                succeeded(
                    version,
                    Mechanism::Plain,
                    plain.user,
                    stored_key,
                    Vec::new(),
                )
            } else {
                failed(
                    version,
                    Mechanism::Plain,
                    format!("a wrong password for {:?}", plain.user),
                )
            }
        }
        Stage::Chosen(mechanism @ Mechanism::Scram(scram)) => {
            let first = match parse_client_first(&bytes) {
                Ok(first) => first,
                Err(error) => return failed(version, mechanism, error.to_string()),
            };
            let credential = match credential_of(auth, version, mechanism, &first.user).await {
                Ok(credential) => credential,
                Err(refused) => return refused,
            };
            let stored_key = credential.stored_key.clone();
            let (exchange, server_first) =
                ServerExchange::start(scram, &first, Some(credential), &auth.decoy_key);
            let response =
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(server_first));
            (
                Answer::Ready(encode(&response, version)),
                Step::Continue(Stage::ScramSent {
                    exchange: Box::new(exchange),
                    user: first.user,
                    stored_key,
                }),
            )
        }
        Stage::ScramSent {
            exchange,
            user,
            stored_key,
        } => {
            let mechanism = Mechanism::Scram(exchange.mechanism());
            match exchange.finish(&bytes) {
                Ok(server_final) => succeeded(version, mechanism, user, stored_key, server_final),
                Err(error) => failed(version, mechanism, format!("{user:?}: {error}")),
            }
        }
    }
}
