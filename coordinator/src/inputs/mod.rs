//! What a task reads: the workspace file list ([`files`]), the declared inputs it leaves out
//! (gitignored, [`unlisted`]), and each task's slice of it ([`select`]).

pub mod files;
pub mod select;
pub mod unlisted;

pub use files::{FileList, enumerate};
pub use select::{InputScope, InputSets, TaskInputs, resolve};
