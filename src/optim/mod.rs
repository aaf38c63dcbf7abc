//! Optimizers.
