//! Who may hold how much of the coordinator (issue 10, "the least-trusted peer cannot starve
//! the farm"). Every authenticated connection takes a ticket from its role's pool and from its
//! certificate identity's share; every blob upload takes a ticket for its stream and its
//! declared bytes. Tickets give their share back when dropped, so no exit path can leak one.
//!
//! The pools are separate per role, so clients — the least-trusted peers, and the most
//! numerous — can never take the capacity of admins (an operator's `farm status` during an
//! incident), of workers (a restarting worker re-registering) or of CI. Within a role, one
//! certificate identity holds at most its share, so one developer's client cannot starve the
//! others. Before a certificate is known, a connection is a handshake: those are bounded
//! separately ([`Handshakes`]: [`MAX_HANDSHAKES`] in all, [`HANDSHAKES_PER_SOURCE`] per source
//! address, [`KNOWN_RESERVE`] kept for addresses a cluster peer connected from), and refused
//! rather than queued when full.
//!
//! Plain data and a mutex: decided without I/O, tested below without sockets.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use prova_protocol::transport::{Identity, Role};

/// QUIC handshakes in progress at once; beyond this a new connection is refused at once (a
/// refusal costs one packet; queueing would hold memory for peers that may never finish).
/// Only sources whose address QUIC validated (a stateless retry answered) get this far.
pub const MAX_HANDSHAKES: usize = 128;
/// Of [`MAX_HANDSHAKES`], the slots only *known* sources may take: addresses from which a
/// peer with a certificate of the cluster connected before (workers, admins, CI). Unknown
/// sources share the rest, so a flood from addresses never seen cannot keep a worker, an
/// admin or CI from its handshake.
pub const KNOWN_RESERVE: usize = 32;
/// Handshakes one unknown source (an IPv4 address, an IPv6 /64) may have in progress.
pub const HANDSHAKES_PER_SOURCE: usize = 8;
/// Handshakes one known source may have in progress (CI runners behind one NAT address).
pub const HANDSHAKES_PER_KNOWN_SOURCE: usize = 32;
/// Known sources remembered, the least recently seen forgotten first.
pub const KNOWN_SOURCES: usize = 4096;

/// The bounds, per role.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections one role may hold in all.
    pub role_connections: fn(Role) -> usize,
    /// Connections one certificate identity may hold.
    pub identity_connections: fn(Role) -> usize,
    /// Blob uploads one identity may have in flight.
    pub identity_uploads: fn(Role) -> usize,
    /// Declared bytes of one identity's uploads in flight.
    pub identity_upload_bytes: fn(Role) -> u64,
}

const GIB: u64 = 1024 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            role_connections: |role| match role {
                Role::Worker => 512,
                Role::Ci => 256,
                Role::Client => 256,
                Role::Admin => 32,
                Role::Coordinator => 0,
            },
            // A worker holds one live connection, but a killed or partitioned worker's old
            // links linger until their idle timeout (30 s): a worker restarted in a loop
            // must not lock itself out. CI runners usually share one certificate; a
            // developer runs a few.
            identity_connections: |role| match role {
                Role::Worker => 64,
                Role::Ci => 128,
                Role::Client => 16,
                Role::Admin => 8,
                Role::Coordinator => 0,
            },
            identity_uploads: |role| match role {
                Role::Worker => 64,
                Role::Ci => 256,
                Role::Client => 32,
                Role::Admin | Role::Coordinator => 0,
            },
            identity_upload_bytes: |role| match role {
                Role::Worker => 64 * GIB,
                Role::Ci => 64 * GIB,
                Role::Client => 16 * GIB,
                Role::Admin | Role::Coordinator => 0,
            },
        }
    }
}

