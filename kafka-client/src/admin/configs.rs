//! Configs of topics, brokers, broker loggers and groups: describe, and alter key by key
//! (KIP-339's incremental alter). A broker's own configs go to that broker, the rest to any
//! broker (which forwards a change to the controller), as Java's admin client sends them.

use std::collections::BTreeMap;

use super::io::{Call, Io};
use super::items::{Answers, per_item};
use super::{Admin, AdminError, Options, PerItem};
use crate::protocol::messages::describe_configs::{
    DescribeConfigsRequest, DescribeConfigsResource, DescribedConfig,
};
use crate::protocol::messages::incremental_alter_configs::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};

/// What has configs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResource {
    /// A topic.
    Topic(String),
    /// One broker's configs.
    Broker(i32),
    /// The cluster-wide default of broker configs.
    BrokerDefault,
    /// One broker's log levels.
    BrokerLogger(i32),
    /// A consumer group (KIP-848 group configs).
    Group(String),
}

impl ConfigResource {
    fn wire(&self) -> (i8, String) {
        match self {
            ConfigResource::Topic(t) => (2, t.clone()),
            ConfigResource::Broker(id) => (4, id.to_string()),
            ConfigResource::BrokerDefault => (4, String::new()),
            ConfigResource::BrokerLogger(id) => (8, id.to_string()),
            ConfigResource::Group(g) => (32, g.clone()),
        }
    }

    /// The broker that must answer (its own configs), if any.
    fn node(&self) -> Option<i32> {
        match self {
            ConfigResource::Broker(id) | ConfigResource::BrokerLogger(id) => Some(*id),
            _ => None,
        }
    }
}

impl std::fmt::Display for ConfigResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigResource::Topic(t) => write!(f, "topic:{t}"),
            ConfigResource::Broker(id) => write!(f, "broker:{id}"),
            ConfigResource::BrokerDefault => write!(f, "broker-default"),
            ConfigResource::BrokerLogger(id) => write!(f, "broker-logger:{id}"),
            ConfigResource::Group(g) => write!(f, "group:{g}"),
        }
    }
}

/// Where a config's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic.
    DynamicTopic,
    /// Set on this broker at run time.
    DynamicBroker,
    /// Set at run time as every broker's default.
    DynamicDefaultBroker,
    /// The broker's `server.properties`.
    StaticBroker,
    /// Kafka's default.
    Default,
    /// A log level set at run time.
    DynamicBrokerLogger,
    /// Set on the group.
    Group,
    /// Another source (its wire id).
    Other(i8),
}

impl ConfigSource {
    fn from_wire(v: i8) -> Self {
        match v {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            8 => ConfigSource::Group,
            v => ConfigSource::Other(v),
        }
    }
}

/// One config of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Its value (`None` when sensitive, or unset).
    pub value: Option<String>,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// Read-only.
    pub read_only: bool,
    /// Sensitive (its value is not shown).
    pub sensitive: bool,
    /// The values at lower levels, highest first: `(name, value, source)`.
    pub synonyms: Vec<(String, Option<String>, ConfigSource)>,
    /// Its documentation.
    pub documentation: Option<String>,
}

/// One change to a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Sets `key` to `value`.
    Set(String, String),
    /// Removes the override of `key` (back to the level below).
    Delete(String),
    /// Adds `value` to the list `key`.
    Append(String, String),
    /// Removes `value` from the list `key`.
    Subtract(String, String),
}

impl ConfigOp {
    fn wire(&self) -> AlterableConfig {
        let (name, config_operation, value) = match self {
            ConfigOp::Set(k, v) => (k, 0, Some(v.clone())),
            ConfigOp::Delete(k) => (k, 1, None),
            ConfigOp::Append(k, v) => (k, 2, Some(v.clone())),
            ConfigOp::Subtract(k, v) => (k, 3, Some(v.clone())),
        };
        AlterableConfig {
            name: name.clone(),
            config_operation,
            value,
        }
    }
}

