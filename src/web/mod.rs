//! The service's HTTP listeners: the accept loop they share ([`listener`]), how it shares out
//! connections under its cap ([`slots`]), what they report of them ([`metrics`]), and the metrics
//! and probes port ([`probes`]); the console's routes are in [`crate::console`].

pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod probes;
pub(crate) mod slots;
