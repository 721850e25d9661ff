//! Key sensitivity: each component alone moves the key; canonical order does not.

use super::*;

fn base() -> KeyComponents {
    KeyComponents {
        version: KEY_VERSION,
        task: "web#build".into(),
        command: "sh:npm run build".into(),
        config: vec![("outputs".into(), "dist/**".into()), ("timeout".into(), "none".into())],
        env: vec![("A".into(), Some(Digest::of(b"1"))), ("NODE_ENV".into(), None)],
        inputs: vec![InputFile {
            path: "web/src/a.ts".into(),
            kind: InputKind::File,
            exec: false,
            digest: Digest::of(b"a"),
        }],
        workspace: vec![InputFile {
            path: "lock".into(),
            kind: InputKind::File,
            exec: false,
            digest: Digest::of(b"l"),
        }],
        upstream: vec![("lib#build".into(), Digest::of(b"k"))],
        upstream_outputs: vec![("gen#build".into(), Digest::of(b"f"))],
        args: vec![],
        platform: Some("linux/x86_64".into()),
    }
}

#[test]
fn every_component_moves_the_key() {
    let k0 = base().key();
    type Change = Box<dyn Fn(&mut KeyComponents)>;
    let variants: Vec<(&str, Change)> = vec![
        ("version", Box::new(|c| c.version += 1)),
        ("task", Box::new(|c| c.task = "web#test".into())),
        ("command", Box::new(|c| c.command = "sh:npm run build:prod".into())),
        ("config", Box::new(|c| c.config[1].1 = "60000".into())),
        ("env value", Box::new(|c| c.env[0].1 = Some(Digest::of(b"2")))),
        ("env unset vs empty", Box::new(|c| c.env[1].1 = Some(Digest::of(b"")))),
        ("input content", Box::new(|c| c.inputs[0].digest = Digest::of(b"b"))),
        ("input path", Box::new(|c| c.inputs[0].path = "web/src/b.ts".into())),
        ("input exec bit", Box::new(|c| c.inputs[0].exec = true)),
        ("input kind", Box::new(|c| c.inputs[0].kind = InputKind::Symlink)),
        (
            "input added",
            Box::new(|c| {
                c.inputs.push(InputFile {
                    path: "web/src/z.ts".into(),
                    kind: InputKind::File,
                    exec: false,
                    digest: Digest::of(b"z"),
                })
            }),
        ),
        ("workspace input", Box::new(|c| c.workspace[0].digest = Digest::of(b"m"))),
        ("upstream key", Box::new(|c| c.upstream[0].1 = Digest::of(b"k2"))),
        ("upstream outputs", Box::new(|c| c.upstream_outputs[0].1 = Digest::of(b"f2"))),
        (
            "upstream folded by outputs, not key",
            Box::new(|c| {
                let k = c.upstream.remove(0);
                c.upstream_outputs.insert(0, k);
            }),
        ),
        ("forwarded args", Box::new(|c| c.args = vec!["--fix".into()])),
        ("platform", Box::new(|c| c.platform = Some("linux/aarch64".into()))),
        ("portable", Box::new(|c| c.platform = None)),
    ];
    for (what, change) in variants {
        let mut c = base();
        change(&mut c);
        assert_ne!(c.key(), k0, "{what} did not move the key");
    }
}

#[test]
fn boundaries_between_fields_are_unambiguous() {
    let mut a = base();
    a.args = vec!["a".into(), "b".into()];
    let mut b = base();
    b.args = vec!["ab".into()];
    assert_ne!(a.key(), b.key());
}

#[test]
fn diff_names_what_moved() {
    let old = base();
    let mut new = base();
    new.inputs[0].digest = Digest::of(b"changed");
    new.env[1].1 = Some(Digest::of(b"production"));
    new.upstream[0].1 = Digest::of(b"other");
    new.upstream_outputs[0].1 = Digest::of(b"other outputs");
    let d = new.diff(&old);
    assert!(d.contains(&"upstream `gen#build` outputs changed".to_owned()), "{d:?}");
    assert!(d.contains(&"input `web/src/a.ts` changed".to_owned()), "{d:?}");
    assert!(d.contains(&"env `NODE_ENV` changed".to_owned()), "{d:?}");
    assert!(d.contains(&"upstream `lib#build` key changed".to_owned()), "{d:?}");
    assert!(base().diff(&base()).is_empty());
}

#[test]
fn env_values_fold_keyed_by_the_cache_salt() {
    let (a, b) = ([1u8; 32], [2u8; 32]);
    let plain = Digest::of(b"1234");
    assert_eq!(env_value(None, "1234"), plain, "no cache: the plain digest");
    assert_ne!(env_value(Some(&a), "1234"), plain, "a salted value is not the plain digest");
    assert_ne!(env_value(Some(&a), "1234"), env_value(Some(&b), "1234"), "per salt");
    assert_eq!(env_value(Some(&a), "1234"), env_value(Some(&a), "1234"), "stable");
    assert_ne!(env_value(Some(&a), "1234"), env_value(Some(&a), "1235"), "per value");
}

#[test]
fn diff_names_a_runtime_input_with_its_old_and_new_output() {
    let pair = |out: &str, shown: bool| {
        runtime_pair("node --version", &Digest::of(out.as_bytes()), shown.then_some(out))
    };
    let with = |p: (String, String)| {
        let mut c = base();
        c.config.push(p);
        c.config.sort();
        c
    };
    let (old, new) = (with(pair("v20.11.0", true)), with(pair("v22.1.0", true)));
    assert_ne!(old.key(), new.key(), "a runtime input's output is keyed");
    assert_eq!(new.diff(&old), vec!["runtime `node --version` changed: v20.11.0 → v22.1.0"]);
    // Without the values kept (secret-looking or long), the change is still named.
    let (old, new) = (with(pair("a", false)), with(pair("b", false)));
    assert_eq!(new.diff(&old), vec!["runtime `node --version` changed (its output differs)"]);
    assert_eq!(new.diff(&base()), vec!["runtime `node --version` was added"]);
    assert_eq!(base().diff(&new), vec!["runtime `node --version` was removed"]);
}
