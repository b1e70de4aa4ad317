//! Groups as Kafka's DescribeGroups shows them: a child of `membership`, so it reads the
//! state machine's private state without widening it.

use super::{Groups, State};
use tailstream_wire::messages::{GroupDescription, GroupMemberDescription, GroupPhase};

impl Groups {
    /// A group with members (or forming) as DescribeGroups shows it; `None` if it has none.
    pub fn describe(&self, name: &str) -> Option<GroupDescription> {
        let group = self.groups.get(name)?;
        let phase = match group.state {
            State::Empty => GroupPhase::Empty,
            State::PreparingRebalance => GroupPhase::PreparingRebalance,
            State::CompletingRebalance => GroupPhase::CompletingRebalance,
            State::Stable => GroupPhase::Stable,
        };
        let members = group
            .members
            .iter()
            .map(|(id, member)| GroupMemberDescription {
                member_id: id.clone(),
                client_id: member.client_id.clone(),
                metadata: member.metadata_for(&group.protocol),
                assignment: member.assignment.clone(),
            })
            .collect();
        Some(GroupDescription {
            group: name.to_owned(),
            phase,
            protocol_type: group.protocol_type.clone(),
            protocol: group.protocol.clone(),
            members,
        })
    }
}
