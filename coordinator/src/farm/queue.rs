//! The farm's queue of items waiting for a worker (a part of the core, sans-IO like it):
//! served highest critical-path priority first, ties in the order they were queued (a
//! requeued item goes behind the items of its priority already waiting).
//!
//! Kept ordered as it is filled, so placing an item neither sorts the queue nor shifts
//! every item behind it: a run of thousands of tasks used to pay both on every placement —
//! a sort of the whole queue, then a `Vec::remove` that moved every assignment behind the
//! placed one (quadratic in the run's size; most of the coordinator's copying in a profile
//! of 2,000 queued tasks). Finding an item by its origin (a cancel) is a lookup too.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use super::{Origin, Queued};

/// Where an item stands in the queue: its priority, then when it was queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Place {
    priority: Reverse<u64>,
    seq: u64,
}

/// The queue.
#[derive(Default)]
pub(super) struct Queue {
    items: BTreeMap<Place, Queued>,
    /// Where each origin's item stands (an origin is queued at most once; should one be
    /// queued twice, each entry is still found, first in serving order).
    by_origin: HashMap<Origin, Vec<Place>>,
    next_seq: u64,
}

impl Queue {
    /// Queues `q` behind every item of its priority already waiting.
    pub(super) fn push(&mut self, q: Queued) {
        let place = Place { priority: Reverse(q.item.priority), seq: self.next_seq };
        self.next_seq += 1;
        self.by_origin.entry(q.item.origin).or_default().push(place);
        self.items.insert(place, q);
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The first item in serving order after `after` (from the front when `None`).
    pub(super) fn next_after(&self, after: Option<Place>) -> Option<(Place, &Queued)> {
        match after {
            None => self.items.iter().next(),
            Some(p) => {
                self.items.range((std::ops::Bound::Excluded(p), std::ops::Bound::Unbounded)).next()
            }
        }
        .map(|(p, q)| (*p, q))
    }

    /// The item at `place`, to change in place.
    pub(super) fn get_mut(&mut self, place: Place) -> Option<&mut Queued> {
        self.items.get_mut(&place)
    }

    /// Takes the item at `place` out of the queue.
    pub(super) fn remove(&mut self, place: Place) -> Option<Queued> {
        let q = self.items.remove(&place)?;
        if let Some(places) = self.by_origin.get_mut(&q.item.origin) {
            places.retain(|p| *p != place);
            if places.is_empty() {
                self.by_origin.remove(&q.item.origin);
            }
        }
        Some(q)
    }

    /// Takes `origin`'s item (the first in serving order) out of the queue, if it waits.
    pub(super) fn remove_origin(&mut self, origin: &Origin) -> Option<Queued> {
        let place = self.by_origin.get(origin)?.iter().min().copied()?;
        self.remove(place)
    }

    /// Every place, in serving order (a snapshot: the queue may change while it is walked).
    pub(super) fn places(&self) -> Vec<Place> {
        self.items.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prova_protocol::{AttemptId, RunId};

    use super::super::tests::item;
    use super::*;

    fn queued(attempt: u64, priority: u64) -> Queued {
        Queued::new(item(1, attempt, priority), Duration::ZERO)
    }

    fn order(q: &Queue) -> Vec<u64> {
        let mut out = Vec::new();
        let mut at = None;
        while let Some((p, item)) = q.next_after(at) {
            out.push(item.item.origin.attempt.0);
            at = Some(p);
        }
        out
    }

    #[test]
    fn served_highest_priority_first_and_ties_in_queueing_order() {
        let mut q = Queue::default();
        for (attempt, priority) in [(1, 5), (2, 9), (3, 5), (4, 1), (5, 9)] {
            q.push(queued(attempt, priority));
        }
        assert_eq!(order(&q), vec![2, 5, 1, 3, 4]);
        // Taken from the middle and queued again: behind the others of its priority.
        let (second, _) = q.next_after(q.next_after(None).map(|(p, _)| p)).unwrap();
        let back = q.remove(second).unwrap();
        assert_eq!(back.item.origin.attempt, AttemptId(5));
        q.push(queued(6, 9));
        q.push(back);
        assert_eq!(order(&q), vec![2, 6, 5, 1, 3, 4]);
        assert_eq!(q.len(), 6);
    }

    #[test]
    fn an_origin_is_found_and_taken_out_once() {
        let mut q = Queue::default();
        for attempt in 1..=4 {
            q.push(queued(attempt, attempt));
        }
        let origin = Origin { run: RunId(1), attempt: AttemptId(3) };
        assert_eq!(q.remove_origin(&origin).unwrap().item.origin, origin);
        assert!(q.remove_origin(&origin).is_none());
        assert_eq!(order(&q), vec![4, 2, 1]);
        // Taken by place, its origin is no longer found either.
        let (front, _) = q.next_after(None).unwrap();
        q.remove(front).unwrap();
        assert!(q.remove_origin(&Origin { run: RunId(1), attempt: AttemptId(4) }).is_none());
        assert_eq!(q.places().len(), 2);
        assert!(!q.is_empty());
    }

    #[test]
    fn an_origin_queued_twice_is_taken_first_in_serving_order_then_again() {
        let mut q = Queue::default();
        q.push(queued(7, 1));
        q.push(queued(7, 3));
        let origin = Origin { run: RunId(1), attempt: AttemptId(7) };
        assert_eq!(q.remove_origin(&origin).unwrap().item.priority, 3);
        assert_eq!(q.remove_origin(&origin).unwrap().item.priority, 1);
        assert!(q.is_empty());
    }
}
