//! Stateless batch functions of the Sampler (being written).
