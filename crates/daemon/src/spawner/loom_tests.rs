//! The spawner's hand-off model-checked: loom runs each test over the
//! interleavings of its threads (the loop's, which hands programs over,
//! stops them, takes their outcomes and ends the spawner; another that
//! does so at the same time; the spawning thread), with loom's lock,
//! condition variable and thread in the spawner, a [`ModelClock`], and a
//! spawn, a kill and a wake-up of the loop that only record (the spawn of
//! chosen programs held until opened, as a stuck exec holds it). Built
//! and run by scripts/test.sh: `RUSTFLAGS="--cfg quickbus_loom" cargo
//! test -p quickbus-daemon --lib --target-dir target/loom loom_tests`.
//!
//! A thread blocked for ever (a lost wake-up, an `end` that waits for a
//! thread that will not end, a program no thread spawns, an outcome the
//! loop is never woken for) fails a test as loom's deadlock.
//!
//! Not modelled: a child that reported its pid before its exec (the
//! model's spawn has no child; `stop` then kills it at once: the unit
//! test `stopping_kills_a_real_child_stuck_before_its_exec`), and a
//! thread that cannot be started.

use std::io;
use std::process::Command;
use std::time::Duration;

use loom::sync::{Arc, Condvar, Mutex};

use crate::handoff_clock::model::{ModelClock, FOREVER};

use super::{Job, Spawned, Spawner, StillSpawning, END_WAIT};

/// What the spawner did outside itself: the programs it spawned, the
/// pids it killed, the loop's wake-ups; and a gate that holds the spawns
/// of chosen programs until opened.
#[derive(Default)]
struct World {
    seen: Mutex<Seen>,
    /// Signalled for each spawn begun and ended, each wake-up, and when
    /// the gate opens.
    changed: Condvar,
}

#[derive(Default)]
struct Seen {
    /// The programs whose spawn is held until `open`.
    held: Vec<String>,
    open: bool,
    /// Spawns inside the gate now.
    inside: usize,
    /// The programs spawned, in the order they were.
    spawned: Vec<String>,
    killed: Vec<u32>,
    /// The loop's wake-ups (SIGCHLD raised).
    wakes: usize,
}

impl World {
    /// The model's spawn: a made-up pid, 100 + how many came before.
    fn spawn(&self, command: &mut Command) -> io::Result<u32> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut seen = self.seen.lock().unwrap();
        if seen.held.contains(&program) {
            seen.inside += 1;
            self.changed.notify_all();
            while !seen.open {
                seen = self.changed.wait(seen).unwrap();
            }
            seen.inside -= 1;
        }
        seen.spawned.push(program);
        Ok(100 + seen.spawned.len() as u32 - 1)
    }

    fn kill(&self, pid: u32) {
        self.seen.lock().unwrap().killed.push(pid);
    }

    fn wake(&self) {
        self.seen.lock().unwrap().wakes += 1;
        self.changed.notify_all();
    }

    fn hold(&self, program: &str) {
        self.seen.lock().unwrap().held.push(program.into());
    }

    fn open(&self) {
        self.seen.lock().unwrap().open = true;
        self.changed.notify_all();
    }

    /// Wait (without any time-out: loom has none) until a spawn is held.
    fn wait_inside(&self) {
        let mut seen = self.seen.lock().unwrap();
        while seen.inside == 0 {
            seen = self.changed.wait(seen).unwrap();
        }
    }

    fn wakes(&self) -> usize {
        self.seen.lock().unwrap().wakes
    }

    /// Wait until the loop was woken more than `than` times.
    fn wait_for_wake(&self, than: usize) {
        let mut seen = self.seen.lock().unwrap();
        while seen.wakes <= than {
            seen = self.changed.wait(seen).unwrap();
        }
    }

    fn spawned(&self) -> Vec<String> {
        self.seen.lock().unwrap().spawned.clone()
    }

    fn killed(&self) -> Vec<u32> {
        self.seen.lock().unwrap().killed.clone()
    }
}

