//! Changing a stream after creation: growing it (Kafka's CreatePartitions: the new streamlets
//! are placed and made durable, then their owners are sent those alone, as a creation sends
//! its own) and setting its retention (IncrementalAlterConfigs: durable, then its owners are
//! sent their assignments, which carry it) and its logs' starts (DeleteRecords: durable, then
//! the streamlet's owner is sent its assignment, which carries them).

use super::{CoordinatorService, decode, later};
use bytes::Bytes;
use std::time::Instant;
use tailstream_net::{Reply, Response};
use tailstream_wire::StreamletId;
use tailstream_wire::messages::{
    AddStreamletsRequest, AlterRetentionRequest, DeleteRecordsRequest,
};

impl CoordinatorService {
    pub(super) fn add_streamlets(&self, body: Bytes) -> Reply {
        let request: AddStreamletsRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let core = self.core.clone();
        later(async move {
            let live = core.lock().live_brokers(Instant::now());
            let name = request.name.clone();
            let grown = core
                .change(move |m| {
                    let base = m.version;
                    let (record, before) =
                        m.add_streamlets(&request.name, request.streamlets, &live)?;
                    Ok((
                        m.describe(&record),
                        base,
                        m.version,
                        before,
                        record.assignments_from(StreamletId(before)),
                    ))
                })
                .await;
            let (metadata, base, version, before, added) = match grown {
                Ok(grown) => grown,
                Err(error) => return error.response(),
            };
            if version != base {
                tracing::info!(
                    stream = %name,
                    before,
                    streamlets = metadata.streamlets.len(),
                    "stream grown"
                );
                // Only the new streamlets' owners gain anything: they are sent those alone.
                core.push_additions(base, version, added).await;
            }
            Response::ok(&metadata)
        })
    }

    pub(super) fn alter_retention(&self, body: Bytes) -> Reply {
        let request: AlterRetentionRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let core = self.core.clone();
        later(async move {
            let name = request.name.clone();
            let altered = core
                .change(move |m| {
                    let base = m.version;
                    let record = m.alter_retention(
                        &request.name,
                        request.retention_ms,
                        request.retention_bytes,
                    )?;
                    Ok((m.describe(&record), base, m.version, record))
                })
                .await;
            let (metadata, base, version, record) = match altered {
                Ok(altered) => altered,
                Err(error) => return error.response(),
            };
            if version != base {
                tracing::info!(
                    stream = %name,
                    retention_ms = record.config.retention_ms,
                    retention_bytes = record.config.retention_bytes,
                    "stream retention changed"
                );
                // The owners free by it from their next assignment (a missed push: from the
                // next heartbeat's).
                let owners = record.assignments_by_owner().into_keys().collect();
                core.push_assignments(owners).await;
            }
            Response::ok(&metadata)
        })
    }

    pub(super) fn delete_records(&self, body: Bytes) -> Reply {
        let request: DeleteRecordsRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let core = self.core.clone();
        later(async move {
            let (name, streamlet) = (request.name.clone(), request.streamlet);
            let changed = core
                .change(move |m| {
                    let base = m.version;
                    let (owner, assignment) = m.delete_records(
                        &request.name,
                        request.stream,
                        request.streamlet,
                        request.epoch,
                        &request.starts,
                    )?;
                    Ok((base, m.version, owner, assignment))
                })
                .await;
            match changed {
                Ok((base, version, owner, Some(assignment))) => {
                    tracing::info!(stream = %name, %streamlet, "records deleted before new log starts");
                    // The owner alone hears, of this streamlet alone, as an addition (a held
                    // streamlet takes an added assignment's starts): no broker is sent its
                    // whole assignment for it. A missed push: its next heartbeat's.
                    let added = std::collections::HashMap::from([(owner, vec![assignment])]);
                    core.push_additions(base, version, added).await;
                    Response::empty()
                }
                Ok((_, _, _, None)) => Response::empty(),
                Err(error) => error.response(),
            }
        })
    }
}
