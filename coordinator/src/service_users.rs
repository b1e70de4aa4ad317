//! The coordinator's user operations: create, delete and list (on either listener), and the
//! credential lookup brokers check a client's authentication against (peer listener only:
//! a client gets no key material).

use super::{CoordinatorService, decode, later};
use bytes::Bytes;
use tailstream_net::{Reply, Response};
use tailstream_wire::messages::{
    CreateUserRequest, DeleteUserRequest, ListUsersResponse, LookupCredentialsRequest,
    LookupCredentialsResponse,
};

impl CoordinatorService {
    pub(super) fn create_user(&self, body: Bytes) -> Reply {
        let request: CreateUserRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let (core, users_max) = (self.core.clone(), self.settings.users_max);
        later(async move {
            let name = request.name.clone();
            let created = core
                .change(move |m| m.create_user(&request.name, &request.credentials, users_max))
                .await;
            match created {
                Ok(()) => {
                    tracing::info!(user = %name, "user created");
                    Response::empty()
                }
                Err(error) => error.response(),
            }
        })
    }

    pub(super) fn delete_user(&self, body: Bytes) -> Reply {
        let request: DeleteUserRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let core = self.core.clone();
        later(async move {
            let name = request.name.clone();
            match core.change(move |m| m.delete_user(&request.name)).await {
                Ok(()) => {
                    tracing::info!(user = %name, "user deleted");
                    Response::empty()
                }
                Err(error) => error.response(),
            }
        })
    }

    pub(super) fn list_users(&self) -> Response {
        let users = self.core.lock().metadata.list_users();
        Response::ok(&ListUsersResponse { users })
    }

    pub(super) fn lookup_credentials(&self, body: Bytes) -> Result<Response, Response> {
        let request: LookupCredentialsRequest = decode(body)?;
        let credentials = self
            .core
            .lock()
            .metadata
            .user_credentials(&request.name)
            .map_err(|e| Response::error(e.status(), e.to_string()))?;
        Ok(Response::ok(&LookupCredentialsResponse { credentials }))
    }
}
