//! ApiVersions: what this listener serves. A request at a version not served gets a v0 answer
//! with UNSUPPORTED_VERSION and the versions served, and the client retries with one of them.

use super::{Answer, encode};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use tailstream_kafka_wire::Api;

fn response(error_code: i16) -> ApiVersionsResponse {
    let api_keys = Api::ALL
        .iter()
        .map(|api| {
            let (min, max) = api.advertised();
            ApiVersion::default()
                .with_api_key(*api as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

pub(crate) fn answer(version: i16) -> Answer {
    Answer::Ready(encode(&response(0), version))
}

pub(crate) fn unsupported_version() -> Answer {
    Answer::Ready(encode(
        &response(ResponseError::UnsupportedVersion.code()),
        0,
    ))
}
