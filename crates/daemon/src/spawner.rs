//! The spawner: the thread that starts the programs of activated
//! services, so that the bus's loop never waits for a fork and an exec.
//!
//! Why: `Command::spawn` returns only once the child has executed its
//! program (or failed to): once the exec released the child's end of a
//! close-on-exec pipe. The child holds a copy of every descriptor the bus
//! holds, the fds clients passed among them, and the exec closes them
//! too, releasing them on its way back to user space, highest number
//! first. Such a release may block as long as the client that passed the
//! fd likes: a TCP socket with `SO_LINGER` and a send queue nobody reads,
//! once the bus's own copy is closed (the child's is then the last), or
//! a file on FUSE, which flushes on every close. Numbered above the pipe,
//! it holds the spawn until it ends (docs/reliability.md, "Services being
//! started"). dbus-daemon does not wait for the exec on its loop either.
//!
//! The loop hands each program over ([`Spawner::hand_over`]), errors found
//! before spawning (no such service, a bad `Exec=` line) having been
//! answered already. One thread spawns them in the order they came; each
//! outcome (the child's pid, or why it could not be spawned) waits for
//! the loop ([`Spawner::take_done`]), which the thread wakes by raising
//! SIGCHLD, the signal the loop already reaps children on. A child whose
//! spawn is stuck is killed by the activation's timeout
//! ([`Spawner::stop`]; SIGKILL ends a lingering close): the child
//! reports its pid through a pipe before executing, since the spawn that
//! would return it is the one stuck; and a child stopped before it could
//! report it finds word of that in a second pipe, and exits before its
//! exec.
//!
//! A thread does not survive fork or exec: [`end`] lets the thread spawn
//! what waits and ends it first (`sys::become_single_threaded`, which
//! every fork of the daemon's goes through, and the restart before it
//! writes its handover), or says that a spawn is stuck and the fork is
//! refused; so a forked child finds no thread of its parent's in the
//! state, and the next program handed over starts one, as in the fd
//! closer (`fd_closer`). (The children it spawns run none of the
//! daemon's code: they execute their program.)
//!
//! The hand-off to the thread is model-checked (`loom_tests`, built with
//! `--cfg quickbus_loom`: scripts/test.sh), as the log's and the fd
//! closer's are: that build takes loom's lock, condition variable and
//! thread in place of std's, and a [`Clock`] whose time passes where loom
//! chooses; the spawn, the kill and the loop's wake-up are the model's.
//! Only the tests' build takes loom's (a dev-dependency): any other
//! build, with that cfg or not, is the daemon's.
//!
//! Owns: the spawning thread, the programs waiting for it, and their
//! outcomes until the loop takes them.

#[cfg(all(test, quickbus_loom))]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(all(test, quickbus_loom))]
use loom::thread::{Builder, JoinHandle};
#[cfg(not(all(test, quickbus_loom)))]
use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(all(test, quickbus_loom)))]
use std::thread::{Builder, JoinHandle};

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tracing::warn;

use crate::handoff_clock::{Clock, SystemClock};

/// How long [`end`] waits for the spawns before a fork, an exec or the
/// change of user (a spawn takes a millisecond unless one is stuck).
pub const END_WAIT: Duration = Duration::from_millis(500);

/// The spawning thread's name (and so the name its children have until
/// they execute their program).
const NAME: &str = "quickbus-spawn";

/// For tests of a spawn that is stuck, `NAME:FIFO`: the child started
/// for the service `NAME` waits before executing its program until the
/// test writes to the FIFO `FIFO`, [`STALL_FOR_TESTS_MS`] at most (a
/// lingering close of a descriptor it inherited would hold it in its
/// exec, which a test cannot time); the activation's timeout kills it.
pub const STALL_SPAWN_FOR_TESTS: &str = "QUICKBUS_TEST_STALL_SPAWN";
/// How long such a child waits at most (it outlives no test by long).
const STALL_FOR_TESTS_MS: i32 = 60_000;

