//! The authentication half of a connection, where its listener requires it: the race that
//! closes a connection unproven at its handshake deadline, or authenticated and no longer
//! holding its user's credential, whatever it is doing then; and the `Authenticate` step the
//! reader runs inline.

use super::{Connection, ServerLimits, Service, serve_session};
use crate::listener::{Closed, Standing};
use crate::response::Response;
use crate::session::{Authentication, Session, Step};
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use tailstream_wire::messages::{AuthenticateOutcome, AuthenticateResponse};
use tailstream_wire::{Opcode, Status};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The largest request body a connection may send before it authenticated (where the listener
/// requires it): SCRAM's messages and the admin token's user operations are far smaller.
pub(super) const UNPROVEN_BODY_BYTES_MAX: u32 = 16 * 1024;

/// Why a connection is closed that sent a larger one.
pub(super) fn too_large_before_authenticating(body_len: u32) -> Closed {
    Closed::Unauthenticated(format!(
        "a {body_len}-byte request before authenticating (at most {UNPROVEN_BODY_BYTES_MAX})"
    ))
}

pub(super) async fn serve_connection<S: Service>(
    tcp: TcpStream,
    peer: SocketAddr,
    service: Arc<S>,
    limits: Arc<ServerLimits>,
    standing: Option<Standing>,
) -> Closed {
    let session = Arc::new(Session::new(standing));
    let Some(required) = limits.authentication.clone() else {
        return serve_session(tcp, peer, service, limits, session).await;
    };
    // The handshake deadline counts from the connection's opening, TLS included, and holds
    // whatever the connection is doing then (even waiting on a client that reads nothing).
    let by = Instant::now() + required.handshake_timeout;
    let served = serve_session(tcp, peer, service, limits, session.clone());
    tokio::select! {
        closed = served => closed,
        () = unproven_at(by, &session) => Closed::Unauthenticated(format!(
            "no authentication within {} ms (listeners.handshake_timeout_ms)",
            required.handshake_timeout.as_millis()
        )),
        user = revoked(&required, &session) => {
            metrics::counter!(crate::metrics::SESSIONS_REVOKED).increment(1);
            Closed::Unauthenticated(format!(
                "{user:?} no longer holds the credential it authenticated with (deleted, or its password changed)"
            ))
        }
    }
}

/// Returns (the user) once `session`'s user no longer holds the credential it proved, checked
/// every `recheck_every`; never, if that is off or the user holds it.
async fn revoked(required: &Authentication, session: &Session) -> String {
    let Some(every) = required.recheck_every else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(every).await;
        let Some((user, proof)) = session.proven() else {
            continue;
        };
        if required.authenticator.still_holds(user, proof).await == Some(false) {
            return user.to_owned();
        }
    }
}

/// Returns at `by` if `session` has not authenticated by then; never otherwise.
async fn unproven_at(by: Instant, session: &Session) {
    tokio::time::sleep_until(by).await;
    if session.user().is_some() {
        std::future::pending::<()>().await;
    }
}

impl Connection {
    /// Whether the listener requires authentication and this connection has not yet.
    pub(super) fn unproven(&self) -> bool {
        self.limits.authentication.is_some() && self.session.user().is_none()
    }

    /// The answer to `opcode` from a connection that has not authenticated where that is
    /// required: all but `Ping`, `Authenticate` and what the service lets in is refused.
    pub(super) fn refused_before_authentication<S: Service>(
        &self,
        opcode: Opcode,
        service: &S,
    ) -> Option<Response> {
        (self.unproven() && opcode != Opcode::Ping && !service.open_before_authentication(opcode))
            .then(|| {
                Response::error(
                    Status::AuthenticationRequired,
                    "this listener requires authentication (security.client_authentication): \
                     give a user (--user or $TAILSTREAM_USER) and $TAILSTREAM_PASSWORD",
                )
            })
    }

    /// Runs one `Authenticate` step, on the reader (nothing else is read meanwhile, so what
    /// the client pipelined behind its last step is checked as the user it proved). The
    /// answer, and after a refusal why the connection closes once it is sent; `Err` closes it
    /// without an answer.
    pub(super) async fn authenticate(
        &mut self,
        body: Bytes,
    ) -> Result<(Response, Option<Closed>), Closed> {
        let Some(required) = &self.limits.authentication else {
            let not_required = AuthenticateResponse {
                outcome: AuthenticateOutcome::NotRequired,
                message: Bytes::new(),
            };
            return Ok((Response::ok(&not_required), None));
        };
        // Bounded by the handshake deadline, which ends the whole connection.
        match required.authenticator.step(&self.session, body).await {
            Step::Continue(response) => Ok((response, None)),
            Step::Proven(response, proven) => {
                // Proven before the client hears it: from then on it is never closed to make
                // room (unless it already was chosen to be).
                if !self.session.prove(proven) {
                    return Err(Closed::Evicted);
                }
                Ok((response, None))
            }
            Step::Refused(response, why) => Ok((response, Some(Closed::Unauthenticated(why)))),
        }
    }
}