/// A spawner on the model's clock, spawning, killing and waking the loop
/// in `World`.
fn spawner() -> (Arc<Spawner>, Arc<World>) {
    let world = Arc::new(World::default());
    let (spawning, killing, waking) = (world.clone(), world.clone(), world.clone());
    let spawner = Spawner::with(
        move |command| spawning.spawn(command),
        move || waking.wake(),
        move |pid| killing.kill(pid),
        ModelClock::default(),
    );
    (Arc::new(spawner), world)
}

/// The service `org.x.NAME`'s program, `NAME`.
fn job(name: &str) -> Job {
    Job {
        name: format!("org.x.{name}"),
        command: Command::new(name),
        via_helper: false,
    }
}

/// The loop: take outcomes, waiting for a wake-up (SIGCHLD) whenever
/// none is there, until there are `count`.
fn take_woken(spawner: &Spawner, world: &World, count: usize) -> Vec<Spawned> {
    let mut done = Vec::new();
    loop {
        // A wake-up after this look comes for an outcome it missed.
        let woken = world.wakes();
        done.extend(spawner.take_done());
        if done.len() >= count {
            return done;
        }
        world.wait_for_wake(woken);
    }
}

fn names(done: &[Spawned]) -> Vec<&str> {
    done.iter().map(|d| d.name.as_str()).collect()
}

/// `spawner` ended, waiting as long as it takes: nothing waits or is
/// being spawned, and the thread ended and was joined.
fn ended(spawner: &Spawner) {
    assert_eq!(spawner.end(FOREVER), Ok(()));
    let state = spawner.shared.lock();
    assert!(state.waiting.is_empty());
    assert!(state.in_progress.is_none());
    assert!(!state.running);
    assert!(state.thread.is_none(), "the thread ended and was joined");
    assert_eq!(state.ends_waiting, 0);
}

/// Every interleaving with at most [`PREEMPTIONS`] preemptions.
fn model(test: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTIONS);
    builder.check(test);
}

/// A lost wake-up or a race needs one or two preemptions. With five the
/// seven models take 11 s together on 2 cores (3 with four, 1 with
/// three; with no bound, 2 minutes).
const PREEMPTIONS: usize = 5;

/// The programs the loop hands over are spawned once each, in the order
/// they came, and the loop, woken for them, takes each outcome once.
#[test]
fn programs_are_spawned_once_each_in_order_and_taken_once() {
    model(|| {
        let (spawner, world) = spawner();
        spawner.hand_over(job("first"));
        spawner.hand_over(job("second"));
        let done = take_woken(&spawner, &world, 2);
        assert_eq!(names(&done), ["org.x.first", "org.x.second"]);
        let pids: Vec<_> = done.iter().map(|d| *d.outcome.as_ref().unwrap()).collect();
        assert_eq!(pids, [100, 101]);
        assert!(done.iter().all(|d| !d.stopped));
        assert_eq!(world.spawned(), ["first", "second"]);
        ended(&spawner);
        assert!(spawner.take_done().is_empty());
        assert!(world.killed().is_empty());
    });
}

/// No lost wake-up: a program handed over while the thread is idle is
/// spawned with no `end` to wake it (else loom finds every thread
/// blocked).
#[test]
fn a_program_wakes_the_idle_thread() {
    model(|| {
        let (spawner, world) = spawner();
        spawner.hand_over(job("first"));
        assert_eq!(names(&take_woken(&spawner, &world, 1)), ["org.x.first"]);
        spawner.hand_over(job("second"));
        assert_eq!(names(&take_woken(&spawner, &world, 1)), ["org.x.second"]);
        ended(&spawner);
    });
}