/// The FIFO the child started for `name` waits on, if it is to stall
/// ([`STALL_SPAWN_FOR_TESTS`]; read once).
fn stall_for_tests(name: &str) -> Option<&'static std::path::Path> {
    static STALLED: OnceLock<Option<(String, std::path::PathBuf)>> = OnceLock::new();
    let (stalled, fifo) = STALLED
        .get_or_init(|| {
            let hook = std::env::var(STALL_SPAWN_FOR_TESTS).ok()?;
            let (name, fifo) = hook.split_once(':')?;
            Some((name.to_owned(), fifo.into()))
        })
        .as_ref()?;
    (stalled == name).then_some(fifo.as_path())
}

/// The process's spawner (made by the first use).
static PROCESS: OnceLock<Spawner> = OnceLock::new();

/// What spawns a program: its pid, or why it could not be spawned.
type SpawnFn = dyn Fn(&mut Command) -> io::Result<u32> + Send + Sync;

/// Let the spawns that wait happen and end this process's spawning
/// thread, waiting at most `wait`; [`StillSpawning`] if a spawn is stuck
/// (the thread goes on).
pub fn end(wait: Duration) -> Result<(), StillSpawning> {
    PROCESS.get().map_or(Ok(()), |spawner| spawner.end(wait))
}

/// A program to start for the service `name`.
pub struct Job {
    pub name: String,
    pub command: Command,
    /// Started through `<servicehelper>`.
    pub via_helper: bool,
}

/// How a [`Job`] went, for the loop.
#[derive(Debug)]
pub struct Spawned {
    pub name: String,
    pub via_helper: bool,
    /// The child's pid, or why it could not be spawned.
    pub outcome: io::Result<u32>,
    /// Its activation was stopped ([`Spawner::stop`]) while it was being
    /// spawned: the child was killed, and its exit is no activation's.
    pub stopped: bool,
}

/// The spawns did not end in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StillSpawning {
    /// The service whose spawn is in progress.
    pub name: String,
    /// Programs waiting behind it.
    pub waiting: usize,
}

impl std::fmt::Display for StillSpawning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.is_empty() {
            // None in progress when the wait ran out: only many waited.
            return write!(
                f,
                "{} programs of services still wait to be spawned",
                self.waiting
            );
        }
        write!(
            f,
            "the spawn of service {} is still in progress ({} more waiting; its child has not \
             executed its program: a descriptor it inherited closes slowly)",
            self.name, self.waiting
        )
    }
}

/// Programs waiting, the thread that spawns them, and the outcomes.
#[derive(Clone)]
pub struct Spawner {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a program waits, when the thread is to end, and
    /// when it ended.
    changed: Condvar,
    spawn: Box<SpawnFn>,
    /// Tells the loop that an outcome waits.
    wake: Box<dyn Fn() + Send + Sync>,
    /// Kills a child whose activation was stopped (SIGKILL).
    kill: Box<dyn Fn(u32) + Send + Sync>,
    clock: Box<dyn Clock<State>>,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Job>,
    in_progress: Option<InProgress>,
    done: VecDeque<Spawned>,
    thread: Option<JoinHandle<()>>,
    /// Until the thread left its loop (then joining it cannot wait).
    running: bool,
    /// The calls of [`Spawner::end`] waiting: while there are any, the
    /// thread ends once nothing waits. A count, not a flag that a
    /// hand-over clears, which would keep the thread idle for an `end`
    /// that waits for it (loom found that in the log's hand-off); the
    /// first `end` to give up must not keep it for another either. The
    /// daemon hands over and ends on the loop's thread alone, but nothing
    /// here relies on that.
    ends_waiting: u32,
}

/// The spawn under way.
struct InProgress {
    name: String,
    /// Where the child writes its pid before it executes.
    pid_from: Option<std::fs::File>,
    /// Where [`Spawner::stop`] tells the child not to execute: it looks
    /// once it has written its pid (`sys::report_pid_before_exec`).
    stop_to: Option<OwnedFd>,
    stopped: bool,
}

impl InProgress {
    /// The child's pid, if it reported it yet.
    fn child_pid(&mut self) -> Option<u32> {
        let mut bytes = [0u8; 4];
        let read = self.pid_from.as_mut()?.read_exact(&mut bytes);
        read.ok().map(|()| u32::from_ne_bytes(bytes))
    }
}

