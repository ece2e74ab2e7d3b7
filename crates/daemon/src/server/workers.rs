//! The threads that make a turn's socket syscalls side by side (issue 27).
//!
//! The bus stays one point of order: the loop's thread routes every
//! message, in the same order as with one thread. What runs in parallel
//! is only what touches one connection and nothing else, at two points of
//! a turn:
//! - before routing, the first `recvmsg` of each connection served in the
//!   turn that has no whole message buffered, and the parsing of what it
//!   read (`read_ahead`): the loop then routes from the buffers as before,
//!   each read's result waiting in its connection (`Conn::read_ahead`)
//!   for the point in the same turn where the loop would have read;
//! - before the flush, the first `sendmsg` of each connection with output
//!   (`write_ahead`), made from the connection's outbox lent out of the
//!   bus (`quickbus_bus::bus::lending`): the worker takes out what the
//!   socket took, the outboxes go back before anything else touches the
//!   bus, and each connection's flush settles its write's counts and
//!   reacts to its queue's going down, in the flush's order, as it did
//!   when the worker wrote from a queue it did not change.
//!
//! Reading a connection earlier in the turn moves no message ahead of
//! another in the bus's order, which is the order of routing; writing
//! ahead happens after routing, and the bus is held (the lending borrows
//! it) until every outbox is back.
//! docs/architecture.md ("Threads") has the measurements behind the shape.
//!
//! With one thread, or fewer than [`LEAST_PARALLEL`] connections to serve,
//! nothing is handed over: the loop does its syscalls itself, as it did
//! before threads, and an idle round trip pays no cross-thread wake-up.
//! The tests lower that threshold with [`LEAST_PARALLEL_FOR_TESTS`], so
//! that the few connections of an end-to-end test go through the pool.
//!
//! Owns: the thread pool. May touch: the connections' sockets, through
//! `Server`.

use std::ffi::OsStr;

use rustix::io::Errno;
use tracing::{info, warn};

use crate::transport::ReadStatus;

use super::{Conn, ConnId, Phase, Server};

/// Fewer connections than this in a phase are served on the loop's
/// thread. Handing a batch to the pool (the loop taking a share) took 14
/// to 21 µs with its threads awake and 14 to 44 µs after they slept, on
/// the 2-core VM (docs/performance.md, "Threads"), where one connection's
/// write and read take 4 to 5 µs (half a bare-socket round trip): below
/// about eight connections the loop's own thread is as quick.
const LEAST_PARALLEL: usize = 8;

/// For tests: the environment variable that replaces [`LEAST_PARALLEL`]
/// (a number from 1 up), read when a pool starts. Most end-to-end tests
/// have fewer than eight connections, so with a pool and the real
/// threshold they would never read or write ahead; with `1`, every turn
/// does (the e2e harness's `QUICKBUS_E2E_THREADS` sets it).
pub const LEAST_PARALLEL_FOR_TESTS: &str = "QUICKBUS_TEST_LEAST_PARALLEL";

/// For tests: the environment variable that replaces the configuration's
/// `threads` limit (a number from 1 up), read whenever a pool starts (at
/// start-up and at a reload that changes the limit). The suites that start
/// the daemon with configuration files of their own (dbus-daemon's, GLib's)
/// cannot write a `threads` limit; with this set, they run on a pool all
/// the same (scripts/test.sh).
pub const THREADS_FOR_TESTS: &str = "QUICKBUS_TEST_THREADS";

/// The most threads a configuration gets (a typo's 100000 would start
/// that many).
const MAX_THREADS: usize = 64;

/// What a read made ahead gave, and in which turn.
pub(super) struct ReadAhead {
    turn: u64,
    read: Result<ReadStatus, Errno>,
}

impl ReadAhead {
    /// The read's result if it was made in `turn`. A read of an earlier
    /// turn that the loop did not reach (its connection spent its budget
    /// on what was buffered, or was held back) says nothing of now: data
    /// that came since raised an edge the loop has taken, and would wait
    /// in the kernel for another if a stale "the socket is empty" were
    /// believed. Its bytes and fds are in the input already. An error
    /// stays true, and may not come again: fds the kernel could not
    /// install (EMFILE, `sys::recv_appending`, which takes that read's
    /// bytes back out of the input) are reported by that read
    /// alone, and a read made again would find the next message, its
    /// lost fds forgotten.
    pub(super) fn of_turn(self, turn: u64) -> Option<Result<ReadStatus, Errno>> {
        (self.turn == turn || self.read.is_err()).then_some(self.read)
    }
}

