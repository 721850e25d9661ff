//! The cluster CA and per-peer bundles (`prova certs`), and the [`Identity`] a certificate
//! carries.
//!
//! Layout under the certs directory:
//! - `ca/ca.pem`, `ca/ca.key` — the cluster CA (the key is mode 0600 and never leaves here);
//! - `<name>/ca.pem`, `<name>/cert.pem`, `<name>/key.pem` — one bundle per peer; `coordinator/`
//!   is created by [`init`], the rest by [`issue`].
//!
//! The role is bound to the certificate twice — subject `OU=<role>` and SAN URI
//! `urn:prova:role:<role>` — and [`identity_of`] requires both to agree, so a certificate
//! cannot claim one role to a human reading the subject and another to the server.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::x509::AttributeTypeAndValue;

use super::TransportError;

/// How long the cluster CA is valid: rotating it means re-issuing every bundle, so it is long.
pub const CA_VALIDITY: Duration = Duration::days(10 * 365);
/// How long a peer certificate is valid: short enough that a leaked key expires on its own.
pub const LEAF_VALIDITY: Duration = Duration::days(365);
/// Certificates are valid from this long before issue, so a peer whose clock is a little behind
/// the issuer's does not reject a fresh certificate.
pub const CLOCK_SKEW: Duration = Duration::hours(1);
/// The SAN URI prefix binding a role to a certificate: `urn:prova:role:<role>`.
pub const ROLE_URN_PREFIX: &str = "urn:prova:role:";
/// The CA's directory under the certs directory.
pub const CA_DIR: &str = "ca";
/// The coordinator's bundle name (and directory) created by [`init`].
pub const COORDINATOR_NAME: &str = "coordinator";
/// The CA certificate, in `ca/` and in every bundle.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's private key, in `ca/` only.
pub const CA_KEY_FILE: &str = "ca.key";
/// A bundle's certificate chain (leaf first).
pub const CERT_FILE: &str = "cert.pem";
/// A bundle's private key.
pub const KEY_FILE: &str = "key.pem";
/// The longest bundle name: it is a directory name and a certificate CN (≤ 64 by X.520).
pub const MAX_NAME_LEN: usize = 64;

/// What a peer is allowed to do; bound to its certificate (brief §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The farm's server.
    Coordinator,
    /// Runs tasks.
    Worker,
    /// A trusted CI client: its entries land in the trusted tier.
    Ci,
    /// An untrusted client (e.g. pull requests): its entries stay in the untrusted namespace.
    Client,
    /// Operates the farm.
    Admin,
}

impl Role {
    /// Every role, in declaration order.
    pub const ALL: [Role; 5] =
        [Role::Coordinator, Role::Worker, Role::Ci, Role::Client, Role::Admin];

    /// The lowercase name used in certificates, files and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
            Role::Ci => "ci",
            Role::Client => "client",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no role.
#[derive(Debug, thiserror::Error)]
#[error("unknown role {0:?} (want coordinator, worker, ci, client or admin)")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| UnknownRole(s.to_owned()))
    }
}

/// Who a certificate says its holder is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// What the holder may do.
    pub role: Role,
    /// The bundle name (the certificate's CN), e.g. `w1`.
    pub name: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.role, self.name)
    }
}

/// One peer's credentials: the cluster CA it trusts, its certificate chain and key.
pub struct Bundle {
    /// The cluster CA: the only root this peer trusts.
    pub ca: CertificateDer<'static>,
    /// This peer's chain, leaf first.
    pub cert: Vec<CertificateDer<'static>>,
    /// This peer's private key.
    pub key: PrivateKeyDer<'static>,
    /// Who the leaf says this peer is.
    pub identity: Identity,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Bundle").field("identity", &self.identity).finish_non_exhaustive()
    }
}

impl Bundle {
    /// Reads `dir/{ca.pem, cert.pem, key.pem}`.
    pub fn load(dir: &Path) -> Result<Bundle, TransportError> {
        let ca_path = dir.join(CA_CERT_FILE);
        let ca = CertificateDer::from_pem_slice(&read(&ca_path)?).map_err(pem_err(&ca_path))?;
        let cert_path = dir.join(CERT_FILE);
        let cert = CertificateDer::pem_slice_iter(&read(&cert_path)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem_err(&cert_path))?;
        let Some(leaf) = cert.first() else {
            return Err(pem_err(&cert_path)(rustls::pki_types::pem::Error::NoItemsFound));
        };
        let identity = identity_of(leaf)?;
        let key_path = dir.join(KEY_FILE);
        let key = PrivateKeyDer::from_pem_slice(&read(&key_path)?).map_err(pem_err(&key_path))?;
        if let Ok(meta) = fs::metadata(&key_path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(path = %key_path.display(), "private key is readable by others; chmod 600 it");
        }
        Ok(Bundle { ca, cert, key, identity })
    }
}

