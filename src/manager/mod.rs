//! (module under construction: see shared/DESIGN.md for what `manager` owns)