/// Why a connection or an upload was refused; the text is sent to the peer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The role's pool is full.
    #[error(
        "the coordinator holds its limit of {limit} `{role}` connections; try again when one ends"
    )]
    RoleFull {
        /// The role.
        role: Role,
        /// Its pool's size.
        limit: usize,
    },
    /// The identity holds its share.
    #[error(
        "certificate `{name}` ({role}) already holds {limit} connections, the most one `{role}` \
         certificate may hold; close some (or use another certificate per machine)"
    )]
    IdentityConnections {
        /// The certificate's name.
        name: String,
        /// Its role.
        role: Role,
        /// The share.
        limit: usize,
    },
    /// The identity has its most uploads in flight.
    #[error("certificate `{name}` already has {limit} uploads in flight; wait for one to end")]
    IdentityUploads {
        /// The certificate's name.
        name: String,
        /// The limit.
        limit: usize,
    },
    /// The identity's uploads in flight would pass its byte budget.
    #[error(
        "an upload of {size} bytes would put certificate `{name}` past its {limit} bytes of \
         uploads in flight"
    )]
    IdentityUploadBytes {
        /// The certificate's name.
        name: String,
        /// The upload's declared size.
        size: u64,
        /// The budget.
        limit: u64,
    },
}

#[derive(Debug, Default)]
struct Usage {
    connections: usize,
    uploads: usize,
    upload_bytes: u64,
}

#[derive(Debug, Default)]
struct State {
    by_role: HashMap<Role, usize>,
    by_identity: HashMap<Identity, Usage>,
}

/// The coordinator's admission state, shared by every connection.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

/// A held connection; dropping it gives the share back.
#[derive(Debug)]
pub struct ConnectionTicket {
    admission: Arc<Admission>,
    identity: Identity,
}

/// A held upload; dropping it gives the share back.
#[derive(Debug)]
pub struct UploadTicket {
    admission: Arc<Admission>,
    identity: Identity,
    bytes: u64,
}

impl Admission {
    /// Admission with `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self { limits, state: Mutex::new(State::default()) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section only adds or subtracts counters: a panic inside one (there is
        // none) would leave them consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection of `identity`, or says why not.
    pub fn connect(self: &Arc<Self>, identity: &Identity) -> Result<ConnectionTicket, Refusal> {
        let role = identity.role;
        let role_limit = (self.limits.role_connections)(role);
        let id_limit = (self.limits.identity_connections)(role);
        let mut st = self.state();
        let in_role = st.by_role.get(&role).copied().unwrap_or(0);
        if in_role >= role_limit {
            return Err(Refusal::RoleFull { role, limit: role_limit });
        }
        let held = st.by_identity.get(identity).map_or(0, |u| u.connections);
        if held >= id_limit {
            return Err(Refusal::IdentityConnections {
                name: identity.name.clone(),
                role,
                limit: id_limit,
            });
        }
        *st.by_role.entry(role).or_default() += 1;
        st.by_identity.entry(identity.clone()).or_default().connections += 1;
        Ok(ConnectionTicket { admission: self.clone(), identity: identity.clone() })
    }

    /// The declared bytes of `identity`'s uploads in flight (a quota check counts them as
    /// stored: they may all land).
    pub fn upload_bytes_in_flight(&self, identity: &Identity) -> u64 {
        self.state().by_identity.get(identity).map_or(0, |u| u.upload_bytes)
    }

    /// Admits an upload of `size` declared bytes by `identity`, or says why not.
    pub fn upload(
        self: &Arc<Self>,
        identity: &Identity,
        size: u64,
    ) -> Result<UploadTicket, Refusal> {
        let limit = (self.limits.identity_uploads)(identity.role);
        let byte_limit = (self.limits.identity_upload_bytes)(identity.role);
        let mut st = self.state();
        let usage = st.by_identity.entry(identity.clone()).or_default();
        if usage.uploads >= limit {
            return Err(Refusal::IdentityUploads { name: identity.name.clone(), limit });
        }
        if usage.upload_bytes.saturating_add(size) > byte_limit {
            return Err(Refusal::IdentityUploadBytes {
                name: identity.name.clone(),
                size,
                limit: byte_limit,
            });
        }
        usage.uploads += 1;
        usage.upload_bytes += size;
        Ok(UploadTicket { admission: self.clone(), identity: identity.clone(), bytes: size })
    }

    /// Connections held by `identity` now.
    pub fn connections_of(&self, identity: &Identity) -> usize {
        self.state().by_identity.get(identity).map_or(0, |u| u.connections)
    }