/// Creates the cluster CA in `dir/ca/` and the coordinator's bundle in `dir/coordinator/`,
/// whose certificate names `sans` (DNS names or IP addresses; by default `localhost`,
/// `127.0.0.1` and this machine's hostname). Refuses to overwrite an existing CA or bundle.
pub fn init(dir: &Path, sans: &[String]) -> Result<(), TransportError> {
    let ca_dir = dir.join(CA_DIR);
    let coordinator_dir = dir.join(COORDINATOR_NAME);
    for path in [ca_dir.join(CA_CERT_FILE), ca_dir.join(CA_KEY_FILE)] {
        refuse_existing(&path)?;
    }
    refuse_existing_bundle(&coordinator_dir)?;
    let sans = resolve_sans(Role::Coordinator, sans)?;

    let key = KeyPair::generate().map_err(TransportError::rcgen("CA key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::OrganizationName, "prova");
    // Named after its key, so two clusters' CAs are told apart (by people and by verifiers,
    // which then report an unknown issuer rather than a bad signature).
    let key_id = crate::digest::Digest::of(key.public_key_raw()).short();
    params.distinguished_name.push(DnType::CommonName, format!("prova cluster CA {key_id}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + CA_VALIDITY;
    let cert = params.self_signed(&key).map_err(TransportError::rcgen("CA certificate"))?;

    make_dir(&ca_dir)?;
    write_new(&ca_dir.join(CA_KEY_FILE), key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&ca_dir.join(CA_CERT_FILE), cert.pem().as_bytes(), 0o644)?;
    let issuer = Issuer::new(params, key);
    write_bundle(&coordinator_dir, &cert.pem(), Role::Coordinator, COORDINATOR_NAME, &sans, &issuer)
}

/// Issues a bundle `dir/<name>/` for `role`, signed by the CA in `dir/ca/`. A coordinator's
/// certificate gets the default SANs (see [`issue_with_sans`] to choose them). Refuses to
/// overwrite an existing bundle.
pub fn issue(dir: &Path, role: Role, name: &str) -> Result<PathBuf, TransportError> {
    issue_with_sans(dir, role, name, &[])
}

/// [`issue`] with explicit SANs (DNS names or IP addresses) — for a coordinator on another
/// host. Empty `sans` means the defaults for a coordinator and none for other roles.
pub fn issue_with_sans(
    dir: &Path,
    role: Role,
    name: &str,
    sans: &[String],
) -> Result<PathBuf, TransportError> {
    check_name(name)?;
    let bundle_dir = dir.join(name);
    refuse_existing_bundle(&bundle_dir)?;
    let sans = resolve_sans(role, sans)?;
    let ca_dir = dir.join(CA_DIR);
    let ca_cert_path = ca_dir.join(CA_CERT_FILE);
    let ca_pem = read(&ca_cert_path)?;
    let ca_der = CertificateDer::from_pem_slice(&ca_pem).map_err(pem_err(&ca_cert_path))?;
    let ca_key_path = ca_dir.join(CA_KEY_FILE);
    let ca_key_pem = String::from_utf8(read(&ca_key_path)?).map_err(|_| TransportError::Pem {
        path: ca_key_path.clone(),
        message: "not UTF-8 PEM".into(),
    })?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(TransportError::rcgen("reading CA key"))?;
    let issuer = Issuer::from_ca_cert_der(&ca_der, ca_key)
        .map_err(TransportError::rcgen("reading CA certificate"))?;
    let ca_pem = String::from_utf8_lossy(&ca_pem).into_owned();
    write_bundle(&bundle_dir, &ca_pem, role, name, &sans, &issuer)?;
    Ok(bundle_dir)
}

/// Reads the identity (role + name) a certificate carries: CN = name, OU = role, and a SAN URI
/// `urn:prova:role:<role>` that must agree with the OU.
pub fn identity_of(cert_der: &[u8]) -> Result<Identity, TransportError> {
    let bad = TransportError::BadCertificate;
    let (rest, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| bad(format!("not an X.509 certificate: {e}")))?;
    if !rest.is_empty() {
        return Err(bad(format!("{} trailing bytes after the certificate", rest.len())));
    }
    let subject = cert.subject();
    let name = single_attr(subject.iter_common_name(), "CN")?;
    let ou = single_attr(subject.iter_organizational_unit(), "OU")?;
    let sans = cert
        .subject_alternative_name()
        .map_err(|e| bad(format!("subject alternative names: {e}")))?
        .ok_or_else(|| bad("no subject alternative names (no role URI)".into()))?;
    let mut role_uris = sans.value.general_names.iter().filter_map(|gn| match gn {
        GeneralName::URI(uri) => uri.strip_prefix(ROLE_URN_PREFIX),
        _ => None,
    });
    let (Some(uri_role), None) = (role_uris.next(), role_uris.next()) else {
        return Err(bad(format!("want exactly one {ROLE_URN_PREFIX}<role> URI")));
    };
    let role: Role = uri_role.parse().map_err(|e: UnknownRole| bad(e.to_string()))?;
    if ou != role.as_str() {
        return Err(bad(format!("subject OU {ou:?} disagrees with role URI {role}")));
    }
    check_name(&name).map_err(|e| bad(format!("CN: {e}")))?;
    Ok(Identity { role, name })
}

fn single_attr<'a>(
    mut values: impl Iterator<Item = &'a AttributeTypeAndValue<'a>>,
    what: &str,
) -> Result<String, TransportError> {
    let bad = TransportError::BadCertificate;
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(bad(format!("want exactly one subject {what}")));
    };
    value.as_str().map(str::to_owned).map_err(|e| bad(format!("subject {what}: {e}")))
}

/// This machine's default coordinator SANs: `localhost`, `127.0.0.1` and the hostname (when it
/// is a valid DNS name).
pub fn default_sans() -> Vec<String> {
    let mut sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).or_else(|| {
        fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_owned())
    });
    if let Some(host) = host
        && !host.is_empty()
        && !sans.contains(&host)
        && ServerName::try_from(host.as_str()).is_ok()
    {
        sans.push(host);
    }
    sans
}

