//! The trace manager: sessions, the provider registry, buffer draining and the archive writer.

pub mod session;
