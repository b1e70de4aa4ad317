//! SASL PLAIN (RFC 4616): `authzid NUL user NUL password`, checked against the user's SCRAM
//! credential (one derivation), so a server keeps no password for it either.

use thiserror::Error;

/// Longest PLAIN message parsed.
pub const PLAIN_MESSAGE_BYTES_MAX: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlainError {
    #[error("malformed PLAIN message: {0}")]
    Malformed(&'static str),
    #[error("an authorization id of another user")]
    OtherAuthzid,
}

/// A PLAIN message's user and password.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainCredentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for PlainCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainCredentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

pub fn parse_plain(message: &[u8]) -> Result<PlainCredentials, PlainError> {
    if message.len() > PLAIN_MESSAGE_BYTES_MAX {
        return Err(PlainError::Malformed("too long"));
    }
    let text = std::str::from_utf8(message).map_err(|_| PlainError::Malformed("not UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(PlainError::Malformed("not three fields"));
    };
    if user.is_empty() || password.is_empty() {
        return Err(PlainError::Malformed("an empty user or password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(PlainError::OtherAuthzid);
    }
    Ok(PlainCredentials {
        user: user.to_owned(),
        password: password.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages_parse_and_odd_ones_are_refused() {
        let parsed = parse_plain(b"\0alice\0pw").unwrap();
        assert_eq!(
            (parsed.user.as_str(), parsed.password.as_str()),
            ("alice", "pw")
        );
        assert!(parse_plain(b"alice\0alice\0pw").is_ok());
        assert_eq!(
            parse_plain(b"bob\0alice\0pw"),
            Err(PlainError::OtherAuthzid)
        );
        assert!(parse_plain(b"\0alice").is_err());
        assert!(parse_plain(b"\0\0pw").is_err());
        assert!(parse_plain(b"\0a\0b\0c").is_err());
        assert!(parse_plain(&[0xff, 0, b'a', 0, b'b']).is_err());
        assert!(!format!("{parsed:?}").contains("pw"), "no password in logs");
    }
}