impl Admin {
    /// The configs of `resources`, by name, per resource (with each value's source, the
    /// values below it, and its documentation).
    pub fn describe_configs(
        &self,
        resources: &[ConfigResource],
        opts: &Options,
    ) -> Result<PerItem<ConfigResource, BTreeMap<String, ConfigEntry>>, AdminError> {
        let (call, mut s) = self.call("describe_configs", opts)?;
        per_item(
            &mut s.io,
            &call,
            resources.to_vec(),
            |io: &mut Io, pending| {
                by_node(
                    io,
                    &call,
                    pending,
                    |rs| DescribeConfigsRequest {
                        resources: rs
                            .iter()
                            .map(|r| {
                                let (resource_type, resource_name) = r.wire();
                                DescribeConfigsResource {
                                    resource_type,
                                    resource_name,
                                    configuration_keys: None,
                                }
                            })
                            .collect(),
                        include_synonyms: true,
                        include_documentation: true,
                    },
                    |resp| {
                        resp.results
                            .into_iter()
                            .map(|x| {
                                let r = AdminError::check(
                                    call.op,
                                    x.error_code,
                                    x.error_message.as_deref(),
                                )
                                .map(|()| entries(x.configs));
                                ((x.resource_type, x.resource_name), r)
                            })
                            .collect()
                    },
                )
            },
        )
    }

    /// Applies `changes` per resource (each resource's changes all or none; one resource
    /// failing does not fail the others). With [`Options::validate_only`] only checks them.
    pub fn alter_configs(
        &self,
        changes: &[(ConfigResource, Vec<ConfigOp>)],
        opts: &Options,
    ) -> Result<PerItem<ConfigResource, ()>, AdminError> {
        let (call, mut s) = self.call("alter_configs", opts)?;
        let ops: BTreeMap<ConfigResource, &Vec<ConfigOp>> =
            changes.iter().map(|(r, o)| (r.clone(), o)).collect();
        let items = ops.keys().cloned().collect();
        per_item(&mut s.io, &call, items, |io: &mut Io, pending| {
            by_node(
                io,
                &call,
                pending,
                |rs| IncrementalAlterConfigsRequest {
                    resources: rs
                        .iter()
                        .map(|r| {
                            let (resource_type, resource_name) = r.wire();
                            AlterConfigsResource {
                                resource_type,
                                resource_name,
                                configs: ops[r].iter().map(ConfigOp::wire).collect(),
                            }
                        })
                        .collect(),
                    validate_only: opts.validate_only,
                },
                |resp| {
                    resp.responses
                        .into_iter()
                        .map(|x| {
                            let r = AdminError::check(
                                call.op,
                                x.error_code,
                                x.error_message.as_deref(),
                            );
                            ((x.resource_type, x.resource_name), r)
                        })
                        .collect()
                },
            )
        })
    }
}

/// Sends one request per node (a broker's own resources to it, the rest together to any
/// broker) and matches each answer's results, by resource type and name, to its resources.
fn by_node<R: crate::protocol::Request, T>(
    io: &mut Io,
    call: &Call,
    pending: &[ConfigResource],
    request: impl Fn(&[ConfigResource]) -> R,
    results: impl Fn(R::Response) -> Vec<((i8, String), Result<T, AdminError>)>,
) -> Result<Answers<ConfigResource, T>, AdminError> {
    let mut groups: BTreeMap<Option<i32>, Vec<ConfigResource>> = BTreeMap::new();
    for r in pending {
        groups.entry(r.node()).or_default().push(r.clone());
    }
    if groups.keys().any(Option::is_some) {
        // The brokers must be known to connect to them (first: it replaces the bootstrap
        // nodes any_node may pick).
        io.metadata(call, Some(Vec::new()))?;
    }
    let mut requests = Vec::new();
    for (node, rs) in &groups {
        let node = match node {
            Some(n) => *n,
            None => io.any_node(call)?,
        };
        requests.push((node, request(rs)));
    }
    let mut answers = Vec::new();
    for (rs, (_, resp)) in groups.into_values().zip(io.fan_out(call, requests)) {
        match resp {
            Err(e) => answers.extend(rs.into_iter().map(|r| (r, Err(e.clone())))),
            Ok(resp) => {
                for (wire, r) in results(resp) {
                    if let Some(res) = rs.iter().find(|x| x.wire() == wire) {
                        answers.push((res.clone(), r));
                    }
                }
            }
        }
    }
    Ok(answers)
}

fn entries(configs: Vec<DescribedConfig>) -> BTreeMap<String, ConfigEntry> {
    configs
        .into_iter()
        .map(|c| {
            (
                c.name,
                ConfigEntry {
                    value: c.value,
                    source: ConfigSource::from_wire(c.config_source),
                    read_only: c.read_only,
                    sensitive: c.is_sensitive,
                    synonyms: c
                        .synonyms
                        .into_iter()
                        .map(|s| (s.name, s.value, ConfigSource::from_wire(s.source)))
                        .collect(),
                    documentation: c.documentation,
                },
            )
        })
        .collect()
}
