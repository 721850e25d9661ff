//! Writers for prova's own stderr (the tracing log and the final error line) that treat a
//! closed pipe as a sink: `prova worker 2>&1 | head`, a log collector that went away, or a
//! supervisor that closed its end must not turn a log line into a panic (`eprintln!` and
//! tracing-subscriber's internal-error report both panic when stderr fails). Stdout is
//! handled where it is written: [`crate::commands::common::print`] and the renderer.

use std::io::{self, ErrorKind, Write};

/// `std::io::stderr()`, except that a failed write (a closed pipe, a full disk behind a
/// redirect) reports success and drops the bytes: nobody can read them anyway, and the
/// command goes on to exit with its own code.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match io::stderr().lock().write(buf) {
            Err(e) if e.kind() != ErrorKind::Interrupted => Ok(buf.len()),
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match io::stderr().lock().flush() {
            Err(e) if e.kind() != ErrorKind::Interrupted => Ok(()),
            r => r,
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Self::Writer {
        Stderr
    }
}

/// Writes one line to stderr, `eprintln!` without the panic.
pub fn eprint_line(text: &str) {
    let mut w = Stderr;
    let _ = w.write_all(format!("{text}\n").as_bytes()).and_then(|()| w.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_always_reports_the_whole_buffer() {
        let mut w = Stderr;
        assert_eq!(w.write(b"").unwrap(), 0);
        w.flush().unwrap();
    }
}
