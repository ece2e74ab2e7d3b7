//! What handing a batch to the daemon's worker threads costs (issue 27,
//! crates/daemon/src/server/workers.rs): the same rayon calls as
//! `Workers::each` (a pool, `install`, `par_iter_mut` over the batch) on
//! items that do nothing, so the time is the hand-over alone, with the
//! pool's threads awake (batches back to back) and after they slept (a
//! 200 µs pause before each batch, as between turns of a quiet bus). The
//! threshold below which the loop keeps a phase to itself
//! (`LEAST_PARALLEL`) weighs this against one connection's syscall.
//!
//! cargo run --release -p quickbus-daemon --example pool_handover

use std::time::{Duration, Instant};

use rayon::prelude::*;

const BATCHES: u32 = 20_000;

/// Mean µs per hand-over of `items` items to a pool of `threads`, with
/// `pause` before each batch.
fn handover_us(pool: &rayon::ThreadPool, items: usize, pause: Option<Duration>) -> f64 {
    let mut batch = vec![0u64; items];
    let mut total = Duration::ZERO;
    for _ in 0..BATCHES {
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
        let began = Instant::now();
        pool.install(|| batch.par_iter_mut().for_each(|item| *item += 1));
        total += began.elapsed();
    }
    total.as_secs_f64() * 1e6 / f64::from(BATCHES)
}

fn main() {
    println!("threads  items  awake µs  after 200 µs asleep µs");
    for threads in [2, 4, 8] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        for items in [2, 8, 32] {
            let awake = handover_us(&pool, items, None);
            let asleep = handover_us(&pool, items, Some(Duration::from_micros(200)));
            println!("{threads:>7}  {items:>5}  {awake:>8.1}  {asleep:>22.1}");
        }
    }
}
