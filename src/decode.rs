//! Decoding of perf records by `sample_type` (see the module docs to come).
