//! Golden wire fixtures: one committed, encoded frame per message variant in `tests/golden/`
//! (`<type>.<variant>.bin`: the 4-byte big-endian length and the named-field MessagePack
//! payload, exactly as a peer sends it), built from the values in `support/mod.rs`.
//!
//! What this pins (brief §8: named fields, only ever added):
//! - every committed fixture still decodes into its type and equals the value built here, so
//!   frames from a peer of this protocol version keep decoding (a renamed or removed field, a
//!   renamed variant, a changed representation fails here);
//! - encoding the value built here gives exactly the committed bytes (a reordered or added
//!   field fails here too: the change must be deliberate);
//! - every fixture still decodes when a newer peer adds a field to any of its structs.
//!
//! After a deliberate, compatible change (say, a new field with `#[serde(default)]`),
//! regenerate the fixtures and commit them:
//!
//! ```text
//! PROVA_BLESS=1 cargo test -p prova-protocol --test golden
//! ```
//!
//! Before blessing, the failure says whether the old bytes still decode (compatible) or not
//! (old peers' frames would be refused: bump `PROTOCOL_VERSION` instead).

mod support;

use std::collections::BTreeSet;
use std::fs;
use std::sync::OnceLock;

use prova_protocol::transport::frame::HEADER_LEN;
use rmpv::Value;
use support::{EVERY_VARIANT, Golden, golden_dir, goldens, hex};

/// A key no version of the protocol uses.
const ADDED_KEY: &str = "zz_added_by_a_newer_peer";

fn blessing() -> bool {
    std::env::var_os("PROVA_BLESS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// The fixtures, regenerated first (once, before any test reads them) under `PROVA_BLESS=1`.
fn fixtures() -> &'static [Golden] {
    static FIXTURES: OnceLock<Vec<Golden>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let all = goldens();
        if blessing() {
            let dir = golden_dir();
            fs::create_dir_all(&dir).expect("create tests/golden");
            let names: BTreeSet<String> = all.iter().map(|g| format!("{}.bin", g.name)).collect();
            for entry in fs::read_dir(&dir).expect("read tests/golden") {
                let path = entry.expect("dir entry").path();
                let stale = path.extension().is_some_and(|e| e == "bin")
                    && path.file_name().is_some_and(|n| !names.contains(&*n.to_string_lossy()));
                if stale {
                    fs::remove_file(&path).expect("remove a stale fixture");
                }
            }
            for g in &all {
                fs::write(dir.join(format!("{}.bin", g.name)), g.msg.frame()).expect("write");
            }
            eprintln!("PROVA_BLESS: wrote {} fixtures to {}", all.len(), dir.display());
        }
        all
    })
}

fn committed(g: &Golden) -> Vec<u8> {
    let path = golden_dir().join(format!("{}.bin", g.name));
    fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}; create it with PROVA_BLESS=1 (see the top of this file)", path.display())
    })
}

#[test]
fn every_message_variant_has_a_fixture() {
    let mut names = BTreeSet::new();
    let mut covered = BTreeSet::new();
    for g in fixtures() {
        assert!(names.insert(g.name), "two fixtures named {}", g.name);
        covered.insert(g.msg.variant());
    }
    let every: BTreeSet<String> = EVERY_VARIANT.iter().map(|s| (*s).to_owned()).collect();
    let missing: Vec<_> = every.difference(&covered).collect();
    let unlisted: Vec<_> = covered.difference(&every).collect();
    assert!(missing.is_empty(), "variants without a fixture: {missing:?}");
    assert!(unlisted.is_empty(), "variants missing from EVERY_VARIANT: {unlisted:?}");
}

#[test]
fn no_fixture_is_left_without_a_value() {
    let names: BTreeSet<String> = fixtures().iter().map(|g| format!("{}.bin", g.name)).collect();
    let on_disk: BTreeSet<String> = fs::read_dir(golden_dir())
        .expect("tests/golden exists (PROVA_BLESS=1 creates it)")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".bin"))
        .collect();
    let stale: Vec<_> = on_disk.difference(&names).collect();
    assert!(stale.is_empty(), "fixtures no value in support/mod.rs builds: {stale:?}");
}

