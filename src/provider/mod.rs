//! (module under construction: see shared/DESIGN.md for what `provider` owns)
