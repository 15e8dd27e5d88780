//! Lanes: the workers of a pass split over threads, each thread with a single-threaded runtime
//! and (on PostgreSQL) a connection pool of its own.
//!
//! Why: a worker spends its time in round trips, and one async thread serves them with the
//! fewest wake-ups, but it is also a single point every reply queues behind: whenever the
//! kernel runs a database backend on that thread's core, every worker waits. Single-threaded
//! lanes, one per core, keep the machine busy; tokio's work-stealing pool does not (its
//! cross-thread wake-ups cost more than they hide). The figures: docs/benchmarks.md, "Figures
//! that were code comments".
//!
//! Each lane owns its pool because a socket belongs to the runtime that opened it; the lanes
//! share the queue of projects, the memory budget and the stop signal, and report outcomes
//! over a channel to the pass on the main thread. The pools together hold `--concurrency`
//! connections plus one, on the first lane's pool, for the page readers (one per keyset
//! range), which also use the connections that the first lane's idle workers give back (see
//! [`pool_size`] and `Crew::work`).

use super::crew::{Crew, Outcomes, Queue};
use crate::store::Dialect;

/// How `workers` workers are spread over lanes, first lane first: one lane per core this
/// process may use (which honours a container's CPU limit), never more than the workers, and
/// one on SQLite, where every worker shares the one connection anyway.
pub(super) fn plan(dialect: Dialect, workers: usize) -> Vec<usize> {
    let lanes = match dialect {
        Dialect::Sqlite => 1,
        Dialect::Postgres => {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            cores.min(workers).max(1)
        }
    };
    shares(workers.max(1), lanes)
}

/// The size of the pool a run's store needs for `workers` workers: the first lane's workers
/// and the page reader. The other lanes open pools of their own, one connection per worker,
/// so that a run holds at most `workers + 1` connections in all. (A larger pool here would let
/// sqlx open a spare connection when a returned one is still on its way back to the pool.)
pub fn pool_size(dialect: Dialect, workers: usize) -> u32 {
    let first = plan(dialect, workers).first().copied().unwrap_or(1);
    u32::try_from(first).unwrap_or(u32::MAX).saturating_add(1)
}

/// `workers` split as evenly as possible over `lanes`, larger shares first.
fn shares(workers: usize, lanes: usize) -> Vec<usize> {
    let lanes = lanes.max(1);
    (0..lanes)
        .map(|i| workers / lanes + usize::from(i < workers % lanes))
        .collect()
}

/// Runs the workers of `shares` (see [`plan`]) until the queue closes and every worker is
/// done. The first lane runs here, on the caller's runtime and store; a lane whose thread
/// cannot be started is folded into it, so the pass still gets every worker (they then queue
/// for the first lane's connections).
pub(super) async fn run(crew: &Crew, shares: &[usize], queue: &Queue, outcomes: &Outcomes) {
    let mut here = shares.first().copied().unwrap_or(1);
    let mut elsewhere = Vec::new();
    for (i, &n) in shares.iter().enumerate().skip(1) {
        match spawn(i, crew.clone(), n, queue.clone(), outcomes.clone()) {
            Ok(done) => elsewhere.push(done),
            Err(e) => {
                tracing::warn!(lane = i, error = %e, "cannot start a worker thread; its workers run on the main thread");
                here += n;
            }
        }
    }
    let local = futures::future::join_all((0..here).map(|_| crew.work(queue, outcomes)));
    // A lane's sender is dropped when its thread ends, however it ends.
    let remote = futures::future::join_all(elsewhere.into_iter().map(|done| async {
        let _ = done.await;
    }));
    futures::future::join(local, remote).await;
}

/// Starts lane `index` with `workers` workers on a thread of its own; the receiver resolves (or
/// closes) when the lane is done.
fn spawn(
    index: usize,
    crew: Crew,
    workers: usize,
    queue: Queue,
    outcomes: Outcomes,
) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("lane-{index}"))
        .spawn(move || {
            runtime.block_on(async {
                // The pool is made here, on the lane's runtime, which then owns its sockets.
                let own = crew.store.lane(workers as u32);
                let crew = match &own {
                    Some(store) => crew.with_store(store.clone()),
                    None => crew,
                };
                futures::future::join_all((0..workers).map(|_| crew.work(&queue, &outcomes))).await;
                // An abandoned run leaves its connections to the exit: a close waits for
                // answers from a database that may be what stopped answering.
                if let Some(store) = own
                    && !crew.stop.is_abandoned()
                {
                    store.close().await;
                }
            });
            drop(runtime);
            let _ = done.send(());
        })?;
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::shares;

    #[test]
    fn workers_are_split_evenly_larger_shares_first() {
        assert_eq!(shares(4, 2), vec![2, 2]);
        assert_eq!(shares(5, 2), vec![3, 2]);
        assert_eq!(shares(1, 1), vec![1]);
        assert_eq!(shares(7, 3), vec![3, 2, 2]);
        assert_eq!(shares(3, 0), vec![3]);
    }
}
