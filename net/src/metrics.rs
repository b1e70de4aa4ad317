//! Names and help texts of the metrics every listener exports (each process describes them
//! at start with [`describe`]).

pub const CONNECTIONS_OPEN: &str = "tailstream_connections_open";
pub const CONNECTIONS_REFUSED: &str = "tailstream_connections_refused_total";
pub const CONNECTIONS_CLOSED: &str = "tailstream_connections_closed_total";
pub const CONNECTIONS_EVICTED: &str = "tailstream_connections_evicted_total";
pub const REQUEST_BODY_BYTES: &str = "tailstream_request_body_bytes";
pub const REQUEST_BODY_WAITS: &str = "tailstream_request_body_waits_total";
pub const SESSIONS_REVOKED: &str = "tailstream_sessions_revoked_total";

/// Registers help texts for the listener metrics.
pub fn describe() {
    metrics::describe_gauge!(
        CONNECTIONS_OPEN,
        "Connections open, per listener (rpc, peer, nic, admin)"
    );
    metrics::describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections accepted and closed at once, per listener and reason (connections_max, per_address)"
    );
    metrics::describe_counter!(
        CONNECTIONS_CLOSED,
        "Connections ended, per listener and reason (peer, idle, request_timeout, bad_input, io, shutdown, unauthenticated, evicted)"
    );
    metrics::describe_counter!(
        CONNECTIONS_EVICTED,
        "Connections not yet authenticated closed to make room for a new one on a full listener, per listener"
    );
    metrics::describe_gauge!(
        REQUEST_BODY_BYTES,
        metrics::Unit::Bytes,
        "Bytes of request bodies being received, per budget (clients, members)"
    );
    metrics::describe_counter!(
        REQUEST_BODY_WAITS,
        "Frames that waited for the body budget, per budget"
    );
    metrics::describe_counter!(
        SESSIONS_REVOKED,
        "Authenticated native connections closed because their user was deleted or its password changed"
    );
}
