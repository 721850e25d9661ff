use super::*;
use prova_protocol::ids::TaskId;

fn file(s: &str) -> Node {
    Node::File { digest: sha256(s.as_bytes()), exec: false }
}

fn spec(cmd: &str) -> TaskSpec {
    TaskSpec::new(TaskId::new("app", "build"), "app", CommandLine::Shell(cmd.to_owned()))
}

#[test]
fn equal_inputs_give_equal_roots_and_any_change_moves_the_root() {
    let a: BTreeMap<String, Node> =
        [("app/src/a.ts", file("a")), ("app/src/b.ts", file("b")), ("lib/x", file("x"))]
            .into_iter()
            .map(|(p, n)| (p.to_owned(), n))
            .collect();
    let m1 = merkle(&a).unwrap();
    assert_eq!(m1.root, merkle(&a.clone()).unwrap().root);
    // root, app, app/src, lib
    assert_eq!(m1.directories.len(), 4);
    assert_eq!(m1.directories[0].0, m1.root, "the root comes first");
    let mut b = a.clone();
    b.insert("app/src/b.ts".into(), Node::File { digest: sha256(b"b"), exec: true });
    assert_ne!(merkle(&b).unwrap().root, m1.root, "the execute bit is part of the tree");
    let mut c = a.clone();
    c.insert("app/empty".into(), Node::Dir);
    assert_ne!(merkle(&c).unwrap().root, m1.root, "an empty directory is part of the tree");
    let mut d = a;
    d.insert("app/link".into(), Node::Symlink { target: "src/a.ts".into() });
    assert_ne!(merkle(&d).unwrap().root, m1.root);
}

#[test]
fn names_are_sorted_and_decode_back() {
    let e: BTreeMap<String, Node> = [("z", file("z")), ("a", file("a")), ("m/n", file("n"))]
        .into_iter()
        .map(|(p, n)| (p.to_owned(), n))
        .collect();
    let m = merkle(&e).unwrap();
    let root = re::Directory::decode(m.directories[0].1.as_slice()).unwrap();
    let names: Vec<_> = root.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["a", "z"]);
    assert_eq!(root.directories[0].name, "m");
}

#[test]
fn collisions_and_unclean_paths_are_refused() {
    let e: BTreeMap<String, Node> = [("a", file("a")), ("a/b", file("b"))]
        .into_iter()
        .map(|(p, n)| (p.to_owned(), n))
        .collect();
    assert_eq!(merkle(&e).unwrap_err(), ActionError::Collision("a".into()));
    for bad in ["../x", "/etc/passwd", "a/./b", "a//b", ""] {
        let e: BTreeMap<String, Node> = [(bad.to_owned(), file("x"))].into_iter().collect();
        assert!(matches!(merkle(&e), Err(ActionError::BadPath(_))), "{bad}");
    }
}

#[test]
fn output_paths_are_relative_to_the_project() {
    let roots = vec!["app/dist".to_owned(), "app/types".to_owned(), "shared/gen".to_owned()];
    assert_eq!(output_paths("app", &roots).unwrap(), ["../shared/gen", "dist", "types"]);
    assert_eq!(output_paths("", &["dist".to_owned()]).unwrap(), ["dist"]);
    assert_eq!(output_paths("app", &["app".to_owned()]), Err(ActionError::WholeWorkspace));
}

#[test]
fn reported_outputs_are_kept_inside_the_declared_roots() {
    let roots = vec!["app/dist".to_owned(), "shared/gen".to_owned()];
    let at = |p: &str| output_in_roots("app", p, &roots);
    assert_eq!(at("dist/a.js").as_deref(), Some("app/dist/a.js"));
    assert_eq!(at("dist").as_deref(), Some("app/dist"));
    assert_eq!(at("../shared/gen/x").as_deref(), Some("shared/gen/x"));
    for escape in ["src/a.ts", "distx/a", "../../etc/passwd", "/etc/passwd", "dist/../src/a.ts"] {
        assert_eq!(at(escape), None, "{escape}");
    }
}