    fn release(&self, identity: &Identity, connection: bool, upload_bytes: Option<u64>) {
        let mut st = self.state();
        if connection && let Some(n) = st.by_role.get_mut(&identity.role) {
            *n = n.saturating_sub(1);
        }
        let empty = match st.by_identity.get_mut(identity) {
            Some(u) => {
                if connection {
                    u.connections = u.connections.saturating_sub(1);
                }
                if let Some(bytes) = upload_bytes {
                    u.uploads = u.uploads.saturating_sub(1);
                    u.upload_bytes = u.upload_bytes.saturating_sub(bytes);
                }
                u.connections == 0 && u.uploads == 0
            }
            None => false,
        };
        // Identities come and go (one per developer, per CI image): keep only live ones.
        if empty {
            st.by_identity.remove(identity);
        }
    }
}

impl Drop for ConnectionTicket {
    fn drop(&mut self) {
        self.admission.release(&self.identity, true, None);
    }
}

impl Drop for UploadTicket {
    fn drop(&mut self) {
        self.admission.release(&self.identity, false, Some(self.bytes));
    }
}

/// Why a handshake was refused (logged; the peer only sees a refused connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeRefusal {
    /// The source holds its share of handshakes.
    #[error("{from} already has {limit} handshakes in progress")]
    Source {
        /// The source (an IPv4 address or an IPv6 /64).
        from: IpAddr,
        /// Its share.
        limit: usize,
    },
    /// Every slot this source may take is held.
    #[error("{limit} handshakes in progress")]
    Full {
        /// The slots this source could have taken.
        limit: usize,
    },
}

/// The bounds on handshakes in progress.
#[derive(Clone, Copy, Debug)]
pub struct HandshakeLimits {
    /// In all.
    pub total: usize,
    /// Kept for known sources.
    pub known_reserve: usize,
    /// Per unknown source.
    pub per_source: usize,
    /// Per known source.
    pub per_known_source: usize,
    /// Known sources remembered.
    pub known_sources: usize,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        Self {
            total: MAX_HANDSHAKES,
            known_reserve: KNOWN_RESERVE,
            per_source: HANDSHAKES_PER_SOURCE,
            per_known_source: HANDSHAKES_PER_KNOWN_SOURCE,
            known_sources: KNOWN_SOURCES,
        }
    }
}

#[derive(Debug, Default)]
struct HandshakeState {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
    /// Known source → when it was last seen (a counter), and the reverse for forgetting.
    known: HashMap<IpAddr, u64>,
    by_age: BTreeMap<u64, IpAddr>,
    seen: u64,
}

/// Handshakes in progress, per source address. Plain data and a mutex, like [`Admission`].
#[derive(Debug)]
pub struct Handshakes {
    limits: HandshakeLimits,
    state: Mutex<HandshakeState>,
}

/// A handshake slot; dropping it gives it back.
#[derive(Debug)]
pub struct HandshakeTicket {
    gate: Arc<Handshakes>,
    source: IpAddr,
}