/// `end` returns only once every program waiting was spawned and the
/// thread ended; the next program starts a thread again, which the next
/// `end` ends.
#[test]
fn end_returns_once_every_program_is_spawned_and_the_thread_ended() {
    model(|| {
        let (spawner, world) = spawner();
        spawner.hand_over(job("first"));
        spawner.hand_over(job("second"));
        ended(&spawner);
        assert_eq!(world.spawned(), ["first", "second"]);
        assert_eq!(names(&spawner.take_done()), ["org.x.first", "org.x.second"]);
        spawner.hand_over(job("third"));
        ended(&spawner);
        assert_eq!(world.spawned(), ["first", "second", "third"]);
        assert_eq!(names(&spawner.take_done()), ["org.x.third"]);
    });
}

/// While a spawn is held, `end` gives up (no fork then) and names it,
/// with the program behind it; once the spawn goes on, both are spawned
/// and the thread ends.
#[test]
fn end_gives_up_while_a_spawn_is_held() {
    model(|| {
        let (spawner, world) = spawner();
        world.hold("stuck");
        spawner.hand_over(job("stuck"));
        spawner.hand_over(job("behind"));
        world.wait_inside();
        let still = StillSpawning {
            name: "org.x.stuck".into(),
            waiting: 1,
        };
        assert_eq!(spawner.end(END_WAIT), Err(still));
        assert!(spawner.shared.lock().running, "the thread goes on");
        world.open();
        ended(&spawner);
        assert_eq!(world.spawned(), ["stuck", "behind"]);
        assert_eq!(names(&spawner.take_done()), ["org.x.stuck", "org.x.behind"]);
    });
}

/// A program handed over while `end` waits (or after it) is spawned
/// once, by the ending thread or a new one, and `end` still returns: a
/// hand-over that took the thread's end back would keep it idle, and
/// `end` waiting for it (loom's deadlock).
#[test]
fn a_program_racing_with_end_is_spawned_once() {
    model(|| program_racing_with_end(FOREVER));
}

/// The same with an `end` that gives up, as a restart's may.
#[test]
fn a_program_racing_with_an_end_that_gives_up_is_spawned_once() {
    model(|| program_racing_with_end(END_WAIT));
}

/// Another thread hands a program over while `end` waits `wait`; a last
/// `end` then waits for whatever is left.
fn program_racing_with_end(wait: Duration) {
    let (spawner, world) = spawner();
    spawner.hand_over(job("ours"));
    let other = {
        let spawner = Arc::clone(&spawner);
        loom::thread::spawn(move || spawner.hand_over(job("theirs")))
    };
    match spawner.end(wait) {
        Ok(()) => {}
        Err(StillSpawning { waiting, .. }) => {
            assert!(wait < FOREVER);
            assert!(waiting <= 2, "{waiting} waiting");
        }
    }
    other.join().unwrap();
    ended(&spawner);
    assert_eq!(world.spawned(), ["ours", "theirs"]);
    assert_eq!(names(&spawner.take_done()), ["org.x.ours", "org.x.theirs"]);
}

/// `stop` racing with the spawn of its program (from another thread, at
/// any point of it): the program is either dropped unspawned, or spawned,
/// its outcome marked stopped and its child killed once; never spawned
/// and reported as an activation's. The program behind it is spawned as
/// if nothing happened.
#[test]
fn a_stop_racing_with_the_spawn_drops_the_program_or_kills_its_child() {
    model(|| {
        let (spawner, world) = spawner();
        spawner.hand_over(job("stopped"));
        spawner.hand_over(job("kept"));
        let other = {
            let spawner = Arc::clone(&spawner);
            loom::thread::spawn(move || spawner.stop("org.x.stopped"))
        };
        other.join().unwrap();
        ended(&spawner);
        let done = spawner.take_done();
        let seen: Vec<_> = done.iter().map(|d| (d.name.as_str(), d.stopped)).collect();
        if world.spawned() == ["kept"] {
            assert_eq!(seen, [("org.x.kept", false)]);
            assert!(world.killed().is_empty());
        } else {
            assert_eq!(world.spawned(), ["stopped", "kept"]);
            assert_eq!(seen, [("org.x.stopped", true), ("org.x.kept", false)]);
            assert_eq!(world.killed(), [*done[0].outcome.as_ref().unwrap()]);
        }
    });
}
