//! Produce (key 0): record batches for partitions of topics.
//!
//! Versions 3-12 (record batch v2 needs 3; Kafka 4 removed 0-2); flexible from 9; v10 adds
//! the new leader as a tagged field of a failed partition (KIP-951).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::record::BatchBytes;
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// One partition's records: an encoded record batch, borrowed to avoid a copy (in the chunks
/// the producer wrote it into).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProduceData<'a> {
    /// Partition index.
    pub index: i32,
    /// One or more encoded record batches.
    pub records: BatchBytes<'a>,
}

/// One topic's partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicProduceData<'a> {
    /// Topic name.
    pub name: &'a str,
    /// Its partitions.
    pub partitions: Vec<PartitionProduceData<'a>>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest<'a> {
    /// Null unless transactional.
    pub transactional_id: Option<&'a str>,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    /// How long the broker may wait for replication.
    pub timeout_ms: i32,
    /// Per topic.
    pub topics: Vec<TopicProduceData<'a>>,
}

impl Request for ProduceRequest<'_> {
    const API_KEY: ApiKey = ApiKey::Produce;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 12;
    const FLEXIBLE_FROM: i16 = 9;
    type Response = ProduceResponse;
    const CLIENT_THROTTLES_FROM: i16 = 6;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.encode_parts(version, out, |out, records| {
            records.chunks().for_each(|c| out.extend_from_slice(c));
        });
    }

    fn size_hint(&self) -> usize {
        let mut n = 32 + self.transactional_id.map_or(0, str::len);
        for t in &self.topics {
            n += 16 + t.name.len();
            for p in &t.partitions {
                n += 16 + p.records.len();
            }
        }
        n
    }
}

impl<'a> ProduceRequest<'a> {
    /// [`encode`](Request::encode) without the records' bytes: `records_at` gets, for each
    /// partition in order, the offset in `out` where its batch's bytes belong.
    pub fn encode_without_records(
        &self,
        version: i16,
        out: &mut Vec<u8>,
        records_at: &mut Vec<usize>,
    ) {
        self.encode_parts(version, out, |out, _| records_at.push(out.len()));
    }

    /// The records' bytes of every partition.
    pub fn records_len(&self) -> usize {
        let partitions = self.topics.iter().flat_map(|t| &t.partitions);
        partitions.map(|p| p.records.len()).sum()
    }

    /// The request, each partition's records handed to `records` (after their length).
    fn encode_parts(
        &self,
        version: i16,
        out: &mut Vec<u8>,
        mut records: impl FnMut(&mut Vec<u8>, BatchBytes<'_>),
    ) {
        let flexible = Self::is_flexible(version);
        out.put_nullable_string(self.transactional_id, flexible);
        self.acks.write(out);
        self.timeout_ms.write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.index.write(out);
                out.put_length(Some(p.records.len()), flexible);
                records(out, p.records);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }

    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'a>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let transactional_id = r.length_prefixed_str(flexible)?;
        let acks = i16::read(r)?;
        let timeout_ms = i32::read(r)?;
        let topics = r.array_of(flexible, 2, |r| {
            let name = r
                .length_prefixed_str(flexible)?
                .ok_or(DecodeError::UnexpectedNull("topic name"))?;
            let partitions = r.array_of(flexible, 5, |r| {
                let index = i32::read(r)?;
                let records = r
                    .nullable_bytes(flexible)?
                    .ok_or(DecodeError::UnexpectedNull("records"))?;
                r.skip_tagged_fields(flexible)?;
                Ok(PartitionProduceData {
                    index,
                    records: records.into(),
                })
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(TopicProduceData { name, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            transactional_id,
            acks,
            timeout_ms,
            topics,
        })
    }
}

/// A record the broker rejected, by its index in the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Index of the record in its batch.
    pub batch_index: i32,
    /// Why.
    pub message: Option<String>,
}

/// One partition's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProduceResponse {
    /// Partition index.
    pub index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// Offset of the first record of the batch.
    pub base_offset: i64,
    /// Broker time if the topic uses LogAppendTime, else -1.
    pub log_append_time_ms: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Rejected records (v8+).
    pub record_errors: Vec<RecordError>,
    /// Error detail (v8+).
    pub error_message: Option<String>,
    /// The new leader `(id, epoch)` on a leadership error (v10+, tagged).
    pub current_leader: Option<(i32, i32)>,
}

/// One topic's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicProduceResponse {
    /// Topic.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<PartitionProduceResponse>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceResponse {
    /// Per topic.
    pub topics: Vec<TopicProduceResponse>,
    /// Throttle time.
    pub throttle_time_ms: i32,
}

impl Response for ProduceResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = ProduceRequest::is_flexible(version);
        let topics = r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, 14, |r| {
                let index = i32::read(r)?;
                let error_code = ErrorCode::from_i16(i16::read(r)?);
                let base_offset = i64::read(r)?;
                let log_append_time_ms = i64::read(r)?;
                let log_start_offset = if version >= 5 { i64::read(r)? } else { -1 };
                let (record_errors, error_message) = if version >= 8 {
                    let errs = r.array_of(flexible, 5, |r| {
                        let e = RecordError {
                            batch_index: i32::read(r)?,
                            message: r.nullable_string(flexible)?,
                        };
                        r.skip_tagged_fields(flexible)?;
                        Ok(e)
                    })?;
                    (errs, r.nullable_string(flexible)?)
                } else {
                    (Vec::new(), None)
                };
                let mut current_leader = None;
                if flexible {
                    for (tag, bytes) in r.tagged_fields()? {
                        if tag == 0 && version >= 10 {
                            let mut t = Reader::new(bytes);
                            current_leader = Some((i32::read(&mut t)?, i32::read(&mut t)?));
                            t.skip_tagged_fields(true)?;
                            t.expect_end()?;
                        }
                    }
                }
                Ok(PartitionProduceResponse {
                    index,
                    error_code,
                    base_offset,
                    log_append_time_ms,
                    log_start_offset,
                    record_errors,
                    error_message,
                    current_leader,
                })
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(TopicProduceResponse { name, partitions })
        })?;
        let throttle_time_ms = i32::read(r)?;
        // Tag 0 (v10+) lists node endpoints of new leaders; the metadata refresh that follows a
        // leadership error finds them too, so they are skipped.
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            topics,
            throttle_time_ms,
        })
    }
}

