//! `[cache.reapi]` of the workspace's `prova.toml`: where the REAPI cache layer
//! (`crate::layers::reapi`) connects, resolved (paths made absolute, the timeout parsed, the
//! token read). The workspace loader only checks the table's shape; a run that asks for the
//! layer (`--cache …,reapi:rw`) reads it here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::schema::{ReapiTable, UploadValue};

/// Where and how to reach a REAPI server (`[cache.reapi]`, resolved by
/// [`load`]).
#[derive(Clone)]
pub struct ReapiConfig {
    /// The server.
    pub endpoint: Endpoint,
    /// The REAPI instance name.
    pub instance_name: String,
    /// A bearer token sent on every call (never printed).
    pub token: Option<String>,
    /// Per-call timeout (and the connect timeout).
    pub timeout: Duration,
    /// A PEM CA bundle for `grpcs://`.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate (mutual TLS).
    pub cert_file: Option<PathBuf>,
    /// Its PEM key.
    pub key_file: Option<PathBuf>,
    /// Which runs write results to the server.
    pub upload: Upload,
}

/// `[cache.reapi] upload`: which runs call `UpdateActionResult`. A REAPI cache is shared by
/// everyone who can reach it, so by default only CI writes and a developer's run reads —
/// the farm's trust tiers (`ci` writes, `client` reads) for a cache prova does not run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Upload {
    /// Runs with `CI` set (to anything but empty, `0` or `false`).
    #[default]
    Ci,
    /// Every run.
    Always,
    /// No run: the server is only read.
    Never,
}

impl Upload {
    /// Whether a run writes, given the value of `$CI` (`None` when unset).
    pub fn writes(self, ci: Option<&str>) -> bool {
        match self {
            Self::Always => true,
            Self::Never => false,
            Self::Ci => {
                ci.is_some_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE" | "False"))
            }
        }
    }
}

impl std::fmt::Debug for ReapiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReapiConfig")
            .field("endpoint", &self.endpoint.to_string())
            .field("instance_name", &self.instance_name)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// `grpc://host:port` or `grpcs://host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `grpcs://`.
    pub tls: bool,
    /// `host:port`.
    pub authority: String,
}

/// An endpoint that is not `grpc://HOST:PORT` or `grpcs://HOST:PORT`, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: want grpc://HOST:PORT or grpcs://HOST:PORT")]
pub struct BadEndpoint(pub String);

impl Endpoint {
    /// Parses `grpc://host:port` / `grpcs://host:port`.
    pub fn parse(s: &str) -> Result<Self, BadEndpoint> {
        let (tls, rest) = if let Some(r) = s.strip_prefix("grpcs://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("grpc://") {
            (false, r)
        } else {
            return Err(BadEndpoint(s.to_owned()));
        };
        let rest = rest.trim_end_matches('/');
        let port_ok =
            rest.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !port_ok || rest.contains('/') {
            return Err(BadEndpoint(s.to_owned()));
        }
        Ok(Self { tls, authority: rest.to_owned() })
    }

    /// The URI tonic dials.
    pub fn uri(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.authority)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", if self.tls { "grpcs" } else { "grpc" }, self.authority)
    }
}

/// Default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `[cache.reapi]` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReapiConfigError {
    /// The file could not be read or parsed.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A value is wrong.
    #[error("[{table}] {key}: {reason}")]
    Value {
        /// `cache.reapi` or `exec.reapi`.
        table: &'static str,
        /// The key.
        key: &'static str,
        /// Why.
        reason: String,
    },
}

#[derive(Deserialize)]
struct Top {
    cache: Option<Cache>,
    exec: Option<Exec>,
}

#[derive(Deserialize)]
struct Exec {
    reapi: Option<super::schema::ExecReapiTable>,
}

#[derive(Deserialize)]
struct Cache {
    reapi: Option<ReapiTable>,
}

