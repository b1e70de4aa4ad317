//! The baseline write path: every write is a `ReplicaWrite` request on the backup's RPC port,
//! which the backup parses, verifies and copies before it answers.

use super::{ReplicaWriter, TransportError, WriteFuture, WriteTarget, failed};
use bytes::Bytes;
use tailstream_net::RpcClient;
use tailstream_wire::messages::ReplicaWriteRequest;
use tailstream_wire::{Opcode, ServerId};

#[derive(Debug)]
pub struct RpcWriter {
    client: RpcClient,
    primary: ServerId,
}

impl RpcWriter {
    pub fn new(client: RpcClient, primary: ServerId) -> Self {
        Self { client, primary }
    }
}

impl ReplicaWriter for RpcWriter {
    fn write(&self, target: WriteTarget, offset: u32, parts: Vec<Bytes>) -> WriteFuture {
        let request = ReplicaWriteRequest {
            primary: self.primary,
            replica: target.replica,
            key: target.key,
            offset,
            entries: Bytes::new(),
        };
        let mut body = Vec::with_capacity(parts.len() + 1);
        body.push(request.encode_prefix().freeze());
        body.extend(parts);
        // Queued now, so writes issued in order reach the backup in order.
        match self.client.try_start(Opcode::ReplicaWrite, body) {
            Ok(pending) => Box::pin(async move {
                pending
                    .wait()
                    .await
                    .map(|_| ())
                    .map_err(|e| TransportError::Broken(e.to_string()))
            }),
            Err(error) => failed(error.to_string()),
        }
    }

    fn is_broken(&self) -> bool {
        self.client.is_closed()
    }
}
