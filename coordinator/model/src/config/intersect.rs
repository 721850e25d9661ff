//! Whether two path globs can match one path, decided from the patterns alone (issue 27: an
//! output that can match a declared input would be deleted before the task runs). Patterns
//! mean what [`PathGlobs`](prova_protocol::globs::PathGlobs) makes of them: globset with a
//! literal separator (`*`, `?` and classes never match `/`), `**` as a whole component for
//! zero or more components, `{a,b}` alternatives, `\` escapes, and a pattern without
//! metacharacters meaning that path and everything under it.
//!
//! A pattern becomes a set of alternatives (braces expanded), each a list of components:
//! `**`, or one component's tokens. Two components intersect when some non-empty name
//! matches both (a product of the two token automata, exact); two lists when the components
//! can be lined up, `**` absorbing any run ([`PathPattern::intersects`]). Where the exact
//! form is not kept, the pattern is widened — never narrowed — so the test can say "they may
//! overlap" of two that do not, but never "they cannot" of two that do: a trailing `/**`
//! also matches the directory itself, a class with a POSIX name matches any character, and
//! a pattern with more than [`MAX_ALTERNATIVES`] alternatives is cut to `prefix/**` at its
//! first brace. [`PathPattern::covers`] (an exclusion that removes every match of an
//! output) is the opposite: it answers `true` only for shapes it is sure of.

use prova_protocol::globs::{is_within, join_rel};

/// Alternatives kept per pattern; a pattern that expands to more is widened.
pub const MAX_ALTERNATIVES: usize = 64;

/// One character-level token of a component.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    /// This character.
    Char(char),
    /// `?` (or a consumed character of `*`): any one character.
    AnyChar,
    /// `*`: any run of characters, the empty one included.
    Star,
    /// `[...]`: one character in the ranges, or (negated) not in them.
    Class { negated: bool, ranges: Vec<(char, char)> },
}

/// One component of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    /// `**`: zero or more components.
    Any,
    /// One component matching these tokens.
    One(Vec<Tok>),
}

/// A glob as the set of workspace-relative paths it can match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathPattern {
    alts: Vec<Vec<Seg>>,
    /// The workspace-relative literal prefix: every match is this path or lies under it.
    prefix: String,
    /// The pattern, workspace-relative (the project directory joined, `//` dropped).
    text: String,
    /// Written without metacharacters: the path itself and everything under it.
    literal: bool,
}

