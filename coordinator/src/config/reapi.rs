//! `[cache.reapi]` of the workspace's `prova.toml`: where the REAPI cache layer
//! (`crate::layers::reapi`) connects, resolved (paths made absolute, the timeout parsed, the
//! token read). The workspace loader only checks the table's shape; a run that asks for the
//! layer (`--cache …,reapi:rw`) reads it here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::schema::{ReapiTable, UploadValue};
use crate::layers::reapi::{Endpoint, ReapiConfig, Upload};

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
