//! The programs a task's key folds, checked by the bot that runs it. The key holds the
//! client's programs (`binary:<word>`: path and digest) and, by holding none, the words the
//! client found nowhere on its `PATH`. A REAPI bot runs whatever its own `PATH` gives, and
//! its outputs are saved under the client's key: a bot with another `tsc`, or with a `tool`
//! the client lacks (`tool || fallback`), would file bytes the client's machine does not
//! make. prova's own farm workers check this themselves (`worker::exec::programs`); a REAPI
//! action can only carry the check in its command.
//!
//! So the command runs inside a POSIX `sh` guard (`sh -c GUARD sh ARGV…`) that starts it
//! (and each runtime input) under `env -i` with only the environment a prova worker would
//! give the task (the action's variables, which hold the fixed baseline, and the host's
//! `PATH`, `HOME`, …: nothing of a bot's own defaults), and that looks each
//! word up on the bot's `PATH` as a worker does (absolute entries only; an absolute word as
//! is), compares each found program's SHA-256 with the client's (`sha256sum`, else `shasum
//! -a 256`, else `openssl`), and requires each absent word to be absent. A difference before
//! the run fails the action without running it; one after a successful run (the task or a
//! neighbour installed, replaced or removed a program meanwhile) fails it too, so nothing is
//! saved. Both exit [`GUARD_EXIT`] with a line naming the program. The expected digests are
//! in the command text, so a bot's action cache never answers one client's action with
//! another's.

/// The exit status of an action whose guard found a program other than the key's.
pub const GUARD_EXIT: i32 = 125;

/// A program the key folds: the word the command looks up, where the client found it, and
/// the SHA-256 (hex) of its bytes there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedProgram {
    /// The word (`tsc`, or an absolute path).
    pub word: String,
    /// The client's resolved path (for the message).
    pub client_path: String,
    /// Lower-case hex SHA-256 of the client's program.
    pub sha256: String,
}

/// A runtime input the key folds (`runtime = ["node --version"]`): the command, and the
/// SHA-256 (hex) of what it gave on the client ([`runtime_stream`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedRuntime {
    /// The command as written.
    pub command: String,
    /// [`runtime_stream`]'s SHA-256 on the client.
    pub sha256: String,
}

/// What the guard hashes of a runtime command's run: its stdout, then `prova-exit=` and its
/// exit status.
pub fn runtime_stream(stdout: &[u8], code: i32) -> Vec<u8> {
    let mut b = stdout.to_vec();
    b.extend_from_slice(format!("prova-exit={code}").as_bytes());
    b
}

/// What an action's guard checks; empty: no guard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramGuard {
    /// Programs that must be the client's bytes.
    pub programs: Vec<GuardedProgram>,
    /// Bare words the client found nowhere on its `PATH`: nowhere on the bot's either.
    pub absent: Vec<String>,
    /// Runtime inputs that must give what they gave on the client, checked before the run
    /// (as a prova worker checks them), in the input root's top directory as the client ran
    /// them in the workspace's.
    pub runtime: Vec<GuardedRuntime>,
    /// The input root's top relative to the action's working directory (`..` per level of
    /// the project directory; `.` at the top).
    pub root: String,
    /// The names the command may see of the environment the bot started it with (the action's
    /// own and the host's [`HOST_VARS`](prova_protocol::spec::HOST_VARS)): the command and
    /// the runtime inputs run under `env -i` with those alone, so nothing else the bot's
    /// environment holds (its `LC_ALL`, `CI`, `NODE_OPTIONS`, a declared name the client left
    /// unset, a bash's exported functions) reaches them. `None`: the environment is left as
    /// is.
    pub env_keep: Option<Vec<String>>,
}

