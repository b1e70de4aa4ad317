//! Users and their SCRAM credentials: created, deleted, listed and looked up. A credential is
//! kept as the client derived it (salt, iterations, StoredKey, ServerKey), never a password.

use super::{Metadata, MetadataError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tailstream_wire::messages::{ScramCredential, ScramMechanism, UserSummary};

/// A user as the metadata keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    /// At most one per mechanism, in mechanism order.
    pub credentials: Vec<StoredCredential>,
}

/// One mechanism's credential, as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCredential {
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl StoredCredential {
    fn from_wire(credential: &ScramCredential) -> StoredCredential {
        StoredCredential {
            mechanism: credential.mechanism,
            salt: credential.salt.to_vec(),
            iterations: credential.iterations,
            stored_key: credential.stored_key.to_vec(),
            server_key: credential.server_key.to_vec(),
        }
    }

    pub fn to_wire(&self) -> ScramCredential {
        ScramCredential {
            mechanism: self.mechanism,
            salt: Bytes::copy_from_slice(&self.salt),
            iterations: self.iterations,
            stored_key: Bytes::copy_from_slice(&self.stored_key),
            server_key: Bytes::copy_from_slice(&self.server_key),
        }
    }
}

impl UserRecord {
    /// Checks a saved user as a create would (a loaded file is not trusted either).
    pub fn check(&self) -> Result<(), String> {
        tailstream_auth::check_user_name(&self.name)?;
        if self.credentials.is_empty() {
            return Err(format!("user {:?} has no credential", self.name));
        }
        let mut mechanisms: Vec<ScramMechanism> =
            self.credentials.iter().map(|c| c.mechanism).collect();
        mechanisms.dedup();
        if mechanisms.len() != self.credentials.len() || !mechanisms.is_sorted() {
            return Err(format!(
                "user {:?}: one credential per mechanism, in order",
                self.name
            ));
        }
        for credential in &self.credentials {
            tailstream_auth::scram::check_credential(&credential.to_wire())
                .map_err(|e| format!("user {:?}: {e}", self.name))?;
        }
        Ok(())
    }
}

impl Metadata {
    /// Adds a user; refused if the name is taken, a credential is not usable, or `users_max`
    /// users exist.
    pub fn create_user(
        &mut self,
        name: &str,
        credentials: &[ScramCredential],
        users_max: usize,
    ) -> Result<(), MetadataError> {
        let mut credentials: Vec<StoredCredential> = credentials
            .iter()
            .map(StoredCredential::from_wire)
            .collect();
        credentials.sort_by_key(|c| c.mechanism);
        let record = UserRecord {
            name: name.to_owned(),
            credentials,
        };
        record.check().map_err(MetadataError::InvalidArgument)?;
        if self.users.contains_key(name) {
            return Err(MetadataError::UserExists(name.to_owned()));
        }
        if self.users.len() >= users_max {
            return Err(MetadataError::LimitReached(format!(
                "the cluster has {} users, its limit (coordinator.users_max)",
                self.users.len()
            )));
        }
        self.users.insert(name.to_owned(), record);
        Ok(())
    }

    pub fn delete_user(&mut self, name: &str) -> Result<(), MetadataError> {
        self.users
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| MetadataError::UnknownUser(name.to_owned()))
    }

    /// Every user, by name, without key material.
    pub fn list_users(&self) -> Vec<UserSummary> {
        self.users
            .values()
            .map(|user| UserSummary {
                name: user.name.clone(),
                mechanisms: user.credentials.iter().map(|c| c.mechanism).collect(),
            })
            .collect()
    }

    pub fn user_credentials(&self, name: &str) -> Result<Vec<ScramCredential>, MetadataError> {
        let user = self
            .users
            .get(name)
            .ok_or_else(|| MetadataError::UnknownUser(name.to_owned()))?;
        Ok(user
            .credentials
            .iter()
            .map(StoredCredential::to_wire)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_auth::scram::{ITERATIONS_MIN, new_credential};

    fn credential(mechanism: ScramMechanism) -> ScramCredential {
        new_credential(mechanism, "pw", ITERATIONS_MIN).unwrap()
    }

    #[test]
    fn users_are_created_once_listed_without_keys_and_deleted() {
        let mut m = Metadata::default();
        let both = [
            credential(ScramMechanism::Sha512),
            credential(ScramMechanism::Sha256),
        ];
        m.create_user("alice", &both, 10).unwrap();
        assert_eq!(
            m.create_user("alice", &both[..1], 10),
            Err(MetadataError::UserExists("alice".into()))
        );
        assert_eq!(
            m.list_users(),
            vec![UserSummary {
                name: "alice".into(),
                mechanisms: vec![ScramMechanism::Sha256, ScramMechanism::Sha512],
            }]
        );
        assert_eq!(m.user_credentials("alice").unwrap().len(), 2);
        m.validate().unwrap();
        m.delete_user("alice").unwrap();
        assert_eq!(
            m.delete_user("alice"),
            Err(MetadataError::UnknownUser("alice".into()))
        );
    }

    #[test]
    fn unusable_users_and_too_many_are_refused() {
        let mut m = Metadata::default();
        let one = [credential(ScramMechanism::Sha256)];
        assert!(m.create_user("a/b", &one, 10).is_err());
        assert!(m.create_user("nobody", &[], 10).is_err());
        let twice = [one[0].clone(), one[0].clone()];
        assert!(m.create_user("twice", &twice, 10).is_err());
        let mut short = one[0].clone();
        short.stored_key = short.stored_key.slice(..8);
        assert!(m.create_user("short", &[short], 10).is_err());
        let mut cheap = one[0].clone();
        cheap.iterations = 1;
        assert!(m.create_user("cheap", &[cheap], 10).is_err());
        m.create_user("first", &one, 1).unwrap();
        assert!(matches!(
            m.create_user("second", &one, 1),
            Err(MetadataError::LimitReached(_))
        ));
    }
}
