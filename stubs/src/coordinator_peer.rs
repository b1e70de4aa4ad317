//! [`CoordinatorPeerClient`]: what a broker tells the coordinator on its peer listener:
//! register, heartbeat (which renews the broker's lease), report a silent peer, and report the
//! log bounds replicators wait on. One connection each: the broker's membership session, its
//! log-bounds reporter and its pinger each hold their own, so a slow call on one delays none
//! of the others.

use crate::error::StubError;
use tailstream_net::{RpcClient, RpcClientConfig};
use tailstream_wire::Opcode;
use tailstream_wire::messages::{
    BrokerHeartbeatRequest, BrokerHeartbeatResponse, Empty, RegisterBrokerRequest,
    RegisterBrokerResponse, ReportLogBoundsRequest, ReportLogBoundsResponse, ReportSuspectRequest,
};

#[derive(Clone, Debug)]
pub struct CoordinatorPeerClient {
    client: RpcClient,
}

impl CoordinatorPeerClient {
    /// Connects to the coordinator's peer listener at `addr`.
    pub async fn connect(addr: &str, config: RpcClientConfig) -> Result<Self, StubError> {
        Ok(Self::over(RpcClient::connect(addr, config).await?))
    }

    /// Speaks over a connection the caller made (a pooled one).
    pub fn over(client: RpcClient) -> Self {
        Self { client }
    }

    /// Registers this broker process: a new server id (a new generation at a known address)
    /// and its first assignment. Refused with `UnknownOpcode`, as fatal, when `addr` is the
    /// coordinator's client listener instead of its peer listener.
    pub async fn register(
        &self,
        request: &RegisterBrokerRequest,
    ) -> Result<RegisterBrokerResponse, StubError> {
        Ok(self.client.call(Opcode::RegisterBroker, request).await?)
    }

    /// One heartbeat. Refused with `UnknownServer` or `StaleGeneration` when this incarnation
    /// is no longer a member.
    pub async fn heartbeat(
        &self,
        request: &BrokerHeartbeatRequest,
    ) -> Result<BrokerHeartbeatResponse, StubError> {
        Ok(self.client.call(Opcode::BrokerHeartbeat, request).await?)
    }

    /// Reports a peer that missed its pings; the coordinator confirms before declaring it.
    pub async fn report_suspect(&self, request: &ReportSuspectRequest) -> Result<(), StubError> {
        let _: Empty = self.client.call(Opcode::ReportSuspect, request).await?;
        Ok(())
    }

    /// Log heads, oldest kept and open segments, to be saved durably; the answer says which
    /// the coordinator saved.
    pub async fn report_log_bounds(
        &self,
        request: &ReportLogBoundsRequest,
    ) -> Result<ReportLogBoundsResponse, StubError> {
        Ok(self.client.call(Opcode::ReportLogBounds, request).await?)
    }
}
