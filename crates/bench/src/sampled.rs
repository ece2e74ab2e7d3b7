//! Samples filed by key over the repetitions, and their summaries
//! (medians) computed once, however many reports read them: the table,
//! the charts and the JSON.

use std::cell::OnceCell;
use std::collections::BTreeMap;

pub struct Sampled<K, S, M> {
    samples: BTreeMap<K, Vec<S>>,
    /// Made on the first read after a sample was added.
    summaries: OnceCell<BTreeMap<K, M>>,
}

impl<K, S, M> Default for Sampled<K, S, M> {
    fn default() -> Self {
        Sampled {
            samples: BTreeMap::new(),
            summaries: OnceCell::new(),
        }
    }
}

impl<K: Ord + Copy, S, M> Sampled<K, S, M> {
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

    /// Every key's summary, in key order: made by `summarize` on the
    /// first call after a sample was added, the same after that. So each
    /// owner reads them through one accessor of its own that always
    /// passes the same `summarize`.
    pub fn summaries(&self, summarize: impl Fn(&K, &[S]) -> M) -> &BTreeMap<K, M> {
        self.summaries.get_or_init(|| {
            self.samples
                .iter()
                .map(|(key, samples)| (*key, summarize(key, samples)))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn summaries_are_made_once_until_a_sample_is_added() {
        let made = Cell::new(0);
        let sum = |_: &u32, samples: &[u32]| {
            made.set(made.get() + 1);
            samples.iter().sum::<u32>()
        };
        let mut sampled = Sampled::default();
        sampled.add(1, 2);
        sampled.add(1, 3);
        sampled.add(0, 7);
        assert_eq!(sampled.summaries(sum), &BTreeMap::from([(0, 7), (1, 5)]));
        assert_eq!(sampled.summaries(sum)[&1], 5);
        assert_eq!(made.get(), 2, "one per key, once");
        sampled.add(1, 10);
        assert_eq!(sampled.summaries(sum)[&1], 15);
        assert_eq!(made.get(), 4, "made again after the add");
        assert_eq!(sampled.samples()[&1], [2, 3, 10]);
    }
}