fn resolve_sans(role: Role, sans: &[String]) -> Result<Vec<String>, TransportError> {
    let sans = match (sans.is_empty(), role) {
        (true, Role::Coordinator) => default_sans(),
        _ => sans.to_vec(),
    };
    for san in &sans {
        if ServerName::try_from(san.as_str()).is_err() {
            return Err(TransportError::BadName {
                name: san.clone(),
                why: "not a DNS name or IP address",
            });
        }
    }
    Ok(sans)
}

/// A bundle name is a directory name and a CN: ASCII letters, digits, `.`, `_`, `-`, starting
/// with a letter or digit; `ca` is the CA's directory.
fn check_name(name: &str) -> Result<(), TransportError> {
    let why = if name.is_empty() || name.len() > MAX_NAME_LEN {
        Some("want 1 to 64 characters")
    } else if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("want ASCII letters, digits, '.', '_' or '-', starting with a letter or digit")
    } else if name == CA_DIR {
        Some("reserved for the CA")
    } else {
        None
    };
    match why {
        Some(why) => Err(TransportError::BadName { name: name.to_owned(), why }),
        None => Ok(()),
    }
}

fn write_bundle(
    bundle_dir: &Path,
    ca_pem: &str,
    role: Role,
    name: &str,
    sans: &[String],
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(), TransportError> {
    let mut params =
        CertificateParams::new(sans.to_vec()).map_err(TransportError::rcgen("subject names"))?;
    let uri = Ia5String::try_from(format!("{ROLE_URN_PREFIX}{role}"))
        .map_err(TransportError::rcgen("role URI"))?;
    params.subject_alt_names.push(SanType::URI(uri));
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::OrganizationName, "prova");
    params.distinguished_name.push(DnType::OrganizationalUnitName, role.as_str());
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = match role {
        Role::Coordinator => {
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth]
        }
        _ => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    params.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + LEAF_VALIDITY;
    let key = KeyPair::generate().map_err(TransportError::rcgen("peer key"))?;
    let cert = params.signed_by(&key, issuer).map_err(TransportError::rcgen("peer certificate"))?;

    make_dir(bundle_dir)?;
    write_new(&bundle_dir.join(KEY_FILE), key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&bundle_dir.join(CERT_FILE), cert.pem().as_bytes(), 0o644)?;
    write_new(&bundle_dir.join(CA_CERT_FILE), ca_pem.as_bytes(), 0o644)
}

fn refuse_existing(path: &Path) -> Result<(), TransportError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Err(TransportError::AlreadyExists { path: path.to_owned() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(TransportError::io(path)(e)),
    }
}

fn refuse_existing_bundle(dir: &Path) -> Result<(), TransportError> {
    [KEY_FILE, CERT_FILE, CA_CERT_FILE].iter().try_for_each(|f| refuse_existing(&dir.join(f)))
}

/// Creates `dir` (and parents) private to the owner: it will hold a key.
fn make_dir(dir: &Path) -> Result<(), TransportError> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(TransportError::io(dir))
}

/// Writes a new file with `mode` from the start (a key is never briefly world-readable) and
/// never over an existing one.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TransportError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => TransportError::AlreadyExists { path: path.to_owned() },
            _ => TransportError::io(path)(e),
        })?;
    // The umask may have narrowed `mode`; a key must be exactly 0600 either way.
    file.set_permissions(fs::Permissions::from_mode(mode)).map_err(TransportError::io(path))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(TransportError::io(path))
}

fn read(path: &Path) -> Result<Vec<u8>, TransportError> {
    fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => TransportError::MissingFile { path: path.to_owned() },
        _ => TransportError::io(path)(e),
    })
}

fn pem_err(path: &Path) -> impl FnOnce(rustls::pki_types::pem::Error) -> TransportError {
    let path = path.to_owned();
    move |e| TransportError::Pem { path, message: format!("not a usable PEM file: {e}") }
}