/// What one write made ahead gave: what the socket took, None when full.
pub(super) type WriteResult = Result<Option<usize>, Errno>;

/// The pool, or none when the loop does everything itself.
pub(super) struct Workers {
    pool: Option<rayon::ThreadPool>,
    /// The pool's threads, waited for when it stops.
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The `threads` limit the pool was started for.
    configured: usize,
    /// Fewer connections than this are served on the loop's thread
    /// ([`LEAST_PARALLEL`], or the tests' [`LEAST_PARALLEL_FOR_TESTS`]).
    least_parallel: usize,
}

impl Workers {
    /// `configured` threads (the `threads` limit, unless the tests'
    /// [`THREADS_FOR_TESTS`] replaces it; 0: [`threads_for_cores`]).
    /// A pool that cannot start leaves the loop doing its syscalls itself.
    pub(super) fn new(configured: usize) -> Workers {
        let configured = effective_limit(configured);
        let threads = match configured {
            0 => threads_for_cores(available_cores()),
            n if n > MAX_THREADS => {
                warn!("threads={n} is more than {MAX_THREADS}: starting {MAX_THREADS}");
                MAX_THREADS
            }
            n => n,
        };
        let mut workers = Workers {
            pool: None,
            threads: Vec::new(),
            configured,
            least_parallel: LEAST_PARALLEL,
        };
        if threads <= 1 {
            return workers;
        }
        let started = &mut workers.threads;
        let built = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            // Started here, to keep each thread's handle (`stop`).
            // Signals stay the loop's (its signal pipe): a worker's
            // syscalls are never interrupted by one.
            .spawn_handler(|thread| {
                let name = format!("quickbus-io-{}", thread.index());
                let builder = std::thread::Builder::new().name(name);
                started.push(crate::quiet_thread::spawn(builder, || thread.run())?);
                Ok(())
            })
            .build();
        match built {
            Ok(pool) => {
                info!("{threads} threads read and write the connections");
                workers.pool = Some(pool);
                workers.least_parallel =
                    least_parallel(std::env::var_os(LEAST_PARALLEL_FOR_TESTS).as_deref());
            }
            Err(e) => {
                warn!("cannot start {threads} threads ({e}): one thread does all the work");
                workers.stop();
            }
        }
        workers
    }

    /// End the pool and wait until its threads are gone: the loop's is
    /// the process's only thread again (a restart forks a child, which
    /// needs that: `sys::fork_single_threaded`). The loop does its
    /// syscalls itself until [`Workers::start_again`].
    pub(super) fn stop(&mut self) {
        // Dropping the pool tells its threads to end once idle (they are,
        // between turns).
        self.pool = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }

    /// The pool [`Workers::stop`] ended, started again.
    pub(super) fn start_again(&mut self) {
        *self = Workers::new(self.configured);
    }

    /// Whether `count` connections are worth handing to the pool.
    #[inline]
    fn parallel(&self, count: usize) -> bool {
        self.pool.is_some() && count >= self.least_parallel
    }

    /// `work` on each item, on the pool's threads when worth it. The
    /// calling thread (the loop's) takes an equal share itself rather than
    /// sleeping until the pool is done: a hand-over after the pool slept
    /// took from 40 % to 90 % of the time so (examples/pool_handover.rs).
    fn each<T: Send>(&self, items: &mut [T], work: impl Fn(&mut T) + Sync + Send) {
        let Some(pool) = self.pool.as_ref().filter(|_| self.parallel(items.len())) else {
            items.iter_mut().for_each(work);
            return;
        };
        let share = items.len().div_ceil(pool.current_num_threads() + 1);
        let mut shares = items.chunks_mut(share);
        let own = shares.next();
        let work = &work;
        pool.in_place_scope(|scope| {
            for share in shares {
                scope.spawn(move |_| share.iter_mut().for_each(work));
            }
            own.into_iter().flatten().for_each(work);
        });
    }
}

/// The threshold of a pool: [`LEAST_PARALLEL`] unless the tests' hook
/// (`hook`, the value of [`LEAST_PARALLEL_FOR_TESTS`]) says otherwise.
fn least_parallel(hook: Option<&OsStr>) -> usize {
    test_hook_number(LEAST_PARALLEL_FOR_TESTS, hook).unwrap_or(LEAST_PARALLEL)
}

/// The `threads` limit a pool starts for, the tests' hook read from the
/// environment ([`threads_limit`]).
fn effective_limit(configured: usize) -> usize {
    threads_limit(configured, std::env::var_os(THREADS_FOR_TESTS).as_deref())
}