#[test]
fn the_command_carries_declared_env_sorted_and_a_reruns_perturbations() {
    let mut s = spec("tsc -b");
    s.env = vec![("NODE_ENV".into(), "production".into()), ("A".into(), "1".into())];
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    // With the fixed baseline a prova worker gives every task.
    assert_eq!(
        environment(&s, None),
        pairs(&[
            ("A", "1"),
            ("LANG", "C.UTF-8"),
            ("NODE_ENV", "production"),
            ("SHELL", "/bin/sh"),
            ("TERM", "dumb"),
            ("TZ", "UTC"),
        ])
    );
    // A declared value wins; a name declared and left unset by the client is not there, and
    // the guard unsets the bot's own (a host name too).
    s.env.push(("TZ".into(), "Asia/Tokyo".into()));
    s.unset_env = vec!["LANG".into(), "HOME".into()];
    let env = environment(&s, None);
    assert!(env.contains(&("TZ".into(), "Asia/Tokyo".into())), "{env:?}");
    assert!(!env.iter().any(|(k, _)| k == "LANG"), "{env:?}");
    let keep = env_keep(&s, &env);
    assert!(keep.contains(&"PATH".to_owned()) && keep.contains(&"TZ".to_owned()), "{keep:?}");
    assert!(!keep.contains(&"LANG".to_owned()) && !keep.contains(&"HOME".to_owned()), "{keep:?}");
    s.env.pop();
    s.unset_env.clear();
    let p = Perturb {
        env: vec![("TZ".into(), "X".into()), ("NODE_ENV".into(), "dev".into())],
        umask: Some(0o77),
        ..Default::default()
    };
    let env = environment(&s, Some(&p));
    assert!(env.contains(&("TZ".into(), "X".into())));
    assert!(env.contains(&("NODE_ENV".into(), "production".into())), "declared values stay");
    assert_eq!(argv(&s, None), ["sh", "-c", "tsc -b"]);
    assert_eq!(argv(&s, Some(0o77))[..3], ["sh", "-c", "umask 077; exec \"$@\""]);
    s.args = vec!["--force".into(), "it's".into()];
    assert_eq!(argv(&s, None)[2], "tsc -b --force 'it'\\''s'");
}

#[test]
fn platform_properties_come_from_the_key_platform_and_labels() {
    let labels: BTreeMap<String, String> = [("pool".to_owned(), "large".to_owned())].into();
    let p = platform(Some("linux/x86_64"), &labels);
    let props: Vec<_> = p.properties.iter().map(|q| (q.name.as_str(), q.value.as_str())).collect();
    assert_eq!(props, [("ISA", "x86_64"), ("OSFamily", "linux"), ("pool", "large")]);
    assert!(platform(None, &BTreeMap::new()).properties.is_empty());
}

#[test]
fn a_salt_makes_another_action_of_the_same_task() {
    let s = spec("make");
    let roots = vec!["app/dist".to_owned()];
    let none = crate::remote_exec::guard::ProgramGuard::default();
    let i = |salt: &[u8]| ActionInputs {
        roots: &roots,
        input_root: sha256(b"root"),
        platform: None,
        perturb: None,
        salt: salt.to_vec(),
        guard: &none,
    };
    let a = build(&s, &i(b"")).unwrap();
    assert_eq!(a.digest, build(&s, &i(b"")).unwrap().digest);
    assert_ne!(a.digest, build(&s, &i(b"rerun-1")).unwrap().digest);
    let cmd = re::Command::decode(a.command.as_slice()).unwrap();
    assert_eq!(cmd.working_directory, "app");
    assert_eq!(cmd.output_paths, ["dist"]);
    // Inside the guard that leaves the bot's own environment out.
    assert_eq!(cmd.arguments[3..], ["sh", "sh", "-c", "make"]);
    assert!(cmd.arguments[2].contains("${PATH+\"PATH=$PATH\"}"), "{}", cmd.arguments[2]);
}

#[test]
fn the_programs_a_key_folds_are_checked_by_the_bot_and_move_the_action() {
    use crate::remote_exec::guard::{GuardedProgram, ProgramGuard};
    let s = spec("tool");
    let roots = vec!["app/dist".to_owned()];
    let guard = |sha: &str| ProgramGuard {
        programs: vec![GuardedProgram {
            word: "tool".into(),
            client_path: "/usr/bin/tool".into(),
            sha256: sha.into(),
        }],
        absent: vec!["fallback".into()],
        ..ProgramGuard::default()
    };
    let built = |g: &ProgramGuard| {
        build(
            &s,
            &ActionInputs {
                roots: &roots,
                input_root: sha256(b"root"),
                platform: None,
                perturb: None,
                salt: Vec::new(),
                guard: g,
            },
        )
        .unwrap()
    };
    let a = built(&guard("aa"));
    let cmd = re::Command::decode(a.command.as_slice()).unwrap();
    // The guard's `sh -c` around the task's own argv.
    assert_eq!(cmd.arguments[..2], ["sh", "-c"]);
    assert!(cmd.arguments[2].contains("'aa'") && cmd.arguments[2].contains("'fallback'"));
    assert_eq!(cmd.arguments[3..], ["sh", "sh", "-c", "tool"]);
    // Another client's program is another action: a bot's action cache never answers one
    // client's with another's result.
    assert_ne!(a.digest, built(&guard("bb")).digest);
}