/// `word` quoted for `sh`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Looks `$1` up as a worker does (an absolute word as is; else each absolute `PATH` entry
/// in order) and prints the executable file found.
const WHICH: &str = r#"prova_which() {
  case $1 in /*) [ -f "$1" ] && [ -x "$1" ] && printf '%s\n' "$1"; return;; esac
  prova_ifs=$IFS; IFS=:; set -f
  for prova_d in $PATH; do
    case $prova_d in /*) ;; *) continue;; esac
    if [ -f "$prova_d/$1" ] && [ -x "$prova_d/$1" ]; then
      IFS=$prova_ifs; set +f; printf '%s\n' "$prova_d/$1"; return 0
    fi
  done
  IFS=$prova_ifs; set +f; return 1
}
prova_sha() {
  if command -v sha256sum >/dev/null 2>&1; then prova_s=$(sha256sum)
  elif command -v shasum >/dev/null 2>&1; then prova_s=$(shasum -a 256)
  else prova_s=$(openssl dgst -sha256 -r)
  fi || return 1
  printf '%s\n' "${prova_s%% *}"
}
prova_memo=${TMPDIR:-/tmp}/prova-guard-sha256
prova_sha_file() {
  prova_st=$(stat -L -c '%d-%i-%s-%Y-%Z' "$1" 2>/dev/null) || prova_st=
  if [ -n "$prova_st" ] && [ -f "$prova_memo/$prova_st" ] && [ ! -L "$prova_memo/$prova_st" ]; then
    IFS= read -r prova_s < "$prova_memo/$prova_st" && [ -n "$prova_s" ] && {
      printf '%s\n' "$prova_s"; return 0; }
  fi
  prova_s=$(prova_sha < "$1") && [ -n "$prova_s" ] || return 1
  prova_now=$(date +%s 2>/dev/null) || prova_now=0
  prova_ct=${prova_st##*-}
  if [ -n "$prova_st" ] && [ "$prova_now" -gt $((prova_ct + 2)) ] 2>/dev/null; then
    mkdir -p "$prova_memo" 2>/dev/null &&
      printf '%s\n' "$prova_s" > "$prova_memo/.$prova_st.$$" 2>/dev/null &&
      mv -f "$prova_memo/.$prova_st.$$" "$prova_memo/$prova_st" 2>/dev/null
  fi
  printf '%s\n' "$prova_s"
}
"#;

impl ProgramGuard {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
            && self.absent.is_empty()
            && self.runtime.is_empty()
            && self.env_keep.is_none()
    }

    /// The guard's `sh` text: a function `prova_check WHEN` that prints why and fails at the
    /// first difference, run before `"$@"` and after a success of it.
    pub fn script(&self) -> String {
        let mut s = String::new();
        // `prova_run`: its arguments run with exactly the kept names of this environment
        // (`env -i`: a bot's own variables, and a bash's exported functions, stay out).
        match &self.env_keep {
            Some(keep) => {
                let ident = |k: &str| {
                    k.bytes().enumerate().all(|(i, b)| {
                        b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit())
                    }) && !k.is_empty()
                };
                if let Some(bad) = keep.iter().find(|k| !ident(k)) {
                    s.push_str(&format!(
                        "printf 'prova: variable %s cannot be passed on a bot\\n' {} >&2; exit \
                         {GUARD_EXIT}\n",
                        quote(bad)
                    ));
                }
                let kept: Vec<String> = keep
                    .iter()
                    .filter(|k| ident(k))
                    .map(|k| format!("${{{k}+\"{k}=${k}\"}}"))
                    .collect();
                s.push_str(&format!(
                    "command -v env >/dev/null 2>&1 || {{ printf 'prova: the action needs env on \
                     this bot to leave its own environment out\\n' >&2; exit {GUARD_EXIT}; }}\n\
                     prova_run() {{ env -i {} \"$@\"; }}\n",
                    kept.join(" ")
                ));
            }
            None => s.push_str("prova_run() { \"$@\"; }\n"),
        }
        s.push_str(WHICH);
        s.push_str("prova_check() {\n");
        for p in &self.programs {
            let (w, client) = (quote(&p.word), quote(&format!("`{}`", p.client_path)));
            let short = &p.sha256[..p.sha256.len().min(12)];
            s.push_str(&format!(
                "  if prova_p=$(prova_which {w}); then\n    \
                 prova_h=$(prova_sha_file \"$prova_p\") || {{ printf 'prova: program `%s` cannot be \
                 hashed on this bot (%s): sha256sum, shasum or openssl is needed\\n' {w} \"$1\" \
                 >&2; return 1; }}\n    \
                 [ \"$prova_h\" = {sha} ] || {{ printf 'prova: program `%s` %s: here `%s` \
                 (sha256 %.12s), on the client %s (sha256 {short})\\n' {w} \"$1\" \"$prova_p\" \
                 \"$prova_h\" {client} >&2; return 1; }}\n  \
                 else\n    \
                 printf 'prova: program `%s` %s: here not found on its PATH, on the client %s \
                 (sha256 {short})\\n' {w} \"$1\" {client} >&2; return 1\n  fi\n",
                sha = quote(&p.sha256),
            ));
        }
        for a in &self.absent {
            let w = quote(a);
            s.push_str(&format!(
                "  if prova_p=$(prova_which {w}); then\n    \
                 printf 'prova: program `%s` %s: here `%s`, on the client found nowhere on its \
                 PATH (the key holds no program for it)\\n' {w} \"$1\" \"$prova_p\" >&2; \
                 return 1\n  fi\n"
            ));
        }
        s.push_str("  return 0\n}\n");
        for r in &self.runtime {
            let script = quote(&prova_protocol::key::runtime_script(&r.command));
            let (c, root) = (quote(&r.command), quote(&self.root));
            let short = &r.sha256[..r.sha256.len().min(12)];
            s.push_str(&format!(
                "prova_h=$( {{ (cd {root} && prova_run sh -c {script}) </dev/null 2>/dev/null; \
                 printf 'prova-exit=%s' \"$?\"; }} | prova_sha ) && [ \"$prova_h\" = {sha} ] || \
                 {{ printf 'prova: runtime input `%s` differs on this bot: here sha256 %.12s, on \
                 the client sha256 {short}\\n' {c} \"$prova_h\" >&2; exit {GUARD_EXIT}; }}\n",
                sha = quote(&r.sha256),
            ));
        }
        s.push_str(&format!(
            "prova_check 'differs on this bot' || exit {GUARD_EXIT}\n\
             prova_run \"$@\"; prova_rc=$?\n\
             if [ \"$prova_rc\" -eq 0 ]; then\n  \
             prova_check 'changed on this bot while the task ran (nothing of the run is \
             saved)' || exit {GUARD_EXIT}\nfi\n\
             exit \"$prova_rc\"\n"
        ));
        s
    }

    /// `argv` run inside the guard (unchanged when there is nothing to check).
    pub fn wrap(&self, argv: Vec<String>) -> Vec<String> {
        if self.is_empty() {
            return argv;
        }
        let mut wrapped = vec!["sh".to_owned(), "-c".to_owned(), self.script(), "sh".to_owned()];
        wrapped.extend(argv);
        wrapped
    }
}

/// What a guard that failed an action said (its last `prova: ` line of the log, without the
/// prefix), if it did.
pub fn reason(log: &[u8]) -> Option<String> {
    String::from_utf8_lossy(log)
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("prova: ").map(str::to_owned))
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
