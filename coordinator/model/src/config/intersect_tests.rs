//! The glob intersection against globset itself: every pair a sample path matches is found
//! (soundness), and the common shapes that cannot overlap are told apart (precision).

use prova_protocol::globs::PathGlobs;

use super::*;

fn p(dir: &str, pattern: &str) -> PathPattern {
    PathPattern::new(dir, pattern)
}

fn meet(a: (&str, &str), b: (&str, &str)) -> bool {
    let (x, y) = (p(a.0, a.1), p(b.0, b.1));
    let (xy, yx) = (x.intersects(&y), y.intersects(&x));
    assert_eq!(xy, yx, "intersection is symmetric: {a:?} {b:?}");
    xy
}

#[test]
fn the_shapes_of_the_issue_overlap() {
    for (out, input) in [
        ("src/**", "src/**"),
        ("src", "src/**"),
        ("src/a.txt", "src/**"),
        ("src/**", "src/a.txt"),
        ("src/**", "**/*.ts"),
        ("dist/**", "**/*"),
        ("dist/**", "**"),
        ("dist/**", ""),
        ("dist/*.js", "dist/index.*"),
        ("{dist,src}/**", "src/a.ts"),
        ("dist/**", "{dist,lib}/*.d.ts"),
        ("gen/[a-c]*.ts", "gen/b.ts"),
        ("gen/?.ts", "gen/*"),
        ("out/**/x", "out/a/b/x"),
        ("out", "out"),
    ] {
        assert!(meet(("apps/web", out), ("apps/web", input)), "{out} vs {input}");
    }
}

#[test]
fn disjoint_shapes_do_not() {
    for (out, input) in [
        ("dist/**", "src/**"),
        ("dist", "src"),
        ("dist/**", "dist.json"),
        ("dist/*.js", "dist/*.d.ts"),
        ("dist/*.js", "dist/a/*.js"),
        ("gen/[a-c]*.ts", "gen/d*"),
        ("gen/?.ts", "gen/ab.ts"),
        ("out/x", "out/y/**"),
        ("build/**", "package.json"),
        ("{dist,out}/**", "{src,test}/**"),
    ] {
        assert!(!meet(("a", out), ("a", input)), "{out} vs {input}");
    }
}

#[test]
fn projects_and_workspace_patterns_meet_where_their_paths_do() {
    // Another project's `//` input pointing into this project's outputs.
    assert!(meet(("libs/ui", "dist/**"), ("apps/web", "//libs/ui/dist/index.js")));
    assert!(meet(("libs/ui", "dist/**"), ("apps/web", "//libs/**")));
    assert!(!meet(("libs/ui", "dist/**"), ("apps/web", "//libs/ui/src/**")));
    // Another project's own patterns never reach here.
    assert!(!meet(("libs/ui", "dist/**"), ("apps/web", "dist/**")));
    // `[workspace]` patterns are workspace-relative.
    assert!(meet(("libs/ui", "gen/types.d.ts"), ("", "//libs/*/gen/*.d.ts")));
    assert!(meet(("", "types/**"), ("", "//types/**")));
    // Metacharacters in a project directory are literal.
    assert!(!meet(("pkgs/[x]", "dist/**"), ("", "pkgs/x/dist/a")));
    assert!(meet(("pkgs/[x]", "dist/**"), ("", "pkgs/\\[x\\]/dist/a")));
}