impl Spawner {
    /// The process's spawner: it runs `Command::spawn`, and wakes the
    /// loop with SIGCHLD.
    pub fn process() -> Spawner {
        PROCESS
            .get_or_init(|| Spawner::new(spawn_program, raise_sigchld))
            .clone()
    }

    /// A spawner of its own, which spawns with `spawn` and tells of each
    /// outcome with `wake`.
    pub fn new(
        spawn: impl Fn(&mut Command) -> io::Result<u32> + Send + Sync + 'static,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> Spawner {
        Spawner::with(spawn, wake, kill, SystemClock)
    }

    /// [`Spawner::new`] killing with `kill` and waiting by `clock` (the
    /// tests' and the model check's).
    fn with(
        spawn: impl Fn(&mut Command) -> io::Result<u32> + Send + Sync + 'static,
        wake: impl Fn() + Send + Sync + 'static,
        kill: impl Fn(u32) + Send + Sync + 'static,
        clock: impl Clock<State> + 'static,
    ) -> Spawner {
        Spawner {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                spawn: Box::new(spawn),
                wake: Box::new(wake),
                kill: Box::new(kill),
                clock: Box::new(clock),
            }),
        }
    }

    /// A spawner of its own that spawns as the process's does, but wakes
    /// nobody (tests poll [`take_done`](Spawner::take_done)).
    #[cfg(test)]
    pub fn for_tests() -> Spawner {
        Spawner::new(spawn_program, || {})
    }

    /// Queue `job` for the spawning thread, starting it if this process
    /// has none. Never waits for a spawn (unless no thread can be
    /// started at all: then it spawns here).
    pub fn hand_over(&self, job: Job) {
        let mut state = self.shared.lock();
        state.waiting.push_back(job);
        if state.running {
            self.shared.changed.notify_all();
            return;
        }
        // The last thread of this process ended: joined, it cannot wait.
        if let Some(ended) = state.thread.take() {
            let _ = ended.join();
        }
        let shared = self.shared.clone();
        match spawn_thread(move || run(&shared)) {
            Ok(thread) => {
                state.thread = Some(thread);
                state.running = true;
            }
            Err(e) => {
                warn!(
                    "cannot start the thread that starts services ({e}): starting them on the loop"
                );
                drop(state);
                while spawn_next(&self.shared, self.shared.lock()).is_some() {}
            }
        }
    }

    /// The outcomes of the spawns that ended, in the order the programs
    /// were handed over.
    pub fn take_done(&self) -> Vec<Spawned> {
        self.shared.lock().done.drain(..).collect()
    }

    /// Whether a program waits or is being spawned, or an outcome waits.
    #[cfg(test)]
    pub fn busy(&self) -> bool {
        let state = self.shared.lock();
        !state.waiting.is_empty() || state.in_progress.is_some() || !state.done.is_empty()
    }

    /// The activation of `name` timed out: a program waiting for it is
    /// not spawned, one being spawned is killed if its child reported its
    /// pid, or else does not execute (the child exits once it has written
    /// its pid, and is killed when the spawn returns), and so is one
    /// spawned whose outcome the loop has not taken yet.
    pub fn stop(&self, name: &str) {
        let mut state = self.shared.lock();
        state.waiting.retain(|job| job.name != name);
        for spawned in state.done.iter_mut().filter(|s| s.name == name) {
            if let (false, Ok(pid)) = (spawned.stopped, &spawned.outcome) {
                (self.shared.kill)(*pid);
            }
            spawned.stopped = true;
        }
        let Some(progress) = state.in_progress.as_mut().filter(|p| p.name == name) else {
            return;
        };
        progress.stopped = true;
        // Told first, then its pid read: a child that looks for the word
        // after this write does not execute; one that looked before it
        // had written its pid already, which the read below then finds.
        if let Some(stop_to) = &progress.stop_to {
            let _ = rustix::io::write(stop_to, &[1]);
        }
        // The child is ours and not waited for, but for one case: when
        // its exec failed, the spawn reaps it before it returns, and a
        // stop in between kills a pid already freed (the kernel would
        // have to give it to another process within those microseconds).
        // A child still stuck is never reaped: its pid is its own.
        match progress.child_pid() {
            Some(pid) => {
                warn!(
                    "killing service {name} (pid {pid}): it did not get to execute its program \
                     in time"
                );
                (self.shared.kill)(pid);
            }
            None => warn!(
                "service {name} did not get to execute its program in time: it will not \
                 (its child, not forked yet or not at its exec, exits first)"
            ),
        }
    }

    /// [`end`] for this spawner.
    /// A program handed over meanwhile is spawned before the thread
    /// ends, by it or a new one.
    pub fn end(&self, wait: Duration) -> Result<(), StillSpawning> {
        let shared = &self.shared;
        let mut state = shared.lock();
        let deadline = shared.clock.now() + wait;
        state.ends_waiting += 1;
        shared.changed.notify_all();
        while state.running {
            if shared.clock.now() >= deadline {
                state.ends_waiting -= 1;
                let name = state.in_progress.as_ref().map(|p| p.name.clone());
                return Err(StillSpawning {
                    name: name.unwrap_or_default(),
                    waiting: state.waiting.len(),
                });
            }
            state = shared
                .clock
                .wait_until(&shared.changed, &shared.state, state, deadline);
        }
        state.ends_waiting -= 1;
        // Joined, so that a fork finds the process's one thread.
        let ended = state.thread.take();
        drop(state);
        if let Some(thread) = ended {
            let _ = thread.join();
        }
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a usable queue.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The spawning thread: spawns what waits, in order, until told to end
/// with nothing waiting.
fn run(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if !state.waiting.is_empty() {
            if spawn_next(shared, state).is_none() {
                return;
            }
            state = shared.lock();
        } else if state.ends_waiting > 0 {
            state.running = false;
            shared.changed.notify_all();
            return;
        } else {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Spawn the first program waiting (outside the lock), queue its outcome
/// and wake the loop; None if none waited.
fn spawn_next(shared: &Shared, mut state: MutexGuard<'_, State>) -> Option<()> {
    let mut job = state.waiting.pop_front()?;
    let pipes = pid_pipe().and_then(|pid| Ok((pid, rustix::pipe::pipe_with(PIPE_FLAGS)?)));
    let (pid_from, stop_to, hook) = match pipes {
        Ok(((pid_from, pid_to), (stop_from, stop_to))) => {
            (Some(pid_from), Some(stop_to), Some((pid_to, stop_from)))
        }
        Err(e) => {
            warn!("no pipes for the pid of service {}: {e}", job.name);
            (None, None, None)
        }
    };
    state.in_progress = Some(InProgress {
        name: job.name.clone(),
        pid_from,
        stop_to,
        stopped: false,
    });
    drop(state);
    if let Some((pid_to, stop_from)) = hook {
        crate::sys::report_pid_before_exec(&mut job.command, pid_to, stop_from);
    }
    if let Some(fifo) = stall_for_tests(&job.name) {
        if let Err(e) = crate::sys::wait_before_exec(&mut job.command, fifo, STALL_FOR_TESTS_MS) {
            warn!("{STALL_SPAWN_FOR_TESTS}: {e}");
        }
    }
    let command = &mut job.command;
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (shared.spawn)(command)))
            .unwrap_or_else(|_| Err(io::Error::other("the spawn panicked")));
    // Closes the pipe's write end (held by the command's hook).
    drop(job.command);
    let mut state = shared.lock();
    let stopped = state.in_progress.take().is_some_and(|p| p.stopped);
    if let (true, Ok(pid)) = (stopped, &outcome) {
        (shared.kill)(*pid);
    }
    state.done.push_back(Spawned {
        name: job.name,
        via_helper: job.via_helper,
        outcome,
        stopped,
    });
    drop(state);
    (shared.wake)();
    Some(())
}

/// The pipes between the spawner and a child before its exec: neither
/// end blocks (a byte or four into an empty pipe, a read of what may not
/// be there yet), and the program the child executes inherits neither.
const PIPE_FLAGS: rustix::pipe::PipeFlags =
    rustix::pipe::PipeFlags::CLOEXEC.union(rustix::pipe::PipeFlags::NONBLOCK);

/// A pipe whose read end does not block: (read, write), both
/// close-on-exec.
fn pid_pipe() -> io::Result<(std::fs::File, OwnedFd)> {
    let (from, to) = rustix::pipe::pipe_with(PIPE_FLAGS)?;
    Ok((std::fs::File::from(from), to))
}

/// The process's way to spawn: std's, which returns once the child
/// executed its program. Dropping the handle neither kills nor reaps:
/// `Launcher::reap` waits for the pid (no pipes were opened to it).
fn spawn_program(command: &mut Command) -> io::Result<u32> {
    command.spawn().map(|child| child.id())
}

/// Wake the loop: it reaps children and takes the outcomes on SIGCHLD.
fn raise_sigchld() {
    let _ =
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::Child);
}

