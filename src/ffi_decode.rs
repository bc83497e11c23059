//! The C entry points of the record decoder.
