//! The bot's side of lease synchronisation, without I/O: what the leases of a `BotSession`
//! the server returned mean for a bot that runs at most one lease at a time — start a new
//! one (accepting it: `ACTIVE`), cancel the running one (the server says `CANCELLED`, or no
//! longer lists it) — and how a finished lease is reported (`COMPLETED`, with its status and
//! `ActionResult`).

use prost::Message;
use prova_reapi_proto::bots::{BotSession, Lease, LeaseState};
use prova_reapi_proto::google::rpc;
use prova_reapi_proto::re;

/// What the bot does after an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing changes.
    Keep,
    /// Start this lease (it is now `ACTIVE` in the session).
    Start {
        /// Its id.
        id: String,
        /// What to run.
        payload: Payload,
    },
    /// Stop the running lease: the server cancelled it or gave it to another bot.
    Cancel,
}

/// A lease's payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// The action itself.
    Action(re::Action),
    /// The action's digest (the action is in the CAS).
    Digest(re::Digest),
    /// Something this bot does not understand.
    Unknown(String),
}

const ACTION: &str = "build.bazel.remote.execution.v2.Action";
const DIGEST: &str = "build.bazel.remote.execution.v2.Digest";

/// The payload of `lease`.
pub fn payload(lease: &Lease) -> Payload {
    let Some(any) = &lease.payload else { return Payload::Unknown("no payload".into()) };
    let name = any.type_url.rsplit('/').next().unwrap_or_default();
    match name {
        ACTION => re::Action::decode(any.value.as_slice())
            .map_or_else(|e| Payload::Unknown(e.to_string()), Payload::Action),
        DIGEST => re::Digest::decode(any.value.as_slice())
            .map_or_else(|e| Payload::Unknown(e.to_string()), Payload::Digest),
        other => Payload::Unknown(format!("a payload of type `{other}`")),
    }
}

/// What `session` (as the server returned it) means for a bot running lease `running`.
/// Accepting a new lease marks it `ACTIVE` in `session`; leases the bot will not run (a
/// second one while busy) are left as they are, for the server to give elsewhere.
pub fn plan(session: &mut BotSession, running: Option<&str>) -> Plan {
    if let Some(id) = running {
        let mine = session.leases.iter().find(|l| l.id == id);
        return match mine.map(|l| LeaseState::try_from(l.state)) {
            Some(Ok(LeaseState::Pending | LeaseState::Active)) => Plan::Keep,
            _ => {
                session.leases.retain(|l| l.id != id);
                Plan::Cancel
            }
        };
    }
    // Cancelled or completed leases the server still lists are forgotten.
    session.leases.retain(|l| {
        matches!(LeaseState::try_from(l.state), Ok(LeaseState::Pending | LeaseState::Active))
    });
    let Some(lease) = session.leases.first_mut() else { return Plan::Keep };
    lease.state = LeaseState::Active as i32;
    Plan::Start { id: lease.id.clone(), payload: payload(lease) }
}

/// Marks lease `id` of `session` completed with `status` (code 0: ran) and `result`.
pub fn complete(
    session: &mut BotSession,
    id: &str,
    status: rpc::Status,
    result: Option<re::ActionResult>,
) {
    for l in session.leases.iter_mut().filter(|l| l.id == id) {
        l.state = LeaseState::Completed as i32;
        l.status = Some(status.clone());
        l.result = result.as_ref().map(|r| prost_types::Any {
            type_url: "type.googleapis.com/build.bazel.remote.execution.v2.ActionResult".into(),
            value: r.encode_to_vec(),
        });
    }
}

/// After the server took a completed report: completed leases leave the session.
pub fn forget_completed(session: &mut BotSession) {
    session.leases.retain(|l| l.state != LeaseState::Completed as i32);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: &str, state: LeaseState) -> Lease {
        let action = re::Action { do_not_cache: false, ..Default::default() };
        Lease {
            id: id.into(),
            payload: Some(prost_types::Any {
                type_url: format!("type.googleapis.com/{ACTION}"),
                value: action.encode_to_vec(),
            }),
            result: None,
            state: state as i32,
            status: None,
        }
    }

    fn session(leases: Vec<Lease>) -> BotSession {
        BotSession { leases, ..Default::default() }
    }

    #[test]
    fn an_idle_bot_accepts_the_first_offered_lease() {
        let mut s = session(vec![lease("a", LeaseState::Pending), lease("b", LeaseState::Pending)]);
        match plan(&mut s, None) {
            Plan::Start { id, payload: Payload::Action(_) } => assert_eq!(id, "a"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.leases[0].state, LeaseState::Active as i32);
        assert_eq!(s.leases[1].state, LeaseState::Pending as i32, "not taken");
        assert_eq!(plan(&mut session(vec![]), None), Plan::Keep);
    }

    #[test]
    fn a_busy_bot_keeps_its_lease_and_stops_when_it_is_cancelled_or_gone() {
        let mut s = session(vec![lease("a", LeaseState::Active)]);
        assert_eq!(plan(&mut s, Some("a")), Plan::Keep);
        let mut s = session(vec![lease("a", LeaseState::Cancelled)]);
        assert_eq!(plan(&mut s, Some("a")), Plan::Cancel);
        assert!(s.leases.is_empty());
        let mut s = session(vec![lease("b", LeaseState::Pending)]);
        assert_eq!(plan(&mut s, Some("a")), Plan::Cancel, "reassigned elsewhere");
    }

    #[test]
    fn cancelled_leases_are_never_started() {
        let mut s = session(vec![lease("a", LeaseState::Cancelled)]);
        assert_eq!(plan(&mut s, None), Plan::Keep);
        assert!(s.leases.is_empty());
    }

    #[test]
    fn payloads_are_an_action_a_digest_or_refused() {
        let mut l = lease("a", LeaseState::Pending);
        assert!(matches!(payload(&l), Payload::Action(_)));
        l.payload = Some(prost_types::Any {
            type_url: format!("type.googleapis.com/{DIGEST}"),
            value: re::Digest { hash: "ab".into(), size_bytes: 2 }.encode_to_vec(),
        });
        assert!(matches!(payload(&l), Payload::Digest(d) if d.hash == "ab"));
        l.payload = Some(prost_types::Any { type_url: "x/y.Z".into(), value: vec![] });
        assert!(matches!(payload(&l), Payload::Unknown(_)));
        l.payload = None;
        assert!(matches!(payload(&l), Payload::Unknown(_)));
    }

    #[test]
    fn a_completed_lease_carries_its_status_and_result_then_leaves() {
        let mut s = session(vec![lease("a", LeaseState::Active)]);
        let r = re::ActionResult { exit_code: 3, ..Default::default() };
        complete(&mut s, "a", rpc::Status { code: 0, message: String::new() }, Some(r.clone()));
        assert_eq!(s.leases[0].state, LeaseState::Completed as i32);
        let any = s.leases[0].result.clone().unwrap();
        assert_eq!(re::ActionResult::decode(any.value.as_slice()).unwrap(), r);
        forget_completed(&mut s);
        assert!(s.leases.is_empty());
    }
}