/// Start the spawning thread running `run`: std's, with every signal
/// blocked, so that the loop handles them all (and a restart's held
/// signals stay pending); loom's in the model.
#[cfg(not(all(test, quickbus_loom)))]
fn spawn_thread(run: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    crate::quiet_thread::spawn(Builder::new().name(NAME.into()), run)
}

#[cfg(all(test, quickbus_loom))]
fn spawn_thread(run: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    Builder::new().name(NAME.into()).spawn(run)
}

/// The daemon's kill of a child whose activation was stopped.
fn kill(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::Kill);
    }
}

#[cfg(all(test, quickbus_loom))]
mod loom_tests;

#[cfg(all(test, not(quickbus_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// A spawn that holds the spawns of the programs named in `held`
    /// until opened, and records what it spawned (its program's name)
    /// and the pids it was told to kill (made up: never a real kill).
    #[derive(Default)]
    struct Gate {
        state: Mutex<GateState>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct GateState {
        held: Vec<String>,
        open: bool,
        inside: usize,
        spawned: Vec<String>,
        killed: Vec<u32>,
    }

    impl Gate {
        fn spawn(&self, command: &mut Command) -> io::Result<u32> {
            let program = command.get_program().to_string_lossy().into_owned();
            let mut state = self.state.lock().unwrap();
            if state.held.contains(&program) {
                state.inside += 1;
                self.changed.notify_all();
                state = self.changed.wait_while(state, |s| !s.open).unwrap();
                state.inside -= 1;
            }
            state.spawned.push(program.clone());
            if program.starts_with("missing") {
                return Err(io::Error::from(io::ErrorKind::NotFound));
            }
            Ok(1000 + state.spawned.len() as u32)
        }

        /// Wait until `done` holds (a minute at most: a guard against a
        /// hang, not a measure).
        fn wait_for(&self, done: impl Fn(&GateState) -> bool) {
            let state = self.state.lock().unwrap();
            let (_state, waited) = self
                .changed
                .wait_timeout_while(state, Duration::from_secs(60), |s| !done(s))
                .unwrap();
            assert!(!waited.timed_out(), "the spawns never got there");
        }

        fn open(&self) {
            self.state.lock().unwrap().open = true;
            self.changed.notify_all();
        }
    }

    /// A spawner through `gate`, counting its wake-ups.
    fn gated(held: &[&str]) -> (Spawner, Arc<Gate>, Arc<AtomicUsize>) {
        let gate = Arc::new(Gate::default());
        gate.state.lock().unwrap().held = held.iter().map(|s| s.to_string()).collect();
        let wakes = Arc::new(AtomicUsize::new(0));
        let (spawning, woken, killing) = (gate.clone(), wakes.clone(), gate.clone());
        let spawner = Spawner::with(
            move |command| spawning.spawn(command),
            move || {
                woken.fetch_add(1, Ordering::SeqCst);
            },
            move |pid| killing.state.lock().unwrap().killed.push(pid),
            SystemClock,
        );
        (spawner, gate, wakes)
    }

    fn job(name: &str, program: &str) -> Job {
        Job {
            name: name.into(),
            command: Command::new(program),
            via_helper: false,
        }
    }

    /// Take outcomes until there are `count` (bounded).
    fn take(spawner: &Spawner, count: usize) -> Vec<Spawned> {
        let give_up = Instant::now() + Duration::from_secs(60);
        let mut done = Vec::new();
        while done.len() < count {
            assert!(Instant::now() < give_up, "the outcomes never came");
            done.extend(spawner.take_done());
            std::thread::sleep(Duration::from_millis(1));
        }
        done
    }

    #[test]
    fn a_stuck_spawn_holds_up_neither_the_caller_nor_the_order_of_outcomes() {
        let (spawner, gate, wakes) = gated(&["stuck"]);
        spawner.hand_over(job("org.x.First", "stuck"));
        // The caller (the loop) is back while the spawn is stuck.
        gate.wait_for(|s| s.inside == 1);
        spawner.hand_over(job("org.x.Second", "fine"));
        spawner.hand_over(job("org.x.Missing", "missing-program"));
        assert!(spawner.take_done().is_empty());
        assert!(spawner.busy());
        assert_eq!(wakes.load(Ordering::SeqCst), 0);
        gate.open();
        let done = take(&spawner, 3);
        let names: Vec<_> = done.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["org.x.First", "org.x.Second", "org.x.Missing"]);
        assert_eq!(done[0].outcome.as_ref().unwrap(), &1001);
        assert_eq!(done[1].outcome.as_ref().unwrap(), &1002);
        let error = done[2].outcome.as_ref().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(done.iter().all(|d| !d.stopped));
        assert_eq!(wakes.load(Ordering::SeqCst), 3);
        assert!(!spawner.busy());
        spawner.end(END_WAIT).unwrap();
    }

    #[test]
    fn ending_is_refused_while_a_spawn_is_stuck_and_goes_through_after() {
        let (spawner, gate, _wakes) = gated(&["stuck"]);
        spawner.hand_over(job("org.x.Stuck", "stuck"));
        spawner.hand_over(job("org.x.Behind", "fine"));
        gate.wait_for(|s| s.inside == 1);
        let still = spawner.end(Duration::from_millis(50)).unwrap_err();
        assert_eq!(
            still,
            StillSpawning {
                name: "org.x.Stuck".into(),
                waiting: 1
            }
        );
        assert!(still
            .to_string()
            .starts_with("the spawn of service org.x.Stuck is still in progress"));
        gate.open();
        spawner.end(Duration::from_secs(60)).unwrap();
        // What waited was spawned before the thread ended.
        assert_eq!(gate.state.lock().unwrap().spawned, ["stuck", "fine"]);
        assert_eq!(spawner.take_done().len(), 2);
        // The next program starts a thread again.
        spawner.hand_over(job("org.x.Again", "fine"));
        assert_eq!(take(&spawner, 1)[0].name, "org.x.Again");
        spawner.end(END_WAIT).unwrap();
    }

    #[test]
    fn a_refusal_names_the_stuck_spawn_or_else_says_how_many_wait() {
        let stuck = StillSpawning {
            name: "org.x.stuck".into(),
            waiting: 2,
        };
        assert!(stuck
            .to_string()
            .starts_with("the spawn of service org.x.stuck is still in progress (2 more"));
        let queued = StillSpawning {
            name: String::new(),
            waiting: 3,
        };
        assert_eq!(
            queued.to_string(),
            "3 programs of services still wait to be spawned"
        );
    }

    #[test]
    fn stopping_drops_a_waiting_program_and_marks_the_one_in_progress() {
        let (spawner, gate, _wakes) = gated(&["stuck"]);
        spawner.hand_over(job("org.x.Stuck", "stuck"));
        gate.wait_for(|s| s.inside == 1);
        spawner.hand_over(job("org.x.Queued", "queued"));
        spawner.hand_over(job("org.x.Kept", "kept"));
        spawner.stop("org.x.Queued");
        spawner.stop("org.x.Stuck");
        gate.open();
        let done = take(&spawner, 2);
        let seen: Vec<_> = done.iter().map(|d| (d.name.as_str(), d.stopped)).collect();
        assert_eq!(seen, [("org.x.Stuck", true), ("org.x.Kept", false)]);
        assert_eq!(gate.state.lock().unwrap().spawned, ["stuck", "kept"]);
        // The stuck one's child is killed once its spawn returned.
        assert_eq!(gate.state.lock().unwrap().killed, [1001]);
        spawner.end(END_WAIT).unwrap();
    }

    /// A real child stuck before its exec reports its pid, and stopping
    /// its activation kills it, which releases the spawn.
    #[test]
    fn a_child_stopped_before_it_reported_its_pid_does_not_execute() {
        // The activation times out after the spawn began, before the fork
        // (the spawn held here): no pid to kill yet. The child, once
        // forked, finds the word and exits before its exec, so it cannot
        // get stuck in one with nobody to kill it.
        let _starting = crate::test_forks::starting_programs();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = std::sync::Mutex::new(released);
        let spawner = Spawner::new(
            move |command| {
                let _ = released.lock().unwrap().recv();
                spawn_program(command)
            },
            || {},
        );
        let mut stopped = job("org.x.Late", "/bin/sh");
        stopped.command.args(["-c", "exit 0"]);
        spawner.hand_over(stopped);
        let give_up = Instant::now() + Duration::from_secs(60);
        while spawner.shared.lock().in_progress.is_none() {
            assert!(Instant::now() < give_up, "the spawn never began");
            std::thread::sleep(Duration::from_millis(1));
        }
        spawner.stop("org.x.Late");
        release.send(()).unwrap();
        let done = take(&spawner, 1);
        assert!(done[0].stopped);
        let pid = *done[0].outcome.as_ref().unwrap();
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        let status = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
            .unwrap()
            .unwrap();
        // Not the program's 0, nor the kill that follows a spawn stopped
        // while it ran: the child's own exit before executing.
        assert_eq!(status.exit_status(), Some(1), "{status:?}");
        spawner.end(END_WAIT).unwrap();
    }

    /// A child of this process that holds `path` open.
    fn child_holding(path: &std::path::Path) -> Option<u32> {
        let ours = std::process::id().to_string();
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                let parent = stat.rsplit(')').next()?.split_whitespace().nth(1)?;
                let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
                let holds = fds
                    .flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path));
                (parent == ours && holds).then_some(pid)
            })
    }

    #[test]
    fn stopping_kills_a_real_child_stuck_before_its_exec() {
        let _starting = crate::test_forks::starting_programs();
        let dir = std::env::temp_dir().join(format!("qb-spawner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("gate");
        let _ = std::fs::remove_file(&fifo);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RWXU,
            0,
        )
        .unwrap();
        // Stuck before the exec, after reporting its pid: a hook that
        // waits on a FIFO nobody writes (as a lingering close in the exec
        // would hold it).
        let gate = fifo.clone();
        let spawner = Spawner::new(
            move |command| {
                crate::sys::wait_before_exec(command, &gate, 3_600_000)?;
                spawn_program(command)
            },
            || {},
        );
        spawner.hand_over(job("org.x.Stuck", "/bin/true"));
        let give_up = Instant::now() + Duration::from_secs(60);
        // Stopped before that, it would not be spawned, or would exit
        // before its exec (`a_child_stopped_before_it_reported_its_pid_...`):
        // stopped once it holds the FIFO open, it is past both.
        while child_holding(&fifo).is_none() {
            assert!(Instant::now() < give_up, "the child never got to the FIFO");
            std::thread::sleep(Duration::from_millis(1));
        }
        let done = loop {
            spawner.stop("org.x.Stuck");
            let done = spawner.take_done();
            if !done.is_empty() {
                break done;
            }
            assert!(Instant::now() < give_up, "the stuck spawn never returned");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(done[0].stopped);
        let pid = *done[0].outcome.as_ref().unwrap();
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        let status = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
            .unwrap()
            .unwrap();
        assert_eq!(status.terminating_signal(), Some(libc::SIGKILL as u32));
        spawner.end(END_WAIT).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
