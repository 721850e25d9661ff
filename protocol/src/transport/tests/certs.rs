use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use x509_parser::extensions::GeneralName;

use crate::transport::TransportError;
use crate::transport::certs::{
    self, Bundle, CA_CERT_FILE, CA_DIR, CA_KEY_FILE, CERT_FILE, COORDINATOR_NAME, Identity,
    KEY_FILE, ROLE_URN_PREFIX, Role, identity_of,
};
use crate::transport::test_support::Pki;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[test]
fn init_creates_the_ca_and_the_coordinator_bundle_with_private_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    certs::init(dir.path(), &[]).expect("init");
    let ca = dir.path().join(CA_DIR);
    let coordinator = dir.path().join(COORDINATOR_NAME);
    for file in [ca.join(CA_CERT_FILE), ca.join(CA_KEY_FILE)] {
        assert!(file.is_file(), "{} missing", file.display());
    }
    for file in [CA_CERT_FILE, CERT_FILE, KEY_FILE] {
        assert!(coordinator.join(file).is_file(), "coordinator/{file} missing");
    }
    assert_eq!(mode(&ca.join(CA_KEY_FILE)), 0o600);
    assert_eq!(mode(&coordinator.join(KEY_FILE)), 0o600);
    assert_eq!(mode(&ca), 0o700);
    assert_eq!(fs::read(ca.join(CA_CERT_FILE)).ok(), fs::read(coordinator.join(CA_CERT_FILE)).ok());

    let bundle = Bundle::load(&coordinator).expect("load");
    assert_eq!(bundle.identity, Identity { role: Role::Coordinator, name: "coordinator".into() });
    // Default SANs: localhost and 127.0.0.1 (plus the hostname when it is a DNS name).
    let (_, cert) = x509_parser::parse_x509_certificate(&bundle.cert[0]).expect("parse");
    let sans = cert.subject_alternative_name().expect("SAN ext").expect("SANs");
    let names = &sans.value.general_names;
    assert!(names.contains(&GeneralName::DNSName("localhost")), "{names:?}");
    assert!(names.iter().any(|n| matches!(n, GeneralName::IPAddress([127, 0, 0, 1]))), "{names:?}");
    assert!(names.contains(&GeneralName::URI("urn:prova:role:coordinator")), "{names:?}");
}

#[test]
fn init_takes_explicit_sans_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sans = vec!["farm.example.com".to_owned(), "10.1.2.3".to_owned(), "::1".to_owned()];
    certs::init(dir.path(), &sans).expect("init");
    let bundle = Bundle::load(&dir.path().join(COORDINATOR_NAME)).expect("load");
    let (_, cert) = x509_parser::parse_x509_certificate(&bundle.cert[0]).expect("parse");
    let sans = cert.subject_alternative_name().expect("SAN ext").expect("SANs");
    let names = &sans.value.general_names;
    assert!(names.contains(&GeneralName::DNSName("farm.example.com")), "{names:?}");
    assert!(names.iter().any(|n| matches!(n, GeneralName::IPAddress([10, 1, 2, 3]))), "{names:?}");
    assert!(!names.contains(&GeneralName::DNSName("localhost")), "explicit SANs replace defaults");

    let other = tempfile::tempdir().expect("temp dir");
    let err = certs::init(other.path(), &["not a name!".to_owned()]).unwrap_err();
    assert!(matches!(err, TransportError::BadName { .. }), "{err}");
    assert!(!other.path().join(CA_DIR).exists(), "nothing written on a bad SAN");
}

#[test]
fn init_refuses_to_overwrite_an_existing_ca() {
    let pki = Pki::new();
    let ca_pem = pki.path().join(CA_DIR).join(CA_CERT_FILE);
    let before = fs::read(&ca_pem).expect("read CA");
    let err = certs::init(pki.path(), &[]).unwrap_err();
    match &err {
        TransportError::AlreadyExists { path } => assert_eq!(path, &ca_pem),
        other => panic!("want AlreadyExists, got {other}"),
    }
    assert!(err.to_string().contains("ca.pem"), "{err}");
    assert_eq!(fs::read(&ca_pem).expect("read CA"), before, "CA untouched");
}

#[test]
fn issue_makes_a_bundle_for_every_role_and_identity_round_trips() {
    let pki = Pki::new();
    let ca = fs::read(pki.path().join(CA_DIR).join(CA_CERT_FILE)).expect("CA");
    for role in Role::ALL {
        let name = format!("{role}-1");
        let dir = certs::issue(pki.path(), role, &name).expect("issue");
        assert_eq!(dir, pki.path().join(&name));
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        assert_eq!(fs::read(dir.join(CA_CERT_FILE)).expect("bundle CA"), ca);
        let bundle = Bundle::load(&dir).expect("load");
        let want = Identity { role, name: name.clone() };
        assert_eq!(bundle.identity, want);
        assert_eq!(identity_of(&bundle.cert[0]).expect("identity"), want);

        let (_, cert) = x509_parser::parse_x509_certificate(&bundle.cert[0]).expect("parse");
        let eku = cert.extended_key_usage().expect("EKU ext").expect("EKU").value;
        assert!(eku.client_auth, "{role}: every peer authenticates as a client");
        assert_eq!(eku.server_auth, role == Role::Coordinator, "{role}: only coordinators serve");
        let ou = cert.subject().iter_organizational_unit().next().expect("OU");
        assert_eq!(ou.as_str().expect("OU string"), role.as_str());
        let validity = cert.validity().time_to_expiration().expect("valid now");
        assert!(validity.whole_days() > 360 && validity.whole_days() <= 366, "{validity:?}");
    }
}

