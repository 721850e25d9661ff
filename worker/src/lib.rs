//! prova worker (modules land here).
