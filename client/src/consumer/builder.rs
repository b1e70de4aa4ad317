//! [`ConsumerBuilder`]: where a consumer starts, which share of the stream it reads, and
//! whether it reads as a member of a consumer group.

use super::group::GroupMember;
use super::logs::{LogConsumer, Membership};
use super::{Consumer, LogPosition, Reader, StartFrom};
use crate::cluster::Cluster;
use crate::error::ClientError;
use std::sync::Arc;
use tailstream_config::{ClientConfig, ConsumerConfig};

/// Configures a [`Consumer`]; made by [`crate::Client::consumer`].
///
/// Without a group, a consumer reads every log of the stream (or a static share of them,
/// [`member`](Self::member)) and keeps its own positions. With a [`group`](Self::group), the
/// consumers naming that group share the stream: each log is read by one live member, and a
/// member that joins, leaves or dies hands its logs over from the group's committed offsets.
///
/// ```no_run
/// # async fn demo() -> Result<(), tailstream_client::ClientError> {
/// let client = tailstream_client::Client::connect("127.0.0.1:7400").await?;
/// // Everything from the oldest record on, in this process alone.
/// let mut all = client.consumer("clicks").from_beginning().build().await?;
/// // One member of the group "billing": logs the group never committed start at the oldest.
/// let mut member = client
///     .consumer("clicks")
///     .group("billing")
///     .from_beginning()
///     .session_timeout_ms(10_000)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ConsumerBuilder {
    cluster: Arc<Cluster>,
    client: ClientConfig,
    stream: String,
    config: ConsumerConfig,
    start: StartFrom,
    group: Option<String>,
    membership: Membership,
    resume: Vec<LogPosition>,
}

impl ConsumerBuilder {
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        client: ClientConfig,
        stream: &str,
        config: ConsumerConfig,
    ) -> Self {
        Self {
            cluster,
            client,
            stream: stream.to_owned(),
            config,
            start: StartFrom::End,
            group: None,
            membership: Membership {
                member: 0,
                members: 1,
            },
            resume: Vec::new(),
        }
    }

    /// Reads as a member of consumer group `group` (Kafka clients of the same group name share
    /// its committed offsets).
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(group.to_owned());
        self
    }

    /// Starts at the oldest record still kept in logs with no position (no committed offset,
    /// in a group). Kafka's `auto.offset.reset = earliest`.
    pub fn from_beginning(self) -> Self {
        self.start(StartFrom::Beginning)
    }

    /// Starts with what is appended from now on in logs with no position (the default).
    /// Kafka's `auto.offset.reset = latest`.
    pub fn from_end(self) -> Self {
        self.start(StartFrom::End)
    }

    /// Where to start in logs with no position.
    pub fn start(mut self, start: StartFrom) -> Self {
        self.start = start;
        self
    }

    /// Reads a static share of the stream: every `members`-th log (in `streamlet * Q + log`
    /// order) starting at the `member`-th, so `members` consumers split a stream with no
    /// overlap and no group. Not with [`group`](Self::group).
    pub fn member(mut self, member: u32, members: u32) -> Self {
        self.membership = Membership { member, members };
        self
    }

    /// Resumes each log at a position an earlier consumer's
    /// [`positions`](Consumer::positions) returned; other logs start as configured. Not with
    /// [`group`](Self::group), whose positions are its committed offsets.
    pub fn resume_from(mut self, positions: &[LogPosition]) -> Self {
        self.resume = positions.to_vec();
        self
    }

    /// The most bytes one fetch returns per log.
    pub fn fetch_max_bytes(mut self, bytes: u32) -> Self {
        self.config.fetch_max_bytes = bytes;
        self
    }

    /// How long a fetch at the head of a log waits for new records.
    pub fn fetch_max_wait_ms(mut self, wait_ms: u32) -> Self {
        self.config.fetch_max_wait_ms = wait_ms;
        self
    }

    /// In a group: a member silent this long is removed and its logs go to the others.
    pub fn session_timeout_ms(mut self, timeout_ms: u32) -> Self {
        self.config.member_session_timeout_ms = timeout_ms;
        self
    }

    /// In a group: how often the member tells the coordinator it is alive.
    pub fn heartbeat_interval_ms(mut self, interval_ms: u64) -> Self {
        self.config.member_heartbeat_interval_ms = interval_ms;
        self
    }

    /// In a group: how often polls commit what earlier polls returned, at most.
    pub fn commit_interval_ms(mut self, interval_ms: u64) -> Self {
        self.config.member_commit_interval_ms = interval_ms;
        self
    }

    /// Replaces every consumer setting at once (e.g. the `[consumer]` table of a config file).
    pub fn config(mut self, config: ConsumerConfig) -> Self {
        self.config = config;
        self
    }

    /// Checks the settings and starts the consumer. A group member joins its group on its
    /// first poll; a consumer outside a group learns the stream's metadata now.
    pub async fn build(self) -> Result<Consumer, ClientError> {
        let Membership { member, members } = self.membership;
        if members == 0 || member >= members {
            return Err(ClientError::Config(format!(
                "consumer member {member} of {members}: member must be below members"
            )));
        }
        let reader = match &self.group {
            Some(group) => {
                if members != 1 || !self.resume.is_empty() {
                    return Err(ClientError::Config(
                        "a group member reads the share its group assigns, from the group's \
                         committed offsets: drop member() and resume_from(), or the group"
                            .into(),
                    ));
                }
                Reader::Group(Box::new(GroupMember::new(
                    self.cluster,
                    &self.client,
                    &self.stream,
                    group,
                    self.config,
                    self.start,
                )?))
            }
            None => Reader::Alone(
                LogConsumer::new(
                    self.cluster,
                    &self.stream,
                    self.config,
                    self.start,
                    self.membership,
                    &self.resume,
                )
                .await?,
            ),
        };
        Ok(Consumer { reader })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Client, ClientError};

    // An address nothing listens on: these settings must be refused before any connection.
    const NOWHERE: &str = "127.0.0.1:9";

    #[tokio::test]
    async fn a_share_outside_the_stream_is_refused_before_connecting() {
        let client = Client::builder(NOWHERE).build();
        let error = client.consumer("s").member(3, 3).build().await.unwrap_err();
        assert!(matches!(error, ClientError::Config(_)), "{error}");
        let error = client.consumer("s").member(0, 0).build().await.unwrap_err();
        assert!(matches!(error, ClientError::Config(_)), "{error}");
    }

    #[tokio::test]
    async fn a_group_member_takes_neither_a_static_share_nor_saved_positions() {
        let client = Client::builder(NOWHERE).build();
        let error = client
            .consumer("s")
            .group("g")
            .member(0, 2)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(error, ClientError::Config(_)), "{error}");
        let error = client.consumer("s").group("").build().await.unwrap_err();
        assert!(matches!(error, ClientError::Config(_)), "{error}");
    }

    #[tokio::test]
    async fn connect_reports_an_unreachable_coordinator() {
        let error = Client::connect(NOWHERE).await.unwrap_err();
        assert!(error.is_retryable(), "{error}");
    }
}
