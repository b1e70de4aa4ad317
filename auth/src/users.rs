//! User names, and the principal a connection acts as once authenticated.

/// Longest user name.
pub const USER_NAME_BYTES_MAX: usize = 128;

/// Whether `name` may name a user: 1 to 128 of `A-Z a-z 0-9 . _ - @ +`. Narrower than SCRAM
/// allows, so a name is safe in a key, a log line and a metric label as it is.
pub fn check_user_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@' | '+');
    if name.is_empty() || name.len() > USER_NAME_BYTES_MAX || !name.chars().all(allowed) {
        return Err(format!(
            "user name {name:?}: 1 to {USER_NAME_BYTES_MAX} of A-Z a-z 0-9 . _ - @ +"
        ));
    }
    Ok(())
}

/// Whether `given` is `expected` (a configured secret), compared in constant time.
pub fn token_matches(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// Who a connection acts as.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Principal {
    /// Authentication is off on its listener: anyone, as before users existed.
    Anonymous,
    /// A user who proved their password.
    User(String),
}

impl Principal {
    /// The user's name; `None` for anyone (authentication off).
    pub fn user(&self) -> Option<&str> {
        match self {
            Principal::Anonymous => None,
            Principal::User(name) => Some(name),
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("User:ANONYMOUS"),
            Principal::User(name) => write!(f, "User:{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_are_plain() {
        assert!(check_user_name("alice").is_ok());
        assert!(check_user_name("svc-orders@prod.example").is_ok());
        assert!(check_user_name("").is_err());
        assert!(check_user_name("a/b").is_err());
        assert!(check_user_name("a,b").is_err());
        assert!(check_user_name(&"a".repeat(129)).is_err());
        assert_eq!(Principal::User("alice".into()).to_string(), "User:alice");
    }
}
