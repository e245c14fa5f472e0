//! Checks of a trace against what its readers will make of it: [`perfetto`], Perfetto's FXT
//! importer.

pub mod perfetto;