impl ProduceResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = ProduceRequest::is_flexible(version);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.index.write(out);
                p.error_code.code().write(out);
                p.base_offset.write(out);
                p.log_append_time_ms.write(out);
                if version >= 5 {
                    p.log_start_offset.write(out);
                }
                if version >= 8 {
                    out.put_length(Some(p.record_errors.len()), flexible);
                    for e in &p.record_errors {
                        e.batch_index.write(out);
                        out.put_nullable_string(e.message.as_deref(), flexible);
                        out.put_empty_tagged_fields(flexible);
                    }
                    out.put_nullable_string(p.error_message.as_deref(), flexible);
                }
                if flexible {
                    match (p.current_leader, version >= 10) {
                        (Some((id, epoch)), true) => {
                            let mut v = Vec::new();
                            id.write(&mut v);
                            epoch.write(&mut v);
                            v.put_empty_tagged_fields(true);
                            out.put_tagged_fields(&[(0, v)]);
                        }
                        _ => out.put_empty_tagged_fields(true),
                    }
                }
            }
            out.put_empty_tagged_fields(flexible);
        }
        self.throttle_time_ms.write(out);
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;

    pub(crate) fn sample(version: i16) -> ProduceResponse {
        ProduceResponse {
            topics: vec![TopicProduceResponse {
                name: "t".into(),
                partitions: vec![
                    PartitionProduceResponse {
                        index: 0,
                        error_code: ErrorCode::None,
                        base_offset: 100,
                        log_append_time_ms: -1,
                        log_start_offset: if version >= 5 { 0 } else { -1 },
                        record_errors: vec![],
                        error_message: None,
                        current_leader: None,
                    },
                    PartitionProduceResponse {
                        index: 1,
                        error_code: ErrorCode::NotLeaderOrFollower,
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        record_errors: if version >= 8 {
                            vec![RecordError {
                                batch_index: 2,
                                message: Some("bad".into()),
                            }]
                        } else {
                            vec![]
                        },
                        error_message: if version >= 8 {
                            Some("moved".into())
                        } else {
                            None
                        },
                        current_leader: if version >= 10 { Some((3, 7)) } else { None },
                    },
                ],
            }],
            throttle_time_ms: 0,
        }
    }

    #[test]
    fn a_frame_without_its_records_and_the_records_in_place_is_the_whole_frame() {
        use crate::protocol::{encode_frame, encode_produce_frame};
        let (a, b1, b2) = ([1u8; 70], [2u8; 5], [3u8; 9]);
        let grown = vec![b2.to_vec(), vec![4u8; 3]];
        let chunked = BatchBytes::new(&b1, &grown);
        for v in ProduceRequest::MIN_VERSION..=ProduceRequest::MAX_VERSION {
            let part = |index, records| PartitionProduceData { index, records };
            let req = ProduceRequest {
                transactional_id: Some("tx"),
                acks: -1,
                timeout_ms: 30_000,
                topics: vec![
                    TopicProduceData {
                        name: "t",
                        partitions: vec![part(0, a[..].into()), part(3, chunked)],
                    },
                    TopicProduceData {
                        name: "u",
                        partitions: vec![part(1, b2[..].into())],
                    },
                ],
            };
            let whole = encode_frame(&req, v, 7, Some("me"));
            let (mut frame, mut at) = (Vec::new(), Vec::new());
            encode_produce_frame(&req, v, 7, Some("me"), &mut frame, &mut at);
            assert_eq!(at.len(), 3);
            let mut gathered = Vec::new();
            let mut from = 0;
            let records = req.topics.iter().flat_map(|t| &t.partitions);
            for (&at, p) in at.iter().zip(records) {
                gathered.extend_from_slice(&frame[from..at]);
                gathered.extend_from_slice(&p.records.to_vec());
                from = at;
            }
            gathered.extend_from_slice(&frame[from..]);
            assert_eq!(gathered, whole, "v{v}");
        }
    }

    #[test]
    fn roundtrip_every_version() {
        for v in ProduceRequest::MIN_VERSION..=ProduceRequest::MAX_VERSION {
            let batch = [1u8, 2, 3];
            let req = ProduceRequest {
                transactional_id: None,
                acks: -1,
                timeout_ms: 30_000,
                topics: vec![TopicProduceData {
                    name: "t",
                    partitions: vec![PartitionProduceData {
                        index: 2,
                        records: batch[..].into(),
                    }],
                }],
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            assert!(req.size_hint() >= buf.len(), "v{v}: hint too small");
            let mut r = Reader::new(&buf);
            assert_eq!(ProduceRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let resp = sample(v);
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(ProduceResponse::decode(&mut r, v).unwrap(), resp, "v{v}");
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| ProduceResponse::decode(r, v));
        }
    }
}
