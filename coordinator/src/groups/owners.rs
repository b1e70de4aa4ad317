//! Which user made each group, and how much each user's groups hold: so no one user can take
//! every group the coordinator allows (`coordinator.groups_max`) or fill the offsets store,
//! and lock everyone else out.
//!
//! A group belongs to the user whose join or commit made it (a group exists while it has
//! members or committed offsets). Others the access rules let read the group use it as
//! before; what they commit is counted against its owner. Anonymous callers (authentication
//! off) own nothing: only the cluster-wide limits hold them.
//!
//! Pure: the caller says which groups exist. Counts are kept from when this coordinator
//! started leading: groups made before are held to the cluster-wide limits only. A user's
//! count of groups is recounted only when it reaches the limit (groups that emptied since are
//! given up then), so the common path is one map lookup.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
pub struct OwnerLimits {
    /// Groups one user may own (0: not limited).
    pub groups_per_user_max: usize,
    /// Committed partitions the groups one user owns may hold together (0: not limited).
    pub committed_partitions_per_user_max: usize,
}

#[derive(Debug, Default)]
struct Holdings {
    groups: HashSet<String>,
    committed_partitions: usize,
}

#[derive(Debug)]
pub struct GroupOwners {
    limits: OwnerLimits,
    owner_of: HashMap<String, Arc<str>>,
    held: HashMap<Arc<str>, Holdings>,
}

impl GroupOwners {
    pub fn new(limits: OwnerLimits) -> Self {
        Self {
            limits,
            owner_of: HashMap::new(),
            held: HashMap::new(),
        }
    }

    /// Before `user` joins or commits to `group`: a group that does not exist yet becomes
    /// `user`'s, if `user` may own one more. `exists` says whether a group has members or
    /// committed offsets now.
    pub fn admit(
        &mut self,
        group: &str,
        user: Option<&str>,
        exists: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        if exists(group) {
            return Ok(());
        }
        // The group is new, whatever an earlier owner's record says (it emptied since).
        if let Some(earlier) = self.owner_of.remove(group)
            && let Some(holdings) = self.held.get_mut(&earlier)
        {
            holdings.groups.remove(group);
        }
        let Some(user) = user else {
            return Ok(());
        };
        let max = self.limits.groups_per_user_max;
        let holdings = self.held.entry(Arc::from(user)).or_default();
        if max > 0 && holdings.groups.len() >= max {
            let owner_of = &mut self.owner_of;
            holdings.groups.retain(|owned| {
                let kept = exists(owned);
                if !kept {
                    owner_of.remove(owned);
                }
                kept
            });
            if holdings.groups.len() >= max {
                return Err(format!(
                    "user {user:?} already has {max} consumer groups (coordinator.groups_per_user_max)"
                ));
            }
        }
        holdings.groups.insert(group.to_owned());
        let owner = self
            .held
            .get_key_value(user)
            .map(|(owner, _)| owner.clone())
            .unwrap_or_else(|| Arc::from(user));
        self.owner_of.insert(group.to_owned(), owner);
        Ok(())
    }

    /// Before a commit adds `added` partitions `group` had no offset for: refused if its owner's
    /// groups would then hold more than the limit; else counted.
    pub fn add_partitions(&mut self, group: &str, added: usize) -> Result<(), String> {
        let Some(owner) = self.owner_of.get(group) else {
            return Ok(());
        };
        let max = self.limits.committed_partitions_per_user_max;
        let Some(holdings) = self.held.get_mut(owner) else {
            return Ok(());
        };
        let after = holdings.committed_partitions.saturating_add(added);
        if max > 0 && after > max {
            return Err(format!(
                "the groups of user {owner:?} hold {} committed partitions; {added} more would pass {max} (coordinator.group_committed_partitions_per_user_max)",
                holdings.committed_partitions
            ));
        }
        holdings.committed_partitions = after;
        Ok(())
    }

    /// Gives back what `add_partitions` counted for a commit that then failed.
    pub fn remove_partitions(&mut self, group: &str, removed: usize) {
        if let Some(holdings) = self
            .owner_of
            .get(group)
            .and_then(|owner| self.held.get_mut(owner))
        {
            holdings.committed_partitions = holdings.committed_partitions.saturating_sub(removed);
        }
    }

    /// Groups `user` owns now (as last counted).
    pub fn groups_of(&self, user: &str) -> usize {
        self.held.get(user).map_or(0, |h| h.groups.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn owners(groups: usize, partitions: usize) -> GroupOwners {
        GroupOwners::new(OwnerLimits {
            groups_per_user_max: groups,
            committed_partitions_per_user_max: partitions,
        })
    }

    #[test]
    fn one_user_cannot_take_every_group() {
        let mut owners = owners(2, 0);
        let existing: RefCell<HashSet<String>> = RefCell::default();
        let exists = |g: &str| existing.borrow().contains(g);
        for group in ["a", "b"] {
            owners.admit(group, Some("mallory"), exists).unwrap();
            existing.borrow_mut().insert(group.into());
        }
        let refused = owners.admit("c", Some("mallory"), exists).unwrap_err();
        assert!(refused.contains("groups_per_user_max"), "{refused}");
        // Others are not held by mallory's count, nor is anyone using mallory's groups.
        owners.admit("c", Some("alice"), exists).unwrap();
        owners.admit("a", Some("alice"), exists).unwrap();
        owners.admit("d", None, exists).unwrap();
        assert_eq!(owners.groups_of("alice"), 1);
        // A group that emptied is given up when the count is reached again.
        existing.borrow_mut().remove("a");
        owners.admit("c2", Some("mallory"), exists).unwrap();
        assert_eq!(owners.groups_of("mallory"), 2);
    }

    #[test]
    fn a_group_made_again_belongs_to_its_new_maker() {
        let mut owners = owners(1, 10);
        let none = |_: &str| false;
        owners.admit("g", Some("mallory"), none).unwrap();
        // "g" emptied; alice makes it again: hers now, and mallory's count is freed.
        owners.admit("g", Some("alice"), none).unwrap();
        assert_eq!(owners.groups_of("mallory"), 0);
        owners.add_partitions("g", 10).unwrap();
        assert!(owners.add_partitions("g", 1).is_err());
        owners.admit("h", Some("mallory"), none).unwrap();
        owners.add_partitions("h", 10).unwrap();
    }

    #[test]
    fn committed_partitions_count_against_the_owner() {
        let mut owners = owners(0, 100);
        let none = |_: &str| false;
        owners.admit("g1", Some("mallory"), none).unwrap();
        owners.admit("g2", Some("mallory"), none).unwrap();
        owners.add_partitions("g1", 60).unwrap();
        let refused = owners.add_partitions("g2", 41).unwrap_err();
        assert!(refused.contains("per_user_max"), "{refused}");
        owners.add_partitions("g2", 40).unwrap();
        // Groups without an owner (made before this leader, or anonymously) are held to the
        // cluster-wide limits only.
        owners.add_partitions("older", 1_000).unwrap();
        owners.admit("anon", None, none).unwrap();
        owners.add_partitions("anon", 1_000).unwrap();
    }
}
