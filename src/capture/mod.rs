//! (module under construction: see shared/DESIGN.md for what `capture` owns)
