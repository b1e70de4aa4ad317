//! The end of each rebuild, saved in batches. A broker's crash can leave tens of thousands of
//! streamlets rebuilding at once, and every metadata change costs about the size of the whole
//! cluster (a copy, its checks, the diff that is written to the store) while each rebuild's
//! own outcome is a few bytes. So a rebuild that ends queues its outcome and joins a group
//! commit: whoever takes the hand-over lock saves every outcome queued so far in one change
//! (served, or lost again), and pushes each new owner its assignment once. A rebuild that finds
//! the queue emptied by an earlier batch is done: that batch saved it.

use super::orchestrator::{Orchestrator, Rebuild};
use crate::core::unix_ms;
use crate::metrics as m;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tailstream_stubs::RebuildFault;
use tailstream_wire::messages::RecoverStreamletResponse;

/// Saves of one batch tried before its rebuilds are given up (and planned again).
const SAVE_ATTEMPTS: usize = 3;
const SAVE_RETRY_AFTER: Duration = Duration::from_millis(200);

/// How one rebuild ended, waiting to be saved.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) rebuild: Rebuild,
    pub(super) started: Instant,
    pub(super) outcome: Outcome,
}

#[derive(Debug)]
pub(super) enum Outcome {
    /// Rebuilt, and every crashed broker's lease ran out: the streamlet may serve.
    Rebuilt {
        done: RecoverStreamletResponse,
        /// The rebuild itself, before the lease wait.
        elapsed_ms: u64,
        lease_wait_ms: u64,
    },
    /// The rebuild failed: the streamlet is lost until a round plans it again. `blame` says
    /// whether the target is avoided for a while.
    Failed {
        error: String,
        blame: Option<RebuildFault>,
    },
}

impl Orchestrator {
    /// Queues how a rebuild ended, and saves it (with every other outcome queued by then)
    /// unless an earlier batch does.
    pub(super) async fn save_when_ended(&self, ended: Ended) {
        self.ended_lock().push(ended);
        let (batch, saved, _released) = {
            let _one_batch_at_a_time = self.save_lock.lock().await;
            let batch = std::mem::take(&mut *self.ended_lock());
            if batch.is_empty() {
                return;
            }
            // Whatever happens from here (this task cancelled, say), the batch's streamlets
            // leave `in_flight` and the next round may plan them.
            let released = Release {
                orchestrator: self,
                keys: batch.iter().map(|ended| ended.rebuild.key).collect(),
            };
            // A failed save costs every rebuild in the batch (each would be planned, fenced
            // and read again), so a store's passing error is retried a few times first.
            let mut saved = self.save_batch(&batch).await;
            for _ in 1..SAVE_ATTEMPTS {
                if saved.is_ok() {
                    break;
                }
                tokio::time::sleep(SAVE_RETRY_AFTER).await;
                saved = self.save_batch(&batch).await;
            }
            (batch, saved, released)
        };
        self.after_saving(batch, saved).await;
    }

    /// One change for the whole batch. Returns, per outcome, whether the streamlet serves
    /// now, or why nothing was saved.
    async fn save_batch(&self, batch: &[Ended]) -> Result<Vec<bool>, String> {
        let mut rebuilt = Vec::new();
        let mut failed = Vec::new();
        for ended in batch {
            let key = ended.rebuild.key;
            match &ended.outcome {
                Outcome::Rebuilt {
                    done,
                    elapsed_ms,
                    lease_wait_ms,
                } => rebuilt.push((
                    (key, ended.rebuild.request.assignment.epoch),
                    done.clone(),
                    *elapsed_ms,
                    *lease_wait_ms,
                )),
                Outcome::Failed { error, .. } => failed.push((
                    key,
                    format!("rebuild on {} failed: {error}", ended.rebuild.target),
                )),
            }
        }
        let served = self
            .core
            .change(move |metadata| {
                let finished: Vec<_> = rebuilt.iter().map(|(item, ..)| *item).collect();
                let serves = metadata.finish_rebuilds(&finished);
                metadata.mark_lost_all(&failed);
                let records = metadata.recovery_index();
                for ((key, _), done, elapsed_ms, lease_wait_ms) in &rebuilt {
                    let Some(record) = records
                        .get(key)
                        .and_then(|at| metadata.recoveries.get_mut(*at))
                    else {
                        continue;
                    };
                    let replay = elapsed_ms.saturating_sub(u64::from(done.rereplicate_ms));
                    record.replay_ms = Some(record.replay_ms.unwrap_or(0).max(replay));
                    record.rereplicate_ms = Some(
                        record
                            .rereplicate_ms
                            .unwrap_or(0)
                            .max(u64::from(done.rereplicate_ms)),
                    );
                    record.lease_wait_ms =
                        Some(record.lease_wait_ms.unwrap_or(0).max(*lease_wait_ms));
                    record.bytes += done.bytes;
                    record.segments_adopted += u64::from(done.segments_adopted);
                    record.segments_copied += u64::from(done.segments_copied);
                }
                // Only a streamlet that serves again can finish a recovery: one whose rebuild
                // failed is planned again, and its recovery is not over.
                if serves.contains(&true) {
                    metadata.settle_recoveries(unix_ms());
                }
                Ok(serves)
            })
            .await
            .map_err(|e| format!("{e:?}"))?;
        // Back in the batch's order: `served` covers the rebuilt outcomes only.
        let mut served = served.into_iter();
        Ok(batch
            .iter()
            .map(|ended| match ended.outcome {
                Outcome::Rebuilt { .. } => served.next().unwrap_or(false),
                Outcome::Failed { .. } => false,
            })
            .collect())
    }

