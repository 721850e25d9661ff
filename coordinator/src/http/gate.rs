//! Who may hold the HTTP listener's connections (issue 29, "HTTP slowloris"): a client that
//! opens connections and trickles its request heads must not keep `/healthz` from answering
//! — the liveness probe would fail and Kubernetes would restart the coordinator, losing its
//! runs.
//!
//! A probe cannot be told apart by its source: the kubelet's node address may well be the
//! attacker's (SNAT, a host-network pod), and on loopback every client is 127.0.0.1. What
//! tells it apart is its speed: a genuine request sends its head at once. So a connection
//! lives in three stages:
//! - **young** (its first [`GRACE`]): bounded only in all ([`MAX_YOUNG`], a resource bound
//!   that a connection *flood*, not a slow client, would have to fill). A probe or a scrape
//!   finishes its head here and is never booked, never evicted.
//! - **slow** (its head not complete after [`GRACE`]): booked in [`Book`], at most
//!   [`MAX_SLOW`] in all and [`MAX_SLOW_PER_SOURCE`] per source (an IPv4 address, an IPv6
//!   /64); a new slow connection that finds its source's share (or the book) full closes the
//!   oldest slow one of that source (or of all) to make room. A slowloris thus holds at most
//!   its share, each connection for at most the head deadline.
//! - **answering** (its head read): at most [`MAX_ANSWERING`] at once, each bounded by the
//!   listener's write deadline.
//!
//! Plain data and a mutex, decided without I/O; eviction is a cancellation token the
//! connection's task watches.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long a connection may read its head before it counts as slow.
pub const GRACE: Duration = Duration::from_millis(500);
/// Young connections at once (a bound on sockets, not on anyone's share).
pub const MAX_YOUNG: usize = 1024;
/// Slow connections booked at once.
pub const MAX_SLOW: usize = 256;
/// Slow connections one source may have booked at once.
pub const MAX_SLOW_PER_SOURCE: usize = 16;
/// Connections answering at once.
pub const MAX_ANSWERING: usize = 256;

#[derive(Debug)]
struct Booked {
    source: IpAddr,
    evict: CancellationToken,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// By booking order: the first is the oldest.
    conns: BTreeMap<u64, Booked>,
    per_source: HashMap<IpAddr, usize>,
    evicted: u64,
}

/// The book of slow connections.
#[derive(Debug)]
pub struct Book {
    total: usize,
    per_source: usize,
    state: Mutex<State>,
}

/// A booked slow connection; dropping it gives its place back.
#[derive(Debug)]
pub struct Ticket {
    book: Arc<Book>,
    id: u64,
    /// Cancelled when the connection is evicted to make room for another.
    pub evicted: CancellationToken,
}

impl Book {
    /// A book of `total` places, `per_source` per source.
    pub fn new(total: usize, per_source: usize) -> Arc<Self> {
        Arc::new(Self { total, per_source, state: Mutex::new(State::default()) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Bookkeeping only: a poisoned lock still holds consistent books.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Books a slow connection from `ip`, evicting the oldest of its source (when its share is
    /// full) or of all (when the book is); `None` only for a book of no places.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Ticket> {
        if self.total == 0 || self.per_source == 0 {
            return None;
        }
        let source = crate::farm::admission::source_of(ip);
        let mut st = self.state();
        if st.per_source.get(&source).copied().unwrap_or(0) >= self.per_source {
            evict_oldest(&mut st, Some(source));
        }
        if st.conns.len() >= self.total {
            evict_oldest(&mut st, None);
        }
        st.next += 1;
        let id = st.next;
        let evicted = CancellationToken::new();
        st.conns.insert(id, Booked { source, evict: evicted.clone() });
        *st.per_source.entry(source).or_default() += 1;
        Some(Ticket { book: self.clone(), id, evicted })
    }

    /// (booked connections, evictions so far).
    pub fn counts(&self) -> (usize, u64) {
        let st = self.state();
        (st.conns.len(), st.evicted)
    }
}

/// Closes the oldest booked connection (of `source`, or of any).
fn evict_oldest(st: &mut State, source: Option<IpAddr>) {
    let oldest =
        st.conns.iter().find(|(_, c)| source.is_none_or(|s| c.source == s)).map(|(id, _)| *id);
    if let Some(c) = oldest.and_then(|id| remove(st, id)) {
        c.evict.cancel();
        st.evicted += 1;
    }
}

fn remove(st: &mut State, id: u64) -> Option<Booked> {
    let c = st.conns.remove(&id)?;
    if let Some(n) = st.per_source.get_mut(&c.source) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            st.per_source.remove(&c.source);
        }
    }
    Some(c)
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Already gone when it was evicted.
        remove(&mut self.book.state(), self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_full_source_makes_room_by_closing_its_oldest_slow_connection() {
        let b = Book::new(100, 3);
        let a = ip("127.0.0.1");
        let slow: Vec<Ticket> = (0..3).map(|_| b.admit(a).unwrap()).collect();
        let next = b.admit(a).expect("room is made");
        assert!(slow[0].evicted.is_cancelled());
        assert!(!slow[1].evicted.is_cancelled() && !next.evicted.is_cancelled());
        let _more: Vec<Ticket> = (0..2).map(|_| b.admit(a).unwrap()).collect();
        assert!(slow[1].evicted.is_cancelled() && slow[2].evicted.is_cancelled());
        assert!(!next.evicted.is_cancelled(), "the oldest go first");
        assert_eq!(b.counts(), (3, 3));
        // Dropping an evicted ticket gives nothing back twice.
        drop(slow);
        assert_eq!(b.counts().0, 3);
    }

    #[test]
    fn another_source_is_untouched_until_the_book_is_full() {
        let b = Book::new(4, 3);
        let a = ip("10.0.0.1");
        let mine: Vec<Ticket> = (0..3).map(|_| b.admit(a).unwrap()).collect();
        let theirs = b.admit(ip("10.0.0.2")).unwrap();
        let _one_more_of_mine = b.admit(a).unwrap();
        assert!(mine[0].evicted.is_cancelled() && !theirs.evicted.is_cancelled());
        // The book is full: the oldest of anyone's goes.
        let next = b.admit(ip("10.0.0.3")).unwrap();
        assert!(mine[1].evicted.is_cancelled() && !theirs.evicted.is_cancelled());
        drop((mine, theirs, next, _one_more_of_mine));
        assert_eq!(b.counts().0, 0);
        assert!(b.state().per_source.is_empty());
    }

    #[test]
    fn a_book_of_no_places_admits_nobody() {
        assert!(Book::new(0, 1).admit(ip("10.0.0.1")).is_none());
        assert!(Book::new(1, 0).admit(ip("10.0.0.1")).is_none());
    }
}
