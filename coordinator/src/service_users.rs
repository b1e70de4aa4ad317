//! The coordinator's security operations: users (create, delete, list, on the client listener
//! only; and the credential lookup brokers check a client's authentication against, on the
//! peer listener only: a client gets no key material) and access control rules (add, remove
//! on the client listener; list on both, brokers enforce them). On the client listener each
//! needs the cluster's admin token when one is configured; no member changes them.

use super::{CoordinatorService, decode, later};
use crate::metadata::{Metadata, MetadataError};
use bytes::Bytes;
use tailstream_auth::scram::decoy_credential;
use tailstream_net::{Reply, Response};
use tailstream_wire::messages::{
    AclChangeRequest, CreateUserRequest, DeleteUserRequest, ListAclsResponse, ListUsersResponse,
    LookupCredentialsRequest, LookupCredentialsResponse, SecurityListRequest,
};
use tailstream_wire::messages::{ScramCredential, ScramMechanism};
use tailstream_wire::{Decode, Status};

/// A secret of this process: never printed.
#[derive(Clone, Copy)]
pub(super) struct DecoySecret(pub [u8; 32]);

impl std::fmt::Debug for DecoySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DecoySecret(..)")
    }
}

/// The cluster's admin token (`security.admin_token`; `None`: not required): never printed.
#[derive(Clone, Default)]
pub struct AdminToken(pub Option<std::sync::Arc<str>>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "AdminToken(set)"
        } else {
            "AdminToken(none)"
        })
    }
}

impl AdminToken {
    pub fn from_config(token: &str) -> AdminToken {
        AdminToken((!token.is_empty()).then(|| std::sync::Arc::from(token)))
    }

    /// Refuses a request that does not carry the token (where one is required: `checked`
    /// is false for the peer listener, whose callers are the cluster's own members).
    fn check(&self, checked: bool, given: &str) -> Result<(), Response> {
        match &self.0 {
            Some(expected) if checked && !tailstream_auth::token_matches(given, expected) => {
                Err(Response::error(
                    Status::Unauthorized,
                    "this operation needs the cluster's admin token (security.admin_token; \
                     the CLI sends $TAILSTREAM_ADMIN_TOKEN)",
                ))
            }
            _ => Ok(()),
        }
    }
}

impl CoordinatorService {
    /// The cluster's admin token, for this coordinator's calls to brokers' admin ports.
    pub fn admin_token(&self) -> Option<std::sync::Arc<str>> {
        self.settings.admin_token.0.clone()
    }

    /// Decodes a security request and checks the admin token it carries (`token`).
    fn admitted<T: Decode>(
        &self,
        body: Bytes,
        checked: bool,
        token: fn(&T) -> &str,
    ) -> Result<T, Response> {
        let request: T = decode(body)?;
        self.settings.admin_token.check(checked, token(&request))?;
        Ok(request)
    }

    /// Makes `change` to the metadata (saved before the answer), logging `done` once made.
    fn change_security(
        &self,
        done: String,
        change: impl FnOnce(&mut Metadata) -> Result<(), MetadataError> + Send + 'static,
    ) -> Reply {
        let core = self.core.clone();
        later(async move {
            match core.change(change).await {
                Ok(()) => {
                    tracing::info!(change = %done, "security metadata changed");
                    Response::empty()
                }
                Err(error) => error.response(),
            }
        })
    }

    pub(super) fn create_user(&self, body: Bytes, checked: bool) -> Reply {
        let request: CreateUserRequest =
            match self.admitted(body, checked, |r: &CreateUserRequest| &r.admin_token) {
                Ok(request) => request,
                Err(refused) => return Reply::Ready(refused),
            };
        let users_max = self.settings.users_max;
        self.change_security(format!("user {} created", request.name), move |m| {
            m.create_user(&request.name, &request.credentials, users_max)
        })
    }

    pub(super) fn delete_user(&self, body: Bytes, checked: bool) -> Reply {
        let request: DeleteUserRequest =
            match self.admitted(body, checked, |r: &DeleteUserRequest| &r.admin_token) {
                Ok(request) => request,
                Err(refused) => return Reply::Ready(refused),
            };
        self.change_security(format!("user {} deleted", request.name), move |m| {
            m.delete_user(&request.name)
        })
    }

    pub(super) fn list_users(&self, body: Bytes, checked: bool) -> Result<Response, Response> {
        self.admitted(body, checked, |r: &SecurityListRequest| &r.admin_token)?;
        let users = self.core.lock().metadata.list_users();
        Ok(Response::ok(&ListUsersResponse { users }))
    }

    pub(super) fn lookup_credentials(&self, body: Bytes) -> Result<Response, Response> {
        let request: LookupCredentialsRequest = decode(body)?;
        let (credentials, known) = self.credentials_or_decoys(&request.name);
        Ok(Response::ok(&LookupCredentialsResponse {
            credentials,
            known,
        }))
    }

    /// `name`'s credentials and `true`; for a name that is no user's, decoys and `false`: the
    /// same from every broker and this coordinator's own client listener, derived from the
    /// cluster's secret (saved when the first coordinator led; this process's only for
    /// metadata that somehow has none) and the name.
    pub(super) fn credentials_or_decoys(&self, name: &str) -> (Vec<ScramCredential>, bool) {
        let state = self.core.lock();
        match state.metadata.user_credentials(name) {
            Ok(credentials) => (credentials, true),
            Err(_) => {
                let secret = state.metadata.decoy_secret.unwrap_or(self.decoy_secret.0);
                let decoys = ScramMechanism::ALL
                    .iter()
                    .map(|&m| decoy_credential(m, name, &secret))
                    .collect();
                (decoys, false)
            }
        }
    }
}

impl CoordinatorService {
    /// Adds (`add`) or removes an access control rule.
    pub(super) fn change_acl(&self, body: Bytes, add: bool, checked: bool) -> Reply {
        let request: AclChangeRequest =
            match self.admitted(body, checked, |r: &AclChangeRequest| &r.admin_token) {
                Ok(request) => request,
                Err(refused) => return Reply::Ready(refused),
            };
        let rule = request.rule;
        let done = format!(
            "rule {} {} {} {}:{}",
            if add { "added:" } else { "removed:" },
            rule.principal,
            rule.operation.name(),
            rule.resource.name(),
            rule.name
        );
        let acls_max = self.settings.acls_max;
        self.change_security(done, move |m| {
            if add {
                m.add_acl(&rule, acls_max)
            } else {
                m.remove_acl(&rule)
            }
        })
    }

    pub(super) fn list_acls(&self, body: Bytes, checked: bool) -> Result<Response, Response> {
        self.admitted(body, checked, |r: &SecurityListRequest| &r.admin_token)?;
        let rules = self.core.lock().metadata.list_acls();
        Ok(Response::ok(&ListAclsResponse { rules }))
    }
}