/// The `threads` limit a pool starts for: `configured` unless the tests'
/// hook (`hook`, the value of [`THREADS_FOR_TESTS`]) says otherwise.
fn threads_limit(configured: usize, hook: Option<&OsStr>) -> usize {
    test_hook_number(THREADS_FOR_TESTS, hook).unwrap_or(configured)
}

/// The number a test hook `name` is set to (`hook`), when it is one from
/// 1 up; anything else is named in the log and ignored.
fn test_hook_number(name: &str, hook: Option<&OsStr>) -> Option<usize> {
    let value = hook?;
    match value.to_str().and_then(|v| v.parse::<usize>().ok()) {
        Some(n) if n >= 1 => Some(n),
        _ => {
            warn!(
                "{name}={} is not a number from 1 up: ignored",
                value.to_string_lossy()
            );
            None
        }
    }
}

/// The cores this process may run on (its affinity and CPU quota).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads for `cores` cores when the configuration leaves it to the
/// daemon: one (no pool) on small machines, where the clients need the
/// cores more than the bus (docs/performance.md, "Threads").
fn threads_for_cores(cores: usize) -> usize {
    if cores < MANY_CORES {
        1
    } else {
        (cores / 4).clamp(2, 8)
    }
}

/// From this many cores on, the daemon starts a pool by itself.
const MANY_CORES: usize = 8;

impl Server {
    /// The `threads` limit changed (a reload): a pool of the new size.
    pub(super) fn rebuild_workers(&mut self, threads: usize) {
        // The tests' hook, if set, decides the size whatever the limit.
        if effective_limit(threads) == self.workers.configured {
            return;
        }
        // The old pool's threads are gone before the new one's start: a
        // restart right after the reload finds only the new ones to stop.
        self.workers.stop();
        self.workers = Workers::new(threads);
    }

    /// Make the first read of each connection about to be served, side by
    /// side, when enough of them need one (see the module's doc).
    pub(super) fn read_ahead(&mut self, ready: &[(ConnId, bool)]) {
        if !self.workers.parallel(ready.len()) {
            return;
        }
        let mut batch = std::mem::take(&mut self.spare.reading);
        for &(id, _) in ready {
            let reads = self
                .conns
                .get(&id)
                .is_some_and(|c| !c.held && !c.has_whole_message());
            if let Some(conn) = reads.then(|| self.conns.remove(&id)).flatten() {
                batch.push((id, conn));
            }
        }
        let max_message_size = self.opts.limits.max_message_size;
        let turn = self.idle_buffers.turn();
        self.workers
            .each(&mut batch, |(_, conn): &mut (ConnId, Conn)| {
                let read = conn.transport.read_once();
                if read.is_ok() && matches!(conn.phase, Phase::Running) {
                    conn.transport.parse_ahead(max_message_size);
                }
                conn.read_ahead = Some(ReadAhead { turn, read });
            });
        self.conns.extend(batch.drain(..));
        self.spare.reading = batch;
    }