/// The `[cache.reapi]` table of `root/prova.toml`, resolved; `None` when absent.
pub fn load(root: &Path) -> Result<Option<ReapiConfig>, ReapiConfigError> {
    let path = root.join("prova.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ReapiConfigError::File { path: path.clone(), reason: e.to_string() })?;
    parse(root, &text).map_err(|e| match e {
        ReapiConfigError::File { reason, .. } => ReapiConfigError::File { path, reason },
        other => other,
    })
}

/// [`load`] of the file's text.
pub fn parse(root: &Path, text: &str) -> Result<Option<ReapiConfig>, ReapiConfigError> {
    let top: Top = toml::from_str(text)
        .map_err(|e| ReapiConfigError::File { path: PathBuf::new(), reason: e.to_string() })?;
    let Some(t) = top.cache.and_then(|c| c.reapi) else { return Ok(None) };
    resolve(root, t, "cache.reapi").map(Some)
}

/// The `[exec.reapi]` table of `root/prova.toml` (the REAPI farm `--remote-exec` executes
/// on), resolved; `None` when absent. `endpoint` (`--remote-exec URL`) replaces the table's
/// endpoint, or stands alone without a table.
pub fn load_exec(
    root: &Path,
    endpoint: Option<&str>,
) -> Result<Option<ReapiConfig>, ReapiConfigError> {
    let path = root.join("prova.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ReapiConfigError::File { path: path.clone(), reason: e.to_string() })?;
    parse_exec(root, &text, endpoint).map_err(|e| match e {
        ReapiConfigError::File { reason, .. } => ReapiConfigError::File { path, reason },
        other => other,
    })
}

/// [`load_exec`] of the file's text.
pub fn parse_exec(
    root: &Path,
    text: &str,
    endpoint: Option<&str>,
) -> Result<Option<ReapiConfig>, ReapiConfigError> {
    let top: Top = toml::from_str(text)
        .map_err(|e| ReapiConfigError::File { path: PathBuf::new(), reason: e.to_string() })?;
    let table = top.exec.and_then(|e| e.reapi).map(ReapiTable::from);
    let t = match (table, endpoint) {
        (None, None) => return Ok(None),
        (Some(t), None) => t,
        (Some(t), Some(e)) => ReapiTable { endpoint: e.to_owned(), ..t },
        (None, Some(e)) => ReapiTable { endpoint: e.to_owned(), ..Default::default() },
    };
    resolve(root, t, "exec.reapi").map(Some)
}

fn resolve(
    root: &Path,
    t: ReapiTable,
    table: &'static str,
) -> Result<ReapiConfig, ReapiConfigError> {
    let endpoint = Endpoint::parse(&t.endpoint).map_err(|e| ReapiConfigError::Value {
        table,
        key: "endpoint",
        reason: e.to_string(),
    })?;
    let timeout = match &t.timeout {
        None => DEFAULT_TIMEOUT,
        Some(s) => match humantime::parse_duration(s) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                return Err(ReapiConfigError::Value {
                    table,
                    key: "timeout",
                    reason: "must be longer than zero".to_owned(),
                });
            }
            Err(e) => {
                return Err(ReapiConfigError::Value {
                    table,
                    key: "timeout",
                    reason: e.to_string(),
                });
            }
        },
    };
    if t.token_file.is_some() && t.token_env.is_some() {
        return Err(ReapiConfigError::Value {
            table,
            key: "token_file",
            reason: "set token_file or token_env, not both".to_owned(),
        });
    }
    if t.cert_file.is_some() != t.key_file.is_some() {
        return Err(ReapiConfigError::Value {
            table,
            key: "cert_file",
            reason: "a client certificate needs both cert_file and key_file".to_owned(),
        });
    }
    if !endpoint.tls && (t.ca_file.is_some() || t.cert_file.is_some()) {
        return Err(ReapiConfigError::Value {
            table,
            key: "endpoint",
            reason: "TLS files are set but the endpoint is grpc:// (use grpcs://)".to_owned(),
        });
    }
    let upload = match t.upload {
        None => Upload::default(),
        Some(UploadValue::Ci) => Upload::Ci,
        Some(UploadValue::Always) => Upload::Always,
        Some(UploadValue::Never) => Upload::Never,
    };
    let abs = |p: &Option<String>| p.as_ref().map(|p| root.join(p));
    let token = match (&t.token_file, &t.token_env) {
        (Some(f), _) => {
            let path = root.join(f);
            let text = std::fs::read_to_string(&path).map_err(|e| ReapiConfigError::Value {
                table,
                key: "token_file",
                reason: format!("{}: {e}", path.display()),
            })?;
            Some(text.trim().to_owned())
        }
        (None, Some(var)) => Some(std::env::var(var).map_err(|_| ReapiConfigError::Value {
            table,
            key: "token_env",
            reason: format!("${var} is not set"),
        })?),
        (None, None) => None,
    };
    Ok(ReapiConfig {
        endpoint,
        instance_name: t.instance_name,
        token,
        timeout,
        ca_file: abs(&t.ca_file),
        cert_file: abs(&t.cert_file),
        key_file: abs(&t.key_file),
        upload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("/ws"), text).unwrap_err().to_string()
    }

    #[test]
    fn exec_reapi_takes_the_flag_or_the_table_and_names_its_table() {
        let root = Path::new("/ws");
        assert!(parse_exec(root, "[workspace]\n", None).unwrap().is_none());
        let flag = parse_exec(root, "[workspace]\n", Some("grpc://h:1")).unwrap().unwrap();
        assert_eq!(flag.endpoint.to_string(), "grpc://h:1");
        let text = "[exec.reapi]\nendpoint = \"grpc://t:2\"\ninstance_name = \"main\"\n";
        let table = parse_exec(root, text, None).unwrap().unwrap();
        assert_eq!(
            (table.endpoint.to_string().as_str(), table.instance_name.as_str()),
            ("grpc://t:2", "main")
        );
        let both = parse_exec(root, text, Some("grpcs://f:3")).unwrap().unwrap();
        assert_eq!(
            (both.endpoint.to_string().as_str(), both.instance_name.as_str()),
            ("grpcs://f:3", "main")
        );
        let e = parse_exec(root, "[workspace]\n", Some("http://h:1")).unwrap_err().to_string();
        assert!(e.starts_with("[exec.reapi] endpoint:"), "{e}");
        let e =
            parse_exec(root, "[exec.reapi]\nendpoint = \"grpc://h:1\"\nupload = \"ci\"\n", None);
        assert!(e.is_err(), "upload is a cache key only");
    }

    #[test]
    fn absent_table_is_none() {
        assert!(parse(Path::new("/ws"), "[workspace]\n").unwrap().is_none());
    }

    #[test]
    fn a_full_table_resolves() {
        let text = "[cache.reapi]\nendpoint = \"grpcs://cache.example:8980\"\n\
                    instance_name = \"main\"\ntimeout = \"5s\"\nca_file = \"ca.pem\"\n";
        let c = parse(Path::new("/ws"), text).unwrap().unwrap();
        assert_eq!((c.endpoint.tls, c.endpoint.authority.as_str()), (true, "cache.example:8980"));
        assert_eq!(c.instance_name, "main");
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.ca_file, Some(PathBuf::from("/ws/ca.pem")));
        assert!(c.token.is_none());
        assert_eq!(c.upload, Upload::Ci, "by default only CI writes");
    }

    #[test]
    fn upload_says_which_runs_write() {
        let up = |v: &str| {
            let text = format!("[cache.reapi]\nendpoint = \"grpc://h:1\"\nupload = \"{v}\"\n");
            parse(Path::new("/ws"), &text).map(|c| c.map(|c| c.upload))
        };
        assert_eq!(up("always").unwrap(), Some(Upload::Always));
        assert_eq!(up("never").unwrap(), Some(Upload::Never));
        let e = up("sometimes").unwrap_err().to_string();
        assert!(e.contains("upload") && e.contains("sometimes"), "{e}");
        for (ci, writes) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some("true"), true),
            (Some("1"), true),
            (Some("github"), true),
        ] {
            assert_eq!(Upload::Ci.writes(ci), writes, "CI={ci:?}");
            assert!(Upload::Always.writes(ci) && !Upload::Never.writes(ci));
        }
    }

    #[test]
    fn bad_values_are_named() {
        let ep = |e: &str| err(&format!("[cache.reapi]\nendpoint = \"{e}\"\n"));
        assert!(ep("http://x:1").contains("[cache.reapi] endpoint"), "{}", ep("http://x:1"));
        assert!(ep("grpc://").contains("endpoint"));
        let t = err("[cache.reapi]\nendpoint = \"grpc://h:1\"\ntimeout = \"0s\"\n");
        assert!(t.contains("timeout"), "{t}");
        let both = err(
            "[cache.reapi]\nendpoint = \"grpc://h:1\"\ntoken_file = \"a\"\ntoken_env = \"B\"\n",
        );
        assert!(both.contains("not both"), "{both}");
        let half = err("[cache.reapi]\nendpoint = \"grpcs://h:1\"\ncert_file = \"c.pem\"\n");
        assert!(half.contains("key_file"), "{half}");
        let plain = err("[cache.reapi]\nendpoint = \"grpc://h:1\"\nca_file = \"c.pem\"\n");
        assert!(plain.contains("grpcs://"), "{plain}");
        let unknown = err("[cache.reapi]\nendpoint = \"grpc://h:1\"\nendpont = 1\n");
        assert!(unknown.contains("endpont"), "{unknown}");
    }

    #[test]
    fn a_missing_token_file_is_an_error_without_its_contents() {
        let e = err("[cache.reapi]\nendpoint = \"grpc://h:1\"\ntoken_file = \"/nonexistent/t\"\n");
        assert!(e.contains("token_file") && e.contains("/nonexistent/t"), "{e}");
    }
}