#[test]
fn committed_fixtures_decode_to_the_values_built_here() {
    let mut failures = Vec::new();
    for g in fixtures() {
        let bytes = committed(g);
        let expected = g.msg.frame();
        let declared = bytes
            .get(..HEADER_LEN)
            .map(|h| u32::from_be_bytes(h.try_into().expect("4 bytes")) as usize);
        if declared != Some(bytes.len().saturating_sub(HEADER_LEN)) {
            failures.push(format!(
                "{}: the length header says {declared:?}, the payload is {} bytes",
                g.name,
                bytes.len().saturating_sub(HEADER_LEN)
            ));
            continue;
        }
        // 1. The committed bytes decode into the value built here.
        let old_decodes = match g.msg.decode_same_type(&bytes[HEADER_LEN..]) {
            Err(e) => {
                failures.push(format!(
                    "{}: the committed frame no longer decodes as {}: {e} — peers of this protocol \
                     version would be refused (an incompatible change: bump PROTOCOL_VERSION, or \
                     make the change compatible)",
                    g.name,
                    g.msg.type_name()
                ));
                false
            }
            Ok(back) => {
                // `Debug` shows the difference readably; comparing re-encodings compares every
                // byte of every digest (whose `Debug` is abbreviated).
                if back.debug() != g.msg.debug() || back.frame() != expected {
                    failures.push(format!(
                        "{}: the committed frame decodes to a different value\n--- decoded\n{}\n--- built here\n{}",
                        g.name,
                        back.debug(),
                        g.msg.debug()
                    ));
                    false
                } else {
                    true
                }
            }
        };
        // 2. The value built here encodes to exactly the committed bytes.
        if bytes != expected {
            let verdict = match old_decodes {
                true => {
                    "the old bytes still decode into the value (compatible, e.g. an added field \
                     with a default): if deliberate, re-bless with PROVA_BLESS=1"
                }
                false => "the old bytes do not decode into the value (see above)",
            };
            failures.push(format!(
                "{}: the encoding changed: {verdict}\n  committed {}\n  now       {}",
                g.name,
                hex(&bytes),
                hex(&expected)
            ));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n\n{}", failures.len(), failures.join("\n\n"));
}

/// The fixtures that carry no struct at all (unit variants, a variant holding a string).
const WITHOUT_STRUCTS: [&str; 8] = [
    "blob_ack.stored",
    "worker_msg.leaving",
    "coordinator_msg.leave",
    "client_msg.go",
    "client_msg.interrupt",
    "client_msg.status",
    "client_msg.hermeticity",
    "coordinator_reply.hermeticity",
];

#[test]
fn structs_travel_as_maps_keyed_by_field_name() {
    // Named fields are what make "only ever added" work: with a positional encoding
    // (`to_vec`), an added field would shift the ones after it.
    let without: BTreeSet<&str> = fixtures()
        .iter()
        .filter(|g| struct_maps(&parse(&committed(g), g.name)).is_empty())
        .map(|g| g.name)
        .collect();
    assert_eq!(without, BTreeSet::from(WITHOUT_STRUCTS));
    let hello = fixtures().iter().find(|g| g.name == "hello").expect("hello fixture");
    let Value::Map(entries) = parse(&committed(hello), hello.name) else {
        panic!("Hello is not a map")
    };
    let keys: Vec<&str> = entries.iter().filter_map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["protocol_version", "build_version", "role", "capabilities"]);
    // A unit variant is its name.
    let go = fixtures().iter().find(|g| g.name == "client_msg.go").expect("go fixture");
    assert_eq!(parse(&committed(go), go.name), Value::from("Go"));
}

#[test]
fn fixtures_still_decode_when_a_newer_peer_adds_fields() {
    let mut injected = 0;
    let mut failures = Vec::new();
    for g in fixtures() {
        let bytes = committed(g);
        let payload = &bytes[HEADER_LEN..];
        let value = parse(&bytes, g.name);
        // rmpv writes the same bytes back: the injected frames differ only by the new key.
        assert_eq!(encode(&value), payload, "{}: rmpv round trip", g.name);
        for path in struct_maps(&value) {
            for at_front in [false, true] {
                let mut grown = value.clone();
                let Value::Map(entries) = at(&mut grown, &path) else {
                    unreachable!("struct_maps returns paths to maps")
                };
                let added = (Value::from(ADDED_KEY), future_value());
                match at_front {
                    true => entries.insert(0, added),
                    false => entries.push(added),
                }
                let what = format!(
                    "{}: a field added {} the map at {path:?}",
                    g.name,
                    if at_front { "in front of" } else { "at the end of" }
                );
                match g.msg.decode_same_type(&encode(&grown)) {
                    Ok(back) if back.frame() == bytes => injected += 1,
                    Ok(back) => {
                        failures.push(format!("{what} changed the value: {}", back.debug()))
                    }
                    Err(e) => failures.push(format!("{what} is refused: {e}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
    // At least the top-level struct of every fixture that has one, in two places.
    assert!(injected >= 2 * (fixtures().len() - WITHOUT_STRUCTS.len()), "{injected} injections");
    eprintln!("{injected} frames with an added field decoded to the same values");
}

fn parse(frame: &[u8], name: &str) -> Value {
    let mut payload = &frame[HEADER_LEN..];
    let value = rmpv::decode::read_value(&mut payload)
        .unwrap_or_else(|e| panic!("{name}: not MessagePack: {e}"));
    assert!(payload.is_empty(), "{name}: {} bytes after the message", payload.len());
    value
}

fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, value).expect("encode to a Vec");
    out
}

/// What a newer peer might add: a nested value of several kinds, which an older decoder must
/// skip whole.
fn future_value() -> Value {
    Value::Map(vec![
        (Value::from("nested"), Value::Array(vec![Value::from(1), Value::from("x"), Value::Nil])),
        (Value::from("bytes"), Value::Binary(vec![0, 1, 2, 255])),
        (Value::from("big"), Value::from(u64::MAX)),
    ])
}

/// The maps that encode structs (or internally tagged enums), as paths of child indices, in
/// pre-order (so the top-level struct comes first). Not struct maps: an externally tagged
/// enum's `{"Variant": …}` wrapper (one key, capitalised: fields are snake_case) and the
/// `labels` maps (a `BTreeMap`, where an added key is data, not a field).
fn struct_maps(v: &Value) -> Vec<Vec<usize>> {
    fn walk(v: &Value, parent_key: Option<&str>, path: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        match v {
            Value::Map(entries) => {
                let keys: Option<Vec<&str>> = entries.iter().map(|(k, _)| k.as_str()).collect();
                let enum_wrapper = keys.as_ref().is_some_and(|k| {
                    k.len() == 1 && k[0].starts_with(|c: char| c.is_ascii_uppercase())
                });
                if keys.is_some() && !enum_wrapper && parent_key != Some("labels") {
                    out.push(path.clone());
                }
                for (i, (k, child)) in entries.iter().enumerate() {
                    path.push(i);
                    walk(child, k.as_str(), path, out);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    path.push(i);
                    walk(child, None, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, None, &mut Vec::new(), &mut out);
    out
}

fn at<'a>(v: &'a mut Value, path: &[usize]) -> &'a mut Value {
    path.iter().fold(v, |v, &i| match v {
        Value::Map(entries) => &mut entries[i].1,
        Value::Array(items) => &mut items[i],
        _ => unreachable!("paths only go through maps and arrays"),
    })
}

#[test]
fn message_type_names_match_the_fixture_names() {
    // `<type>.…` in snake_case, so a fixture's file says what it decodes as.
    for g in fixtures() {
        let ty = g.msg.type_name();
        let mut snake = String::new();
        for (i, c) in ty.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        }
        let prefix = g.name.split('.').next().unwrap_or_default();
        assert_eq!(prefix, snake, "{} holds a {ty}", g.name);
    }
}

#[test]
fn every_proof_verdict_rides_in_the_done_fixture() {
    let named: BTreeSet<&str> = support::verdicts().iter().map(support::verdict_variant).collect();
    let every: BTreeSet<&str> = support::EVERY_VERDICT.iter().copied().collect();
    assert_eq!(named, every, "support::verdicts() must hold one verdict of every kind");
    let done = fixtures().iter().find(|g| g.name == "coordinator_reply.done").expect("done");
    assert!(done.msg.debug().contains("NotVerified"), "the Done fixture carries the verdicts");
}
