//! placeholder: written by the artifact helper
