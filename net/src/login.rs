//! The native protocol's SCRAM exchange, client side: the user and password a process's
//! outgoing connections authenticate with (the CLI's `--user` and `$TAILSTREAM_PASSWORD`), and
//! the exchange each new connection runs before its first request.
//!
//! Like the TLS connector, one per process: every connection a client process's pools open
//! (`RpcPool::get`, which runs the exchange) speaks as the same user. Servers never set one:
//! members reach each other's peer listeners, which authenticate them by their certificates. A listener that requires no authentication
//! answers `NotRequired`, and the connection goes on as before.

use crate::client::RpcClient;
use crate::error::RpcError;
use bytes::Bytes;
use std::sync::{Arc, RwLock};
use tailstream_auth::scram::ClientExchange;
use tailstream_wire::messages::{
    AuthenticateOutcome, AuthenticateRequest, AuthenticateResponse, ScramMechanism,
};
use tailstream_wire::{Decode, Encode, Opcode, Status};

/// A user and its password. The password is never printed.
#[derive(Clone)]
pub struct Login {
    pub user: String,
    password: String,
    pub mechanism: ScramMechanism,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .finish()
    }
}

impl Login {
    pub fn new(user: &str, password: &str, mechanism: ScramMechanism) -> Login {
        Login {
            user: user.to_owned(),
            password: password.to_owned(),
            mechanism,
        }
    }
}

static OUTGOING: RwLock<Option<Arc<Login>>> = RwLock::new(None);

/// Makes every connection this process opens from now on authenticate as `login` (`None`:
/// none does).
pub fn set_outgoing(login: Option<Login>) {
    *OUTGOING.write().unwrap_or_else(|p| p.into_inner()) = login.map(Arc::new);
}

/// The login outgoing connections use, if one was set.
pub fn outgoing() -> Option<Arc<Login>> {
    OUTGOING.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Runs the exchange on `client`, a new connection, before anything else is sent on it.
pub async fn log_in(client: &RpcClient, login: &Login) -> Result<(), RpcError> {
    let exchange = ClientExchange::new(login.mechanism, &login.user, &login.password);
    let first = step(client, login.mechanism, exchange.first_message()).await?;
    match first.outcome {
        AuthenticateOutcome::NotRequired => return Ok(()),
        AuthenticateOutcome::Continue => {}
        AuthenticateOutcome::Done => return Err(failed("the server ended the exchange early")),
    }
    // The password's derivation (thousands of HMACs) runs off the runtime's workers.
    let server_first = first.message;
    let derived = tokio::task::spawn_blocking(move || exchange.final_message(&server_first))
        .await
        .map_err(|error| failed(&format!("the derivation ended: {error}")))?;
    let (client_final, expected) =
        derived.map_err(|error| failed(&format!("the server's first message: {error}")))?;
    let last = step(client, login.mechanism, client_final).await?;
    if last.outcome != AuthenticateOutcome::Done {
        return Err(failed("the server did not end the exchange"));
    }
    // The server proves it holds the user's key too: a server that does not is an impostor.
    expected
        .verify(&last.message)
        .map_err(|_| failed("the server's signature is wrong: it does not know this user"))
}

async fn step(
    client: &RpcClient,
    mechanism: ScramMechanism,
    message: Vec<u8>,
) -> Result<AuthenticateResponse, RpcError> {
    let request = AuthenticateRequest {
        mechanism,
        message: Bytes::from(message),
    };
    let answer = client
        .call_parts(Opcode::Authenticate, vec![request.to_bytes()])
        .await?;
    Ok(AuthenticateResponse::decode_exact(answer)?)
}

fn failed(why: &str) -> RpcError {
    RpcError::Status {
        status: Status::AuthenticationFailed,
        message: format!("authentication failed: {why}"),
    }
}
