//! prova integration harness.