    /// Make the first write of each connection in `dirty` whose queue
    /// holds messages, side by side, when enough of them do, each from
    /// its outbox lent out of the bus: what the socket took leaves it on
    /// the worker, and the counts are settled by the connection's flush,
    /// given the write's result as `written_ahead` (`server::write_out`). Each
    /// write's result, in `dirty`'s order.
    pub(super) fn write_ahead(&mut self, dirty: &[ConnId]) -> Vec<(ConnId, WriteResult)> {
        if !self.workers.parallel(dirty.len()) {
            return Vec::new();
        }
        let mut lending = self.bus.lend_outboxes();
        for &id in dirty {
            let Some(conn) = self.conns.get(&id) else {
                continue;
            };
            // SASL replies go first, and only the flush writes them.
            if matches!(conn.phase, Phase::Running) && !conn.transport.has_output() {
                lending.lend(id);
            }
        }
        // Each outbox with its own connection's socket, found by the id
        // it carries.
        let conns = &self.conns;
        let mut batch: Vec<_> = lending
            .outboxes()
            .iter_mut()
            .map(|outbox| (&conns[&outbox.conn()].transport, outbox, None))
            .collect();
        self.workers
            .each(&mut batch, |(transport, outbox, result)| {
                *result = Some(outbox.write_ahead(|o| transport.write_once(o)));
            });
        let ahead = batch
            .into_iter()
            .filter_map(|(_, outbox, result)| Some((outbox.conn(), result?)))
            .collect();
        // Every outbox back in the bus, its write to be settled.
        lending.give_back();
        ahead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_machines_keep_one_thread_and_large_ones_get_a_pool() {
        assert_eq!(threads_for_cores(1), 1);
        assert_eq!(threads_for_cores(2), 1);
        assert_eq!(threads_for_cores(MANY_CORES - 1), 1);
        assert_eq!(threads_for_cores(MANY_CORES), 2);
        assert_eq!(threads_for_cores(16), 4);
        assert_eq!(threads_for_cores(256), 8);
    }

    #[test]
    fn one_thread_means_no_pool() {
        assert!(Workers::new(1).pool.is_none());
        let pool = Workers::new(3);
        assert!(pool.parallel(LEAST_PARALLEL));
        assert!(!pool.parallel(LEAST_PARALLEL - 1));
    }

    #[test]
    fn the_tests_hook_replaces_the_threshold_and_a_bad_value_is_ignored() {
        assert_eq!(least_parallel(None), LEAST_PARALLEL);
        assert_eq!(least_parallel(Some(OsStr::new("1"))), 1);
        assert_eq!(least_parallel(Some(OsStr::new("20"))), 20);
        for bad in ["0", "-1", "", "two"] {
            assert_eq!(least_parallel(Some(OsStr::new(bad))), LEAST_PARALLEL);
        }
        let mut pool = Workers::new(2);
        pool.least_parallel = 1;
        assert!(pool.parallel(1));
        let mut one = vec![0u32];
        pool.each(&mut one, |n| *n += 1);
        assert_eq!(one, [1]);
    }

    #[test]
    fn the_tests_threads_hook_replaces_the_limit_and_a_bad_value_is_ignored() {
        assert_eq!(threads_limit(0, None), 0);
        assert_eq!(threads_limit(3, None), 3);
        assert_eq!(threads_limit(0, Some(OsStr::new("4"))), 4);
        assert_eq!(threads_limit(16, Some(OsStr::new("1"))), 1);
        for bad in ["0", "-1", "", "four", "4 "] {
            assert_eq!(threads_limit(2, Some(OsStr::new(bad))), 2, "{bad:?}");
        }
    }

    #[test]
    fn with_a_pool_the_items_are_worked_on_by_its_threads() {
        let workers = Workers::new(2);
        let mut items = vec![String::new(); 64];
        workers.each(&mut items, |name| {
            *name = std::thread::current().name().unwrap_or("").to_owned();
        });
        // The calling thread takes the first of three equal shares, the
        // pool's two threads the others.
        let (own, pool) = items.split_at(64usize.div_ceil(3));
        assert!(
            own.iter().all(|name| !name.starts_with("quickbus-io-")),
            "{items:?}"
        );
        assert!(
            pool.iter().all(|name| name.starts_with("quickbus-io-")),
            "{items:?}"
        );
        // Too few to hand over: the calling thread does it.
        let mut one = vec![String::new()];
        workers.each(&mut one, |name| {
            *name = std::thread::current().name().unwrap_or("").to_owned();
        });
        assert!(!one[0].starts_with("quickbus-io-"));
    }

    #[test]
    fn the_pools_threads_take_no_signal() {
        use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
        let workers = Workers::new(2);
        let mut items = vec![(String::new(), false); 64];
        workers.each(&mut items, |(name, blocked)| {
            *name = std::thread::current().name().unwrap_or("").to_owned();
            let mut mask = SigSet::empty();
            pthread_sigmask(SigmaskHow::SIG_SETMASK, None, Some(&mut mask)).unwrap();
            *blocked = [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGUSR2]
                .iter()
                .all(|&s| mask.contains(s));
        });
        let pool: Vec<_> = items
            .iter()
            .filter(|(name, _)| name.starts_with("quickbus-io-"))
            .collect();
        assert!(
            !pool.is_empty() && pool.iter().all(|(_, blocked)| *blocked),
            "{items:?}"
        );
    }

    #[test]
    fn a_read_made_ahead_in_an_earlier_turn_counts_only_if_it_failed() {
        let made = |read| ReadAhead { turn: 3, read };
        assert!(made(Ok(ReadStatus::Drained)).of_turn(3).is_some());
        assert!(made(Ok(ReadStatus::Drained)).of_turn(4).is_none());
        assert_eq!(
            made(Err(Errno::MFILE)).of_turn(4).map(|r| r.err()),
            Some(Some(Errno::MFILE))
        );
    }

    #[test]
    fn each_does_every_item_once_with_or_without_a_pool() {
        for threads in [1, 4] {
            let workers = Workers::new(threads);
            let mut items: Vec<u32> = (0..100).collect();
            workers.each(&mut items, |n| *n *= 2);
            assert_eq!(items, (0..100).map(|n| n * 2).collect::<Vec<_>>());
        }
    }
}
