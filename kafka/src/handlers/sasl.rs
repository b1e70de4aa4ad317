//! SaslHandshake and SaslAuthenticate outside the authentication phase: on a listener without
//! authentication, or again on a connection that has authenticated (re-authentication is not
//! offered: every answer says the session does not expire).

use super::{Answer, encode, str_bytes};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};

/// A handshake this connection cannot make: the mechanisms served (none when authentication
/// is off).
pub(crate) fn handshake_refused(
    version: i16,
    mechanisms: &[String],
    error: ResponseError,
) -> Answer {
    let response = SaslHandshakeResponse::default()
        .with_error_code(error.code())
        .with_mechanisms(mechanisms.iter().map(|m| str_bytes(m)).collect());
    Answer::Ready(encode(&response, version))
}

/// An authentication step this connection cannot take.
pub(crate) fn authenticate_refused(version: i16, error: ResponseError, message: &str) -> Answer {
    let response = SaslAuthenticateResponse::default()
        .with_error_code(error.code())
        .with_error_message(Some(str_bytes(message)));
    Answer::Ready(encode(&response, version))
}
