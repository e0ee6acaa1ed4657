//! spindle-core
