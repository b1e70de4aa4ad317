//! tailstream_cli: the part of the `tailstream` command that is tested on its own. The binary
//! (`main.rs`) holds the commands and servers and has no unit tests, so the test build never
//! compiles it a second time.
//!
//! - [`human`]: sizes and counts as people write them, for every command's text output.

pub mod human;
