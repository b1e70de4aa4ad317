//! A control runtime: one OS thread of its own running a current-thread tokio runtime, for the
//! work whose timing others judge a process by: answering pings, heartbeating, probing. On a
//! busy machine the data-path runtime may not reach a ping's task for hundreds of
//! milliseconds (its threads busy with appends and copies), and a broker that answers pings
//! late is taken for dead. A thread that is idle nearly all the time is woken at once by the
//! kernel's scheduler, however busy the process's other threads are.
//!
//! I/O resources belong to the runtime they are registered in: a listener served here must be
//! made here (`TcpListener::from_std` inside a task on this runtime), and connections it
//! accepts or opens stay on this thread. Heavy work reached from here goes back to the data
//! runtime through its `Handle`.

use std::io;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// The control runtime of a process; its thread ends when this is dropped.
#[derive(Debug)]
pub struct ControlRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl ControlRuntime {
    /// Starts the thread `name` and its runtime.
    pub fn start(name: &str) -> io::Result<ControlRuntime> {
        let runtime = Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                // Drives every task spawned on the handle until the owner is dropped.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                runtime.shutdown_background();
            })?;
        Ok(ControlRuntime {
            handle,
            stop: Some(stop),
        })
    }

    /// Where to spawn control tasks.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for ControlRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A listener bound elsewhere (on the data runtime, so binding errors are reported where the
/// process starts), moved to the runtime of the calling task.
pub fn adopt_listener(listener: tokio::net::TcpListener) -> io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::from_std(listener.into_std()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A data runtime whose only thread is busy does not delay the control runtime's tasks.
    #[test]
    fn control_tasks_run_while_the_data_runtime_is_blocked() {
        let data = Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let control = ControlRuntime::start("test-control").unwrap();
        data.block_on(async {
            // Occupies the data runtime's thread (this task never yields for 300 ms).
            let answered = control.handle().spawn(async {
                let started = Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
                started.elapsed()
            });
            std::thread::sleep(Duration::from_millis(300));
            let took = answered.await.unwrap();
            assert!(took < Duration::from_millis(200), "took {took:?}");
        });
    }
}
