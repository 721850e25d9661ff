//! Newtype identifiers. Every id that crosses a boundary has its own type so a worker id can
//! never be passed where a task id is meant.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A task's id: `project#task`, e.g. `web#build`. Project names may contain `/` and `@`
/// (npm scopes) but never `#`; the task name is what follows the last `#`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    /// The id of task `task` of project `project`.
    pub fn new(project: &str, task: &str) -> Self {
        Self(format!("{project}#{task}"))
    }

    /// Parses `project#task`; `None` when there is no `#` or either side is empty.
    pub fn parse(s: &str) -> Option<Self> {
        let (p, t) = s.rsplit_once('#')?;
        (!p.is_empty() && !t.is_empty()).then(|| Self(s.to_owned()))
    }

    /// The project part.
    pub fn project(&self) -> &str {
        self.0.rsplit_once('#').map_or("", |(p, _)| p)
    }

    /// The task-name part.
    pub fn task(&self) -> &str {
        self.0.rsplit_once('#').map_or(self.0.as_str(), |(_, t)| t)
    }

    /// The whole id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.0)
    }
}

macro_rules! numeric_id {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Debug)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

numeric_id!(
    /// One submitted run (one `prova run`), unique within a coordinator's lifetime.
    RunId,
    "run-"
);
numeric_id!(
    /// One attempt at executing a task: the lease a worker holds. A report carrying an attempt
    /// id the coordinator no longer considers live is refused.
    AttemptId,
    "attempt-"
);

/// A worker's id: its certificate's name in the farm, `local` for the in-process worker.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Debug)]
#[serde(transparent)]
pub struct WorkerId(pub String);

impl WorkerId {
    /// The id of the in-process worker of local mode.
    pub fn local() -> Self {
        Self("local".to_owned())
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_id_parts() {
        let id = TaskId::new("@scope/web", "build");
        assert_eq!(id.project(), "@scope/web");
        assert_eq!(id.task(), "build");
        assert_eq!(TaskId::parse("a#b#c").unwrap().project(), "a#b");
        assert!(TaskId::parse("nohash").is_none());
        assert!(TaskId::parse("#x").is_none());
        assert!(TaskId::parse("x#").is_none());
    }
}