#[test]
fn issue_refuses_existing_bundles_bad_names_and_a_missing_ca() {
    let pki = Pki::new();
    let err = certs::issue(pki.path(), Role::Worker, "w1").unwrap_err();
    assert!(
        matches!(err, TransportError::AlreadyExists { ref path } if path.ends_with("w1/key.pem"))
    );
    let long = "x".repeat(65);
    for bad in ["", "ca", "../w2", "a/b", "-w", ".hidden", "w 1", "wé", long.as_str()] {
        let err = certs::issue(pki.path(), Role::Worker, bad).unwrap_err();
        assert!(matches!(err, TransportError::BadName { .. }), "{bad:?}: {err}");
    }
    let empty = tempfile::tempdir().expect("temp dir");
    let err = certs::issue(empty.path(), Role::Worker, "w1").unwrap_err();
    assert!(
        matches!(err, TransportError::MissingFile { ref path } if path.ends_with("ca/ca.pem")),
        "{err}"
    );
}

#[test]
fn load_names_the_missing_or_broken_file() {
    let pki = Pki::new();
    let dir = pki.path().join("w1");
    fs::remove_file(dir.join(KEY_FILE)).expect("rm key");
    let err = Bundle::load(&dir).unwrap_err();
    assert!(matches!(err, TransportError::MissingFile { ref path } if path == &dir.join(KEY_FILE)));
    assert!(err.to_string().contains("key.pem"), "{err}");

    fs::write(dir.join(CERT_FILE), "not pem").expect("write");
    let err = Bundle::load(&dir).unwrap_err();
    assert!(matches!(err, TransportError::Pem { ref path, .. } if path == &dir.join(CERT_FILE)));
}

fn self_signed(edit: impl FnOnce(&mut CertificateParams)) -> Vec<u8> {
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    edit(&mut params);
    let key = KeyPair::generate().expect("key");
    params.self_signed(&key).expect("cert").der().to_vec()
}

fn role_uri(role: &str) -> SanType {
    SanType::URI(format!("{ROLE_URN_PREFIX}{role}").try_into().expect("IA5"))
}

#[test]
fn identity_of_refuses_certificates_without_a_consistent_role() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"\x30\x03not a cert".to_vec()),
        ("no role at all", self_signed(|_| {})),
        (
            "URI but no OU",
            self_signed(|p| {
                p.distinguished_name.push(DnType::CommonName, "w1");
                p.subject_alt_names.push(role_uri("worker"));
            }),
        ),
        (
            "OU and URI disagree",
            self_signed(|p| {
                p.distinguished_name.push(DnType::CommonName, "w1");
                p.distinguished_name.push(DnType::OrganizationalUnitName, "worker");
                p.subject_alt_names.push(role_uri("admin"));
            }),
        ),
        (
            "unknown role",
            self_signed(|p| {
                p.distinguished_name.push(DnType::CommonName, "w1");
                p.distinguished_name.push(DnType::OrganizationalUnitName, "root");
                p.subject_alt_names.push(role_uri("root"));
            }),
        ),
        (
            "two role URIs",
            self_signed(|p| {
                p.distinguished_name.push(DnType::CommonName, "w1");
                p.distinguished_name.push(DnType::OrganizationalUnitName, "worker");
                p.subject_alt_names.push(role_uri("worker"));
                p.subject_alt_names.push(role_uri("admin"));
            }),
        ),
        (
            "bad name",
            self_signed(|p| {
                p.distinguished_name.push(DnType::CommonName, "../etc");
                p.distinguished_name.push(DnType::OrganizationalUnitName, "worker");
                p.subject_alt_names.push(role_uri("worker"));
            }),
        ),
    ];
    for (what, der) in cases {
        let err = identity_of(&der).unwrap_err();
        assert!(matches!(err, TransportError::BadCertificate(_)), "{what}: {err}");
    }
    let ok = self_signed(|p| {
        p.distinguished_name.push(DnType::CommonName, "ci-7");
        p.distinguished_name.push(DnType::OrganizationalUnitName, "ci");
        p.subject_alt_names.push(role_uri("ci"));
        p.subject_alt_names.push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
    });
    assert_eq!(identity_of(&ok).expect("ok"), Identity { role: Role::Ci, name: "ci-7".into() });
}

#[test]
fn roles_print_parse_and_serialise_lowercase() {
    for role in Role::ALL {
        let s = role.to_string();
        assert_eq!(s, s.to_lowercase());
        assert_eq!(s.parse::<Role>().expect("parse"), role);
        assert_eq!(serde_json::to_string(&role).expect("json"), format!("\"{s}\""));
        let bytes = rmp_serde::to_vec_named(&role).expect("msgpack");
        assert_eq!(rmp_serde::from_slice::<Role>(&bytes).expect("decode"), role);
    }
    assert!("Worker".parse::<Role>().is_err());
    assert!("root".parse::<Role>().is_err());
}
