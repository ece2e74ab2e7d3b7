//! Samples filed by key over the repetitions, and their summaries
//! (medians) computed once, however many reports read them: the table,
//! the charts and the JSON.

use std::cell::OnceCell;
use std::collections::BTreeMap;

/// A key's summary of its samples.
pub type Summarize<K, S, M> = fn(&K, &[S]) -> M;

pub struct Sampled<K, S, M> {
    samples: BTreeMap<K, Vec<S>>,
    /// The one way this owner summarizes, fixed when it is made: every
    /// reader gets the same summaries.
    summarize: Summarize<K, S, M>,
    /// Made on the first read after a sample was added.
    summaries: OnceCell<BTreeMap<K, M>>,
}

impl<K: Ord + Copy, S, M> Sampled<K, S, M> {
    pub fn new(summarize: Summarize<K, S, M>) -> Self {
        Sampled {
            samples: BTreeMap::new(),
            summarize,
            summaries: OnceCell::new(),
        }
    }

    pub fn add(&mut self, key: K, sample: S) {
        self.summaries.take();
        self.samples.entry(key).or_default().push(sample);
    }

    /// Every key's samples, in key order.
    pub fn samples(&self) -> &BTreeMap<K, Vec<S>> {
        &self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Every key's summary, in key order: made on the first call after a
    /// sample was added, the same after that.
    pub fn summaries(&self) -> &BTreeMap<K, M> {
        self.summaries.get_or_init(|| {
            self.samples
                .iter()
                .map(|(key, samples)| (*key, (self.summarize)(key, samples)))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static MADE: Cell<usize> = const { Cell::new(0) };
    }

    fn sum(_: &u32, samples: &[u32]) -> u32 {
        MADE.with(|made| made.set(made.get() + 1));
        samples.iter().sum()
    }

    #[test]
    fn summaries_are_made_once_until_a_sample_is_added() {
        let made = || MADE.with(Cell::get);
        let mut sampled = Sampled::new(sum);
        sampled.add(1, 2);
        sampled.add(1, 3);
        sampled.add(0, 7);
        assert_eq!(sampled.summaries(), &BTreeMap::from([(0, 7), (1, 5)]));
        assert_eq!(sampled.summaries()[&1], 5);
        assert_eq!(made(), 2, "one per key, once");
        sampled.add(1, 10);
        assert_eq!(sampled.summaries()[&1], 15);
        assert_eq!(made(), 4, "made again after the add");
        assert_eq!(sampled.samples()[&1], [2, 3, 10]);
    }

    #[test]
    fn summaries_are_made_by_the_summarizer_given_at_construction() {
        let mut sampled =
            Sampled::new(|key: &u32, samples: &[u32]| key * 100 + samples.len() as u32);
        sampled.add(2, 9);
        sampled.add(2, 9);
        assert_eq!(sampled.summaries(), &BTreeMap::from([(2, 202)]));
    }
}