/// The source a handshake counts against: an IPv4 address, or an IPv6 address's /64 (one
/// host commonly holds a whole /64). An IPv4-mapped IPv6 address is its IPv4 address.
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl Handshakes {
    /// Handshake bookkeeping with `limits`.
    pub fn new(limits: HandshakeLimits) -> Arc<Self> {
        Arc::new(Self { limits, state: Mutex::new(HandshakeState::default()) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HandshakeState> {
        // Counters only (see `Admission::state`).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a handshake from `ip` (a validated address), or why not.
    pub fn begin(self: &Arc<Self>, ip: IpAddr) -> Result<HandshakeTicket, HandshakeRefusal> {
        let source = source_of(ip);
        let l = self.limits;
        let mut st = self.state();
        let known = st.known.contains_key(&source);
        let (per_source, total) = if known {
            (l.per_known_source, l.total)
        } else {
            (l.per_source, l.total.saturating_sub(l.known_reserve))
        };
        let held = st.by_source.get(&source).copied().unwrap_or(0);
        if held >= per_source {
            return Err(HandshakeRefusal::Source { from: source, limit: per_source });
        }
        if st.total >= total {
            return Err(HandshakeRefusal::Full { limit: total });
        }
        st.total += 1;
        *st.by_source.entry(source).or_default() += 1;
        Ok(HandshakeTicket { gate: self.clone(), source })
    }

    /// A peer with a certificate of the cluster connected from `ip`: its source is known.
    pub fn authenticated(&self, ip: IpAddr) {
        let source = source_of(ip);
        let mut st = self.state();
        st.seen += 1;
        let seen = st.seen;
        if let Some(old) = st.known.insert(source, seen) {
            st.by_age.remove(&old);
        }
        st.by_age.insert(seen, source);
        while st.known.len() > self.limits.known_sources {
            let Some((_, oldest)) = st.by_age.pop_first() else { break };
            st.known.remove(&oldest);
        }
    }

    /// Handshakes in progress (in all, from `ip`'s source).
    pub fn in_progress(&self, ip: IpAddr) -> (usize, usize) {
        let st = self.state();
        (st.total, st.by_source.get(&source_of(ip)).copied().unwrap_or(0))
    }
}

impl Drop for HandshakeTicket {
    fn drop(&mut self) {
        let mut st = self.gate.state();
        st.total = st.total.saturating_sub(1);
        if let Some(n) = st.by_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(role: Role, name: &str) -> Identity {
        Identity { role, name: name.to_owned() }
    }

    fn small() -> Arc<Admission> {
        Admission::new(Limits {
            role_connections: |r| match r {
                Role::Client => 3,
                Role::Coordinator => 0,
                _ => 2,
            },
            identity_connections: |_| 2,
            identity_uploads: |_| 2,
            identity_upload_bytes: |_| 100,
        })
    }

    #[test]
    fn one_identity_holds_at_most_its_share_and_others_still_get_in() {
        let a = small();
        let alice = id(Role::Client, "alice");
        let held: Vec<_> = (0..2).map(|_| a.connect(&alice).unwrap()).collect();
        let err = a.connect(&alice).unwrap_err();
        assert!(matches!(err, Refusal::IdentityConnections { limit: 2, .. }), "{err}");
        assert!(err.to_string().contains("`alice` (client) already holds 2"), "{err}");
        // Another developer, and every other role, is unaffected.
        let _bob = a.connect(&id(Role::Client, "bob")).unwrap();
        let _admin = a.connect(&id(Role::Admin, "ops")).unwrap();
        let _worker = a.connect(&id(Role::Worker, "w1")).unwrap();
        drop(held);
        assert_eq!(a.connections_of(&alice), 0);
        let _again = a.connect(&alice).unwrap();
    }

    #[test]
    fn a_full_client_pool_never_takes_admin_or_worker_capacity() {
        let a = small();
        let _c: Vec<_> =
            ["a", "b", "c"].iter().map(|n| a.connect(&id(Role::Client, n)).unwrap()).collect();
        let err = a.connect(&id(Role::Client, "d")).unwrap_err();
        assert!(matches!(err, Refusal::RoleFull { role: Role::Client, limit: 3 }), "{err}");
        let _admins: Vec<_> =
            (0..2).map(|i| a.connect(&id(Role::Admin, &format!("ops{i}"))).unwrap()).collect();
        let _w = a.connect(&id(Role::Worker, "w1")).unwrap();
        assert!(a.connect(&id(Role::Coordinator, "x")).is_err(), "coordinators have no pool");
    }

    #[test]
    fn uploads_are_bounded_in_count_and_bytes_and_given_back() {
        let a = small();
        let alice = id(Role::Client, "alice");
        let u1 = a.upload(&alice, 60).unwrap();
        let err = a.upload(&alice, 41).unwrap_err();
        assert!(matches!(err, Refusal::IdentityUploadBytes { size: 41, limit: 100, .. }), "{err}");
        let u2 = a.upload(&alice, 40).unwrap();
        let err = a.upload(&alice, 0).unwrap_err();
        assert!(matches!(err, Refusal::IdentityUploads { limit: 2, .. }), "{err}");
        // A huge declared size cannot overflow the sum.
        drop(u2);
        assert!(a.upload(&alice, u64::MAX).is_err());
        drop(u1);
        let _u = a.upload(&alice, 100).unwrap();
        // Upload tickets do not count as connections, and the identity's row stays while
        // anything is held.
        assert_eq!(a.connections_of(&alice), 0);
        assert!(a.state().by_identity.contains_key(&alice));
    }

    #[test]
    fn released_identities_leave_no_row() {
        let a = small();
        for i in 0..50 {
            let who = id(Role::Client, &format!("dev{i}"));
            let _c = a.connect(&who).unwrap();
            let _u = a.upload(&who, 1).unwrap();
        }
        let st = a.state();
        assert!(st.by_identity.is_empty(), "{:?}", st.by_identity);
        assert_eq!(st.by_role.get(&Role::Client), Some(&0));
    }

    #[test]
    fn the_default_limits_reserve_capacity_per_role() {
        let l = Limits::default();
        for role in [Role::Worker, Role::Ci, Role::Client, Role::Admin] {
            assert!((l.identity_connections)(role) <= (l.role_connections)(role), "{role}");
            assert!((l.role_connections)(role) > 0, "{role}");
        }
        assert_eq!((l.identity_uploads)(Role::Admin), 0, "admins never upload");
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn gate() -> Arc<Handshakes> {
        Handshakes::new(HandshakeLimits {
            total: 10,
            known_reserve: 4,
            per_source: 2,
            per_known_source: 5,
            known_sources: 3,
        })
    }

    #[test]
    fn one_source_holds_at_most_its_share_of_handshakes() {
        let g = gate();
        let a = ip("10.0.0.9");
        let held: Vec<_> = (0..2).map(|_| g.begin(a).unwrap()).collect();
        assert_eq!(g.begin(a).unwrap_err(), HandshakeRefusal::Source { from: a, limit: 2 });
        // Others still get in; a slot given back is free again.
        let _b = g.begin(ip("10.0.0.10")).unwrap();
        drop(held);
        assert_eq!(g.in_progress(a), (1, 0));
        let _again = g.begin(a).unwrap();
    }

    #[test]
    fn a_flood_from_unknown_sources_leaves_the_reserve_to_known_ones() {
        let g = gate();
        let admin = ip("10.0.0.2");
        g.authenticated(admin);
        // Three unknown hosts take every slot they may: 10 - 4 reserved.
        let flood: Vec<_> = (0..3)
            .flat_map(|h| {
                let g = g.clone();
                (0..2).map(move |_| g.begin(ip(&format!("10.0.1.{h}"))))
            })
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(g.begin(ip("10.0.3.1")).unwrap_err(), HandshakeRefusal::Full { limit: 6 });
        // The known source still gets its handshakes.
        let known: Vec<_> = (0..4).map(|_| g.begin(admin).unwrap()).collect();
        assert_eq!(g.begin(admin).unwrap_err(), HandshakeRefusal::Full { limit: 10 });
        drop((flood, known));
        assert_eq!(g.in_progress(admin), (0, 0));
        assert!(g.state().by_source.is_empty());
    }

    #[test]
    fn known_sources_are_bounded_and_the_least_recent_forgotten() {
        let g = gate();
        for h in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
            g.authenticated(ip(h));
        }
        g.authenticated(ip("10.0.0.1")); // seen again: now the most recent
        g.authenticated(ip("10.0.0.4"));
        let st = g.state();
        assert_eq!(st.known.len(), 3);
        assert!(!st.known.contains_key(&ip("10.0.0.2")), "{:?}", st.known);
        assert!(st.known.contains_key(&ip("10.0.0.1")));
        assert_eq!(st.by_age.len(), 3);
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_ipv4_address_is_itself() {
        assert_eq!(source_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(source_of(ip("2001:db8:1:2:ffff::9")), ip("2001:db8:1:2::"));
        assert_eq!(source_of(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        let g = gate();
        let _a = g.begin(ip("2001:db8::1")).unwrap();
        let _b = g.begin(ip("2001:db8::2")).unwrap();
        assert!(g.begin(ip("2001:db8::3")).is_err(), "one /64, one share");
    }
}