impl PathPattern {
    /// The include pattern `pattern` (no leading `!`) as written in the config of the
    /// project at `dir` (`""`: the workspace root, or a `[workspace]` list).
    pub fn new(dir: &str, pattern: &str) -> Self {
        let (ws, rel) = match pattern.strip_prefix("//") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        let mut rel = rel.trim_start_matches("./").trim_end_matches('/');
        if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            // Refused at load; should one get here, it can match anything.
            rel = "**";
        }
        if rel.is_empty() || rel == "." {
            rel = "**";
        }
        let base = if ws { "" } else { dir };
        let literal = !has_meta(rel) && rel != "**";
        let base_segs: Vec<Seg> = base
            .split('/')
            .filter(|c| !c.is_empty())
            .map(|c| Seg::One(c.chars().map(Tok::Char).collect()))
            .collect();
        let expanded = expand_braces(rel).unwrap_or_else(|| {
            // Too many alternatives: everything under the part before the first brace.
            let cut = literal_prefix(rel);
            vec![if cut.is_empty() { "**".to_owned() } else { format!("{cut}/**") }]
        });
        let alts = expanded
            .iter()
            .map(|alt| {
                let mut segs = base_segs.clone();
                segs.extend(components(alt));
                if literal {
                    segs.push(Seg::Any);
                }
                segs
            })
            .collect();
        Self {
            alts,
            prefix: join_rel(base, &literal_prefix(rel)),
            text: join_rel(base, rel),
            literal,
        }
    }

    /// The workspace-relative literal prefix: every match is this path or lies under it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The pattern, workspace-relative (`//` dropped, the project directory joined).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether some path can match both patterns.
    pub fn intersects(&self, other: &PathPattern) -> bool {
        self.alts.iter().any(|a| other.alts.iter().any(|b| lists_intersect(a, b)))
    }

    /// Whether every path `inner` can match is matched by `self` — answered `true` only for
    /// the shapes it can be sure of: the same pattern; `self` a literal path (it and what lies
    /// under it) at or above `inner`'s prefix; `self` a literal directory followed by `/**`
    /// (or `/**/*`) and every match of `inner` strictly under that directory.
    pub fn covers(&self, inner: &PathPattern) -> bool {
        if self.text == inner.text {
            return true;
        }
        if self.literal {
            return is_within(&inner.prefix, &self.text);
        }
        let below = ["/**", "/**/*"].iter().find_map(|t| self.text.strip_suffix(t));
        match below {
            Some(dir) if !has_meta(dir) => {
                let strictly_under =
                    inner.prefix.len() > dir.len() && is_within(&inner.prefix, dir);
                // At the directory itself, `inner` must go on with a component below it.
                let deeper = inner.prefix == dir && !inner.literal && inner.text != dir;
                strictly_under || deeper
            }
            _ => false,
        }
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// The components before the first one with a metacharacter.
fn literal_prefix(pattern: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for comp in pattern.split('/') {
        if has_meta(comp) {
            break;
        }
        out.push(comp);
    }
    out.join("/")
}

/// `{a,b}` alternatives expanded textually (globset does not nest them); `None` past
/// [`MAX_ALTERNATIVES`]. Braces inside a class or after `\` are literal.
fn expand_braces(pattern: &str) -> Option<Vec<String>> {
    let mut done = Vec::new();
    let mut todo = vec![pattern.to_owned()];
    while let Some(p) = todo.pop() {
        match first_group(&p) {
            None => done.push(p),
            Some((open, close)) => {
                let (head, body, tail) = (&p[..open], &p[open + 1..close], &p[close + 1..]);
                for alt in split_alternatives(body) {
                    todo.push(format!("{head}{alt}{tail}"));
                }
            }
        }
        if done.len() + todo.len() > MAX_ALTERNATIVES {
            return None;
        }
    }
    Some(done)
}

/// The byte offsets of the first `{` and its `}`, outside classes and escapes.
fn first_group(p: &str) -> Option<(usize, usize)> {
    let mut open = None;
    let mut in_class = false;
    let mut chars = p.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' if !in_class => {
                in_class = true;
                // A `]` right after `[` (or `[!`) is a member, not the end.
                if let Some(&(_, n)) = chars.peek()
                    && (n == '!' || n == '^')
                {
                    chars.next();
                }
                if let Some(&(_, ']')) = chars.peek() {
                    chars.next();
                }
            }
            ']' if in_class => in_class = false,
            '{' if !in_class && open.is_none() => open = Some(i),
            '}' if !in_class => {
                if let Some(o) = open {
                    return Some((o, i));
                }
            }
            _ => {}
        }
    }
    None
}

/// The `,`-separated parts of a brace body (escapes kept).
fn split_alternatives(body: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in body.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            parts.push(&body[start..i]);
            start = i + 1;
        }
    }
    parts.push(&body[start..]);
    parts
}

/// The components of one brace-free pattern.
fn components(p: &str) -> Vec<Seg> {
    let mut segs = Vec::new();
    let mut cur: Vec<Tok> = Vec::new();
    let mut raw = String::new();
    let mut chars = p.chars().peekable();
    let flush = |cur: &mut Vec<Tok>, raw: &mut String, segs: &mut Vec<Seg>| {
        if raw == "**" {
            segs.push(Seg::Any);
        } else if !raw.is_empty() {
            segs.push(Seg::One(std::mem::take(cur)));
        }
        cur.clear();
        raw.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '/' => flush(&mut cur, &mut raw, &mut segs),
            '\\' => {
                let lit = chars.next().unwrap_or('\\');
                raw.push('\\');
                raw.push(lit);
                if lit == '/' {
                    // An escaped separator still separates a path.
                    flush(&mut cur, &mut raw, &mut segs);
                } else {
                    cur.push(Tok::Char(lit));
                }
            }
            '*' => {
                raw.push('*');
                if cur.last() != Some(&Tok::Star) {
                    cur.push(Tok::Star);
                }
            }
            '?' => {
                raw.push('?');
                cur.push(Tok::AnyChar);
            }
            '[' => {
                raw.push('[');
                cur.push(class(&mut chars));
            }
            c => {
                raw.push(c);
                cur.push(Tok::Char(c));
            }
        }
    }
    flush(&mut cur, &mut raw, &mut segs);
    segs
}

