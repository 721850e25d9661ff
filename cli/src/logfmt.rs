//! How prova's own log lines read on a user's terminal: a warning is one line,
//! `prova: warning: <message> (<field>=<value>, …)`, whichever crate raised it — the format
//! prova's other warnings use (the farm fallback, a task that left processes behind, a run's
//! notices), ripgrep's `rg: …` and cargo's `warning: …` put together. An error-level line
//! reads `prova: error: …`. Info and debug lines (`-v`, `-vv`) keep tracing's full format
//! (time, level, target): they are diagnostics, not messages. The daemons (`prova
//! coordinator`, `prova worker`) log every level in the full format, for journald and
//! collectors.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The prefix every warning prova prints starts with.
pub const WARNING: &str = "prova: warning: ";

/// The event format of a user's command: [`WARNING`] lines for warnings, full lines below.
pub struct CliFormat {
    /// Paint `warning`/`error` (stderr is a terminal, or `--color always`).
    pub color: bool,
    /// The format of info and debug lines.
    pub full: format::Format,
}

impl<S, N> FormatEvent<S, N> for CliFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        let (tag, paint) = match level {
            Level::ERROR => ("error", "31"),
            Level::WARN => ("warning", "33"),
            _ => return self.full.format_event(ctx, writer, event),
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let tag = if self.color { format!("\x1b[{paint}m{tag}\x1b[0m") } else { tag.to_owned() };
        write!(writer, "prova: {tag}: {}", fields.message)?;
        // Span fields (a task, a worker) say where; rare in a user's command.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(f) = ext.get::<FormattedFields<N>>().filter(|f| !f.is_empty()) {
                    fields.rest.push(f.to_string());
                }
            }
        }
        if !fields.rest.is_empty() {
            write!(writer, " ({})", fields.rest.join(", "))?;
        }
        writeln!(writer)
    }
}

/// An event's message and its other fields as `name=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    fn logged(color: bool, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_max_level(Level::DEBUG)
            .with_ansi(false)
            .event_format(CliFormat { color, full: format::Format::default().with_ansi(false) })
            .finish();
        tracing::subscriber::with_default(sub, f);
        let bytes = buf.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn a_warning_is_one_line_in_the_one_format() {
        let out = logged(false, || tracing::warn!("--filter `x` matches no project"));
        assert_eq!(out, "prova: warning: --filter `x` matches no project\n");
        let out = logged(false, || tracing::warn!(task = "web#build", n = 3, "slow {}", "disk"));
        assert_eq!(out, "prova: warning: slow disk (task=web#build, n=3)\n");
        let out = logged(false, || tracing::error!("gone"));
        assert_eq!(out, "prova: error: gone\n");
        let out = logged(true, || tracing::warn!("painted"));
        assert_eq!(out, "prova: \x1b[33mwarning\x1b[0m: painted\n");
    }

    #[test]
    fn diagnostics_keep_the_full_format() {
        let out = logged(false, || tracing::info!("workspace loaded"));
        assert!(out.contains(" INFO ") && out.contains("workspace loaded"), "{out}");
        assert!(!out.starts_with("prova:"), "{out}");
    }
}
