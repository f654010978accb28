"""A reference outbox writer in Python (docs/contract.md): it writes your
DynamoDB items and outbox messages in one TransactWriteItems, as the Go
dynamo.Writer does, with boto3 only."""

from .contract import (CONTRACT_VERSION, Config, bucket_for, bucket_for_key, encode_headers, decode_headers,
                       murmur2, new_id, parse_config)
from .errors import (BucketCountChangeError, ConditionFailedError, ConfigError, ConflictError, OutboxError, OutcomeUnknownError, RejectedError,
                     SequenceFencedError, ThrottledError, ValidationError)
from .writer import Message, Result, Writer, new_client

__all__ = [
    "CONTRACT_VERSION", "Config", "bucket_for", "bucket_for_key", "encode_headers", "decode_headers", "murmur2",
    "new_id", "parse_config", "BucketCountChangeError", "ConditionFailedError", "ConfigError", "ConflictError", "OutboxError",
    "OutcomeUnknownError", "RejectedError", "SequenceFencedError", "ThrottledError", "ValidationError", "Message",
    "Result", "Writer", "new_client",
]