    /// Reports each outcome and pushes the new owners their assignments (the caller's
    /// `Release` then lets the next round plan whatever did not serve).
    async fn after_saving(&self, batch: Vec<Ended>, saved: Result<Vec<bool>, String>) {
        let mut pushes = BTreeSet::new();
        for (at, ended) in batch.iter().enumerate() {
            let key = ended.rebuild.key;
            let (serves, unsaved) = match &saved {
                Ok(serves) => (serves.get(at).copied().unwrap_or(false), None),
                // Not the target's fault: the coordinator could not save the hand-over.
                Err(error) => (false, Some(error)),
            };
            match (&ended.outcome, unsaved) {
                (
                    Outcome::Rebuilt {
                        done,
                        lease_wait_ms,
                        ..
                    },
                    None,
                ) => {
                    if serves {
                        self.report_served(ended, done, *lease_wait_ms);
                        pushes.insert(ended.rebuild.target);
                    }
                }
                (Outcome::Rebuilt { .. }, Some(error)) => {
                    tracing::warn!(streamlet = key.1.0, target = %ended.rebuild.target, %error, "saving a finished rebuild failed; planning it again");
                    self.note_failed(ended, None);
                }
                (Outcome::Failed { error, blame }, _) => {
                    tracing::warn!(streamlet = key.1.0, target = %ended.rebuild.target, %error, ?blame, "rebuild failed; planning it again");
                    self.note_failed(ended, *blame);
                }
            }
        }
        if !pushes.is_empty() {
            self.record_totals();
            self.core
                .push_assignments(pushes.into_iter().collect())
                .await;
        }
    }

    fn report_served(&self, ended: &Ended, done: &RecoverStreamletResponse, lease_wait_ms: u64) {
        metrics::counter!(m::STREAMLETS_RECOVERED).increment(1);
        metrics::histogram!(m::RECOVERY_PHASE, "phase" => "replay").record(
            ended
                .started
                .elapsed()
                .saturating_sub(Duration::from_millis(done.rereplicate_ms.into()))
                .as_secs_f64(),
        );
        metrics::histogram!(m::RECOVERY_PHASE, "phase" => "rereplicate")
            .record(f64::from(done.rereplicate_ms) / 1000.0);
        metrics::histogram!(m::RECOVERY_PHASE, "phase" => "lease_wait")
            .record(lease_wait_ms as f64 / 1000.0);
        tracing::info!(
            stream = %ended.rebuild.request.assignment.stream_name,
            streamlet = ended.rebuild.key.1.0,
            new_owner = %ended.rebuild.target,
            bytes = done.bytes,
            adopted = done.segments_adopted,
            copied = done.segments_copied,
            read_ms = done.read_ms,
            rereplicate_ms = done.rereplicate_ms,
            lease_wait_ms,
            total_ms = ended.started.elapsed().as_millis() as u64,
            "streamlet serving again on its new owner"
        );
    }

    /// A target that failed is avoided for a while (it may be dying), and the streamlet is
    /// planned again at once, elsewhere. One that only found the plan's copies unreadable, or
    /// was superseded, is not avoided; the streamlet is planned again after `LOST_RETRY`, from
    /// fresh listings (the same listing would give the same plan, and each try fences, lists,
    /// saves and reads it all again).
    fn note_failed(&self, ended: &Ended, blame: Option<RebuildFault>) {
        let key = ended.rebuild.key;
        let mut lost_tried = self.lost_tried_lock();
        if blame == Some(RebuildFault::Target) {
            lost_tried.remove(&key);
            self.failed_targets_lock()
                .insert(ended.rebuild.target, Instant::now());
        } else {
            lost_tried.insert(key, Instant::now());
        }
    }
}

/// Takes a batch's streamlets out of `in_flight` and wakes the orchestrator when dropped.
struct Release<'a> {
    orchestrator: &'a Orchestrator,
    keys: Vec<(tailstream_wire::StreamId, tailstream_wire::StreamletId)>,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        {
            let mut in_flight = self.orchestrator.in_flight_lock();
            for key in &self.keys {
                in_flight.remove(key);
            }
        }
        self.orchestrator.wake();
    }
}
