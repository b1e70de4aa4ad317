//! The native protocol's SCRAM exchange, server side: an [`Authenticator`] over whatever keeps
//! users' credentials (a broker's cache of the coordinator's, the coordinator's own metadata).
//!
//! Two steps, as in RFC 5802: the client-first message is answered with the server-first
//! (checked against the user's credential, or a decoy for a name that is no user's, so an
//! unknown user fails exactly as a wrong password does); the client-final message's proof is
//! checked and answered with the server's signature. Anything else (a step out of order,
//! another mechanism in the second step, a second exchange) is refused and the connection
//! closes. SCRAM's derivation is the client's: the server computes a few HMACs per exchange.

use crate::response::Response;
use crate::session::{Authenticator, Proven, Session, Step};
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use std::sync::Arc;
use tailstream_auth::scram::{ServerExchange, decoy_credential, parse_client_first};
use tailstream_wire::messages::{
    AuthenticateOutcome, AuthenticateRequest, AuthenticateResponse, ScramCredential,
};
use tailstream_wire::{Decode, Status};

/// Where users' credentials come from.
pub trait CredentialSource: Send + Sync + std::fmt::Debug + 'static {
    /// `user`'s credentials (decoys, or none, for a name that is no user's); `Err` when they
    /// cannot be had now (the client is told to retry).
    fn credentials<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Vec<ScramCredential>>, String>>;
}

/// The exchange between the client-first and the client-final message.
struct Sent {
    exchange: Box<ServerExchange>,
    user: String,
    /// The credential's StoredKey: what the session is later checked to still hold.
    stored_key: Bytes,
}

/// SCRAM-SHA-256 and SCRAM-SHA-512 over `source`.
#[derive(Debug)]
pub struct ScramAuthenticator<C> {
    source: C,
    /// Makes the decoy of a user without a credential of the mechanism asked for.
    decoy_key: [u8; 32],
}

impl<C: CredentialSource> ScramAuthenticator<C> {
    pub fn new(source: C) -> Self {
        Self {
            source,
            decoy_key: rand::random(),
        }
    }

    async fn check(&self, session: &Session, body: Bytes) -> Step {
        let request = match AuthenticateRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return refused(format!("a malformed Authenticate request: {error}")),
        };
        if session.user().is_some() {
            return refused("a second authentication on one connection".into());
        }
        if let Some(sent) = session.take_exchange::<Sent>() {
            if sent.exchange.mechanism() != request.mechanism {
                return refused("the mechanism changed within an exchange".into());
            }
            return match sent.exchange.finish(&request.message) {
                Ok(server_final) => Step::Proven(
                    answer(AuthenticateOutcome::Done, server_final),
                    Proven {
                        user: sent.user,
                        proof: sent.stored_key,
                    },
                ),
                Err(error) => refused(format!("{:?}: {error}", sent.user)),
            };
        }
        let first = match parse_client_first(&request.message) {
            Ok(first) => first,
            Err(error) => return refused(error.to_string()),
        };
        let credentials = match self.source.credentials(&first.user).await {
            Ok(credentials) => credentials,
            Err(why) => {
                // The reason stays in this server's log: a client that has not authenticated
                // is told nothing about the cluster's insides.
                tracing::warn!(%why, user = first.user, "looking up credentials failed");
                return Step::Refused(
                    Response::error(Status::Busy, "credentials cannot be checked now: retry"),
                    format!("looking up credentials: {why}"),
                );
            }
        };
        let credential = credentials
            .iter()
            .find(|c| c.mechanism == request.mechanism)
            .cloned()
            .unwrap_or_else(|| decoy_credential(request.mechanism, &first.user, &self.decoy_key));
        let stored_key = credential.stored_key.clone();
        let (exchange, server_first) =
            ServerExchange::start(request.mechanism, &first, Some(credential), &self.decoy_key);
        session.keep_exchange(Sent {
            exchange: Box::new(exchange),
            user: first.user,
            stored_key,
        });
        Step::Continue(answer(AuthenticateOutcome::Continue, server_first))
    }
}

impl<C: CredentialSource> Authenticator for ScramAuthenticator<C> {
    fn step<'a>(&'a self, session: &'a Session, body: Bytes) -> BoxFuture<'a, Step> {
        self.check(session, body).boxed()
    }

    fn still_holds<'a>(&'a self, user: &'a str, proof: &'a [u8]) -> BoxFuture<'a, Option<bool>> {
        async move {
            let credentials = self.source.credentials(user).await.ok()?;
            // A deleted user's lookup gives decoys (or nothing): no StoredKey matches.
            Some(credentials.iter().any(|c| c.stored_key.as_ref() == proof))
        }
        .boxed()
    }
}

fn answer(outcome: AuthenticateOutcome, message: Vec<u8>) -> Response {
    Response::ok(&AuthenticateResponse {
        outcome,
        message: Bytes::from(message),
    })
}

/// The same answer for every failure (no user, wrong password, broken exchange): a client
/// learns nothing about which names exist.
fn refused(why: String) -> Step {
    Step::Refused(
        Response::error(
            Status::AuthenticationFailed,
            "authentication failed: wrong user name or password",
        ),
        why,
    )
}
