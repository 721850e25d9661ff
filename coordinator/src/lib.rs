//! prova coordinator (modules land here).
