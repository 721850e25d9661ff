//! What a task reads: the workspace file list ([`files`]), the declared inputs it leaves out
//! (gitignored, [`unlisted`]), and each task's slice of it ([`select`]) with the rules kept
//! to judge paths after the run ([`scope`]), listed again after it ran without git where
//! nothing moved ([`relist`]); and what no task's clean or restore may delete
//! ([`protect`]).

pub mod files;
pub mod protect;
pub mod relist;
pub mod scope;
pub mod select;
pub mod unlisted;

pub use files::{FileList, enumerate};
pub use select::{InputScope, InputSets, TaskInputs, resolve};