#[test]
fn covers_only_what_it_is_sure_of() {
    let covers = |e: (&str, &str), o: (&str, &str)| p(e.0, e.1).covers(&p(o.0, o.1));
    assert!(covers(("a", "dist/**"), ("a", "dist/**")));
    assert!(covers(("a", "dist/**"), ("a", "dist/*.js")));
    assert!(covers(("a", "dist/**"), ("a", "dist/x/y.js")));
    assert!(covers(("a", "dist"), ("a", "dist")));
    assert!(covers(("a", "dist"), ("a", "dist/**")));
    assert!(covers(("a", "//a/dist/**"), ("a", "dist/**")));
    assert!(covers(("a", "dist/**/*"), ("a", "dist/**")));
    // `dist/**` does not match a file named `dist`.
    assert!(!covers(("a", "dist/**"), ("a", "dist")));
    assert!(!covers(("a", "dist/*"), ("a", "dist/x/y")));
    assert!(!covers(("a", "*.js"), ("a", "dist/**")));
    assert!(!covers(("a", "dist/**"), ("a", "{dist,src}/**")));
    assert!(!covers(("a", "src/**"), ("a", "dist/**")));
}

/// Patterns and paths to test against globset itself.
const PATTERNS: &[&str] = &[
    "**",
    "",
    "*",
    "src",
    "src/**",
    "src/*",
    "src/a.ts",
    "src/*.ts",
    "**/*.ts",
    "**/a.ts",
    "dist/**",
    "dist",
    "dist/*.js",
    "dist/**/*.d.ts",
    "{dist,src}/**",
    "{a,b}.ts",
    "src/[ab].ts",
    "src/[!a].ts",
    "src/?.ts",
    "s?c/**",
    "*/a.ts",
    "**/x/**",
    "dist/**/x",
    "src/a.ts/**",
    "d*/**",
    "*.json",
    "src/\\*.ts",
    "src/[[:alpha:]].ts",
    "src/{a,b/c}.ts",
    "src/**/*",
];

const PATHS: &[&str] = &[
    "src",
    "src/a.ts",
    "src/b.ts",
    "src/c.ts",
    "src/*.ts",
    "src/ab.ts",
    "src/b/c.ts",
    "src/x/a.ts",
    "src/a.ts/inner",
    "dist",
    "dist/a.js",
    "dist/a.d.ts",
    "dist/x/a.d.ts",
    "dist/x",
    "dist/y/x",
    "dist/x/z",
    "a.ts",
    "b.ts",
    "x/a.ts",
    "x/y",
    "pkg.json",
    "sac/q",
    "deep/x/y/z.ts",
    "x",
];

#[test]
fn every_pair_a_path_matches_is_found_and_covers_never_lies() {
    let dir = "p";
    let globs = |pat: &str| PathGlobs::new(dir, &[pat.to_owned()]).expect("compiles");
    let full: Vec<String> = PATHS.iter().map(|x| format!("{dir}/{x}")).collect();
    for a in PATTERNS {
        let (ga, pa) = (globs(a), p(dir, a));
        for b in PATTERNS {
            let (gb, pb) = (globs(b), p(dir, b));
            let witness = full.iter().find(|x| ga.includes_match(x) && gb.includes_match(x));
            if let Some(w) = witness {
                assert!(pa.intersects(&pb), "{a:?} and {b:?} both match {w} but do not meet");
            }
            if pa.covers(&pb) {
                let escaped = full.iter().find(|x| gb.includes_match(x) && !ga.includes_match(x));
                assert_eq!(escaped, None, "{a:?} covers {b:?}, yet only {b:?} matches it");
            }
        }
        // The prefix bounds every match.
        for x in full.iter().filter(|x| ga.includes_match(x)) {
            assert!(is_within(x, pa.prefix()), "{a:?}: {x} is outside {}", pa.prefix());
        }
    }
}

#[test]
fn too_many_alternatives_widen_the_pattern() {
    let many = format!("gen/{{{}}}/{{{}}}.ts", "a,b,c,d,e,f,g,h,i", "j,k,l,m,n,o,p,q,r");
    let wide = p("x", &many);
    assert!(wide.intersects(&p("x", "gen/zzz/other.txt")), "widened to gen/**");
    assert!(!wide.intersects(&p("x", "src/**")));
    assert_eq!(expand_braces("{a,b}/{c,d}").map(|v| v.len()), Some(4));
}
