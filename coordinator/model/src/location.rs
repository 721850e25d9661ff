//! Places in text files: a [`Location`] (`file:line:col`, shown workspace-relative), a value
//! [`Located`] where it was written, and the line/column arithmetic behind them. The lowest
//! layer of the crate: config errors, the graph's and the loader's messages all point here.

use std::fmt;
use std::path::{Path, PathBuf};

/// A place in a config file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The file, absolute.
    pub file: PathBuf,
    /// The file as messages show it: workspace-relative when it lies inside the workspace,
    /// else as given. Kept beside `file` so a location prints without knowing the root.
    pub shown: PathBuf,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
}

impl Location {
    /// A location in `file` (absolute), shown relative to the workspace `root` when inside it.
    pub fn new(root: &Path, file: &Path, line: u32, col: u32) -> Self {
        Self { file: file.to_path_buf(), shown: shown_path(root, file), line, col }
    }

    /// The location of byte `offset` of `text`, the contents of `file`.
    pub fn at_offset(root: &Path, file: &Path, text: &str, offset: usize) -> Self {
        let (line, col) = line_col(text, offset);
        Self::new(root, file, line, col)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.shown.display(), self.line, self.col)
    }
}

/// A value and where it was written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Located<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub at: Location,
}

impl<T> Located<T> {
    /// Pairs `value` with `at`.
    pub fn new(value: T, at: Location) -> Self {
        Self { value, at }
    }
}

/// `path` relative to `root` when inside it (the root itself shows as `.`), else unchanged.
pub fn shown_path(root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
        Ok(rel) => rel.to_path_buf(),
        Err(_) => path.to_path_buf(),
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`. An offset past the
/// end, or inside a character, is clamped to the nearest character boundary before it.
pub fn line_col(text: &str, offset: usize) -> (u32, u32) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let col = before[line_start..].chars().count() + 1;
    (saturate(line), saturate(col))
}

/// Where each line of a text starts, so the line and column of an offset cost a binary search
/// and a count of one line's characters rather than a scan from the start of the text.
#[derive(Clone, Debug)]
pub struct LineIndex {
    /// Byte offset of the start of each line; the first is 0.
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes `text` (one pass).
    pub fn new(text: &str) -> Self {
        let starts =
            std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Self { starts }
    }

    /// [`line_col`] of `offset` in `text` (the text this index was built from), and how many
    /// bytes of the text it looked at to count the column.
    pub fn line_col(&self, text: &str, offset: usize) -> ((u32, u32), usize) {
        let mut end = offset.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        // The number of line starts at or before `end` is the 1-based line.
        let line = self.starts.partition_point(|&s| s <= end);
        let start = self.starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        let prefix = text.get(start..end).unwrap_or_default();
        ((saturate(line), saturate(prefix.chars().count() + 1)), prefix.len())
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod location_tests {
    use super::*;

    #[test]
    fn line_col_is_one_based_and_counts_characters() {
        let text = "a = 1\n[tasks.é]\nx";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 4), (1, 5));
        assert_eq!(line_col(text, 6), (2, 1));
        // `]` after the two-byte `é` is the 9th character of line 2.
        let bracket = text.find(']').unwrap();
        assert_eq!(line_col(text, bracket), (2, 9));
        assert_eq!(line_col(text, 10_000), (3, 2));
        // Inside the `é`: clamped back to its start.
        let e = text.find('é').unwrap();
        assert_eq!(line_col(text, e + 1), (2, 8));
    }

    #[test]
    fn the_line_index_agrees_with_the_scan_everywhere() {
        let text = "a = 1\n[tasks.é]\n\nx = '∂'\nlast";
        let index = LineIndex::new(text);
        for offset in 0..text.len() + 3 {
            assert_eq!(index.line_col(text, offset).0, line_col(text, offset), "offset {offset}");
        }
        assert_eq!(LineIndex::new("").line_col("", 5).0, (1, 1));
    }

    #[test]
    fn the_line_index_looks_only_at_the_line_of_the_offset() {
        let line = "x = 'some value'\n";
        let text = line.repeat(10_000);
        let index = LineIndex::new(&text);
        let looked: usize = (0..10_000).map(|i| index.line_col(&text, i * line.len() + 5).1).sum();
        assert_eq!(looked, 10_000 * 5, "each lookup counts only the 5 bytes before it on its line");
    }

    #[test]
    fn locations_show_workspace_relative_paths() {
        let root = Path::new("/ws");
        let at = Location::new(root, Path::new("/ws/apps/web/prova.toml"), 4, 1);
        assert_eq!(at.to_string(), "apps/web/prova.toml:4:1");
        assert_eq!(at.file, Path::new("/ws/apps/web/prova.toml"));
        let outside = Location::new(root, Path::new("/elsewhere/prova.toml"), 1, 2);
        assert_eq!(outside.to_string(), "/elsewhere/prova.toml:1:2");
    }
}
