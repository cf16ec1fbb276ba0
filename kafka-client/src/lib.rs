//! A Kafka producer for Apache Kafka 4.x that takes part in Coordinated Restore at Checkpoint.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod protocol;
