//! What handing a batch to the daemon's worker threads costs (issue 27,
//! crates/daemon/src/server/workers.rs), on items that do nothing, so the
//! time is the hand-over alone: with the pool's threads awake (batches
//! back to back) and after they slept (a 200 µs pause before each batch,
//! as between turns of a bus that is not saturated). Two ways:
//! - `install`: the pool does the whole batch, the caller sleeps until it
//!   is done;
//! - `in place`: what `Workers::each` does, the caller takes an equal
//!   share itself (`in_place_scope`) while the pool's threads do theirs.
//!
//! The threshold below which the loop keeps a phase to itself
//! (`LEAST_PARALLEL`) weighs this against one connection's syscall.
//!
//! cargo run --release -p quickbus-daemon --example pool_handover

use std::time::{Duration, Instant};

use rayon::prelude::*;

const BATCHES: u32 = 20_000;

fn install(pool: &rayon::ThreadPool, batch: &mut [u64]) {
    pool.install(|| batch.par_iter_mut().for_each(|item| *item += 1));
}

fn in_place(pool: &rayon::ThreadPool, batch: &mut [u64]) {
    let share = batch.len().div_ceil(pool.current_num_threads() + 1);
    let mut shares = batch.chunks_mut(share);
    let own = shares.next();
    pool.in_place_scope(|scope| {
        for share in shares {
            scope.spawn(move |_| share.iter_mut().for_each(|item| *item += 1));
        }
        own.into_iter().flatten().for_each(|item| *item += 1);
    });
}

/// Mean µs per hand-over of `items` items, `pause` before each.
fn mean_us(
    pool: &rayon::ThreadPool,
    items: usize,
    pause: Option<Duration>,
    hand_over: fn(&rayon::ThreadPool, &mut [u64]),
) -> f64 {
    let mut batch = vec![0u64; items];
    let mut total = Duration::ZERO;
    for _ in 0..BATCHES {
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
        let began = Instant::now();
        hand_over(pool, &mut batch);
        total += began.elapsed();
    }
    total.as_secs_f64() * 1e6 / f64::from(BATCHES)
}

fn main() {
    let asleep = Some(Duration::from_micros(200));
    println!("threads  items  µs: install awake  asleep  in place awake  asleep");
    for threads in [2, 4, 8] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        for items in [8, 32] {
            println!(
                "{threads:>7}  {items:>5}  {:>17.1}  {:>6.1}  {:>14.1}  {:>6.1}",
                mean_us(&pool, items, None, install),
                mean_us(&pool, items, asleep, install),
                mean_us(&pool, items, None, in_place),
                mean_us(&pool, items, asleep, in_place),
            );
        }
    }
}
