//! The memory budget for request bodies being received.
//!
//! A server makes room for a large frame body only after taking that many bytes from its
//! budget, and gives them back once the frame was handed to the service. When the budget is
//! spent, the frame waits (its connection stops reading, which pushes back on the peer through
//! TCP) until bytes come back or the frame's read deadline passes and the connection is closed.
//! So however many peers announce large bodies and then stall, the bytes held for them never
//! pass the budget. Members of the cluster and anonymous clients get separate budgets.

use crate::metrics as m;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Shared by every connection it covers; cheap to clone.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    name: &'static str,
    bytes_max: u32,
    bytes: Arc<Semaphore>,
}

/// Bytes taken from a budget, given back when dropped.
#[derive(Debug)]
pub struct BodyPermit {
    budget: BodyBudget,
    _bytes: OwnedSemaphorePermit,
}

impl BodyBudget {
    /// A budget of `bytes_max` bytes; `name` labels its metrics ("clients", "members").
    pub fn new(name: &'static str, bytes_max: u32) -> Self {
        metrics::gauge!(m::REQUEST_BODY_BYTES, "budget" => name).set(0.0);
        Self {
            name,
            bytes_max,
            bytes: Arc::new(Semaphore::new(bytes_max as usize)),
        }
    }

    pub fn bytes_max(&self) -> u32 {
        self.bytes_max
    }

    /// Bytes currently taken.
    pub fn in_use(&self) -> u32 {
        self.bytes_max - self.bytes.available_permits() as u32
    }

    /// Takes `bytes`, waiting while the budget is spent. `None` if `bytes` exceeds the whole
    /// budget (it could never be granted).
    pub async fn take(&self, bytes: u32) -> Option<BodyPermit> {
        if bytes > self.bytes_max {
            return None;
        }
        let permit = match self.bytes.clone().try_acquire_many_owned(bytes) {
            Ok(permit) => permit,
            Err(_) => {
                metrics::counter!(m::REQUEST_BODY_WAITS, "budget" => self.name).increment(1);
                // The semaphore is never closed, so acquiring only fails if it were.
                self.bytes.clone().acquire_many_owned(bytes).await.ok()?
            }
        };
        self.report();
        Some(BodyPermit {
            budget: self.clone(),
            _bytes: permit,
        })
    }

    fn report(&self) {
        metrics::gauge!(m::REQUEST_BODY_BYTES, "budget" => self.name).set(f64::from(self.in_use()));
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        // `_bytes` is released after this body runs; report what will remain.
        let remaining = self
            .budget
            .in_use()
            .saturating_sub(self._bytes.num_permits() as u32);
        metrics::gauge!(m::REQUEST_BODY_BYTES, "budget" => self.budget.name)
            .set(f64::from(remaining));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn bytes_are_never_granted_past_the_budget_and_come_back_when_dropped() {
        let budget = BodyBudget::new("test", 100);
        let first = budget.take(60).await.unwrap();
        assert_eq!(budget.in_use(), 60);
        assert!(
            budget.take(101).await.is_none(),
            "larger than the whole budget"
        );
        let waiting = tokio::time::timeout(Duration::from_millis(20), budget.take(50)).await;
        assert!(waiting.is_err(), "waits while the budget is spent");
        drop(first);
        let second = budget.take(50).await.unwrap();
        assert_eq!(budget.in_use(), 50);
        drop(second);
        assert_eq!(budget.in_use(), 0);
    }
}