/// A class after its `[`, as globset parses it: `!`/`^` negates, a leading `]` or `-` is a
/// member, `a-z` a range. A POSIX name (`[:alpha:]`) widens it to any character; an unclosed
/// class (refused at load) to the same.
fn class(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Tok {
    let any = Tok::Class { negated: true, ranges: Vec::new() };
    let negated = matches!(chars.peek(), Some('!' | '^'));
    if negated {
        chars.next();
    }
    let mut ranges: Vec<(char, char)> = Vec::new();
    let (mut first, mut in_range, mut widened) = (true, false, false);
    loop {
        let Some(c) = chars.next() else { return any };
        match c {
            ']' if !first => break,
            '[' if chars.peek() == Some(&':') => {
                // `[:name:]`: skip to its `:]`.
                widened = true;
                let mut prev = '[';
                for n in chars.by_ref() {
                    if prev == ':' && n == ']' {
                        break;
                    }
                    prev = n;
                }
            }
            '-' if !first && !in_range => in_range = true,
            c => {
                match ranges.last_mut() {
                    Some(r) if in_range => r.1 = c.max(r.0),
                    _ => ranges.push((c, c)),
                }
                in_range = false;
            }
        }
        first = false;
    }
    if in_range {
        ranges.push(('-', '-'));
    }
    if widened { any } else { Tok::Class { negated, ranges } }
}

/// Whether two component lists can match one path.
fn lists_intersect(a: &[Seg], b: &[Seg]) -> bool {
    // Depth-first over (i, j) with the pairs already found dead.
    let mut dead = vec![false; (a.len() + 1) * (b.len() + 1)];
    let mut stack = vec![(0usize, 0usize)];
    let idx = |i: usize, j: usize| i * (b.len() + 1) + j;
    while let Some((i, j)) = stack.pop() {
        if dead[idx(i, j)] {
            continue;
        }
        dead[idx(i, j)] = true;
        if i == a.len() && j == b.len() {
            return true;
        }
        let (sa, sb) = (a.get(i), b.get(j));
        if sa == Some(&Seg::Any) {
            stack.push((i + 1, j));
            if j < b.len() {
                stack.push((i, j + 1));
            }
        }
        if sb == Some(&Seg::Any) {
            stack.push((i, j + 1));
            if i < a.len() {
                stack.push((i + 1, j));
            }
        }
        if let (Some(Seg::One(x)), Some(Seg::One(y))) = (sa, sb)
            && components_intersect(x, y)
        {
            stack.push((i + 1, j + 1));
        }
    }
    false
}

/// Whether some non-empty name (no `/`) matches both token lists: reachability in the
/// product of the two automata, a state being (position in x, position in y, any character
/// consumed yet).
fn components_intersect(x: &[Tok], y: &[Tok]) -> bool {
    let w = y.len() + 1;
    let mut seen = vec![false; (x.len() + 1) * w * 2];
    let mut stack = vec![(0usize, 0usize, false)];
    while let Some((p, q, some)) = stack.pop() {
        let at = (p * w + q) * 2 + usize::from(some);
        if seen[at] {
            continue;
        }
        seen[at] = true;
        if p == x.len() && q == y.len() && some {
            return true;
        }
        // A star may match nothing.
        if x.get(p) == Some(&Tok::Star) {
            stack.push((p + 1, q, some));
        }
        if y.get(q) == Some(&Tok::Star) {
            stack.push((p, q + 1, some));
        }
        // Or both consume one character they agree on (a star stays where it is).
        let (Some(tx), Some(ty)) = (x.get(p), y.get(q)) else { continue };
        if agree(tx, ty) {
            let np = if *tx == Tok::Star { p } else { p + 1 };
            let nq = if *ty == Tok::Star { q } else { q + 1 };
            stack.push((np, nq, true));
        }
    }
    false
}

/// Whether one character other than `/` satisfies both tokens (a star as one character).
/// A negated class is taken to admit some character the other token does.
fn agree(a: &Tok, b: &Tok) -> bool {
    let in_ranges = |c: char, r: &[(char, char)]| r.iter().any(|&(lo, hi)| lo <= c && c <= hi);
    match (a, b) {
        (Tok::Char(x), Tok::Char(y)) => x == y,
        (Tok::Char(c), Tok::Class { negated, ranges })
        | (Tok::Class { negated, ranges }, Tok::Char(c)) => in_ranges(*c, ranges) != *negated,
        (Tok::Class { negated: false, ranges: r1 }, Tok::Class { negated: false, ranges: r2 }) => {
            r1.iter().any(|&(a1, b1)| {
                r2.iter().any(|&(a2, b2)| {
                    let (lo, hi) = (a1.max(a2), b1.min(b2));
                    // Some character of the overlap that is not the separator.
                    lo <= hi && !(lo == '/' && hi == '/')
                })
            })
        }
        (Tok::Class { negated: false, ranges }, _) | (_, Tok::Class { negated: false, ranges }) => {
            ranges.iter().any(|&(lo, hi)| !(lo == '/' && hi == '/'))
        }
        _ => true,
    }
}

#[cfg(test)]
#[path = "intersect_tests.rs"]
mod intersect_tests;
