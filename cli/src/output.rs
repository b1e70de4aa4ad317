//! Standard output of the client commands. A reader that goes away (`tailstream stream
//! describe | head`) ends the command quietly, as it ends `cat`: no panic, no error message.
//! The crate's `println!` is this module's `line`.

use std::io::{self, Write};

/// Writes one line to stdout; a closed pipe ends the process quietly, any other failure too,
/// with a message (there is no one left to print for, but a full disk deserves a word).
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(error) = written {
        exit_on(&error);
    }
}

/// Ends the process: quietly for a closed pipe, with a message otherwise.
pub fn exit_on(error: &io::Error) -> ! {
    if error.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("tailstream: writing stdout: {error}");
    std::process::exit(1);
}
