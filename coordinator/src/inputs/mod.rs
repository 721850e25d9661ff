//! What a task reads: the workspace file list ([`files`]) and each task's slice of it
//! ([`select`]).

pub mod files;
pub mod select;

pub use files::{FileList, enumerate};
pub use select::{InputScope, InputSets, TaskInputs, resolve};
