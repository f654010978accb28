"""The writer's typed errors. Each has a code (Outbox.ConditionFailed, ...,
the names issue 19 gives the enqueue function's errors, so callers match one
set) and says what to do."""

from __future__ import annotations


class OutboxError(Exception):
    """Base of the writer's errors. released lists the (bucket, sequence)
    numbers the writer reserved and fenced again after the failure;
    release_error is set when fencing some of them failed (relays fence them
    after their gap timeout)."""

    code = "Outbox.Error"

    def __init__(self, message: str):
        super().__init__(message)
        self.released: list[tuple[int, int]] = []
        self.release_error: Exception | None = None


class ValidationError(OutboxError):
    """Bad input; nothing was written and nothing reserved. index is the
    message's position (-1 for the transaction), field what to fix."""

    code = "Outbox.Validation"

    def __init__(self, index: int, field: str, reason: str):
        where = f"message {index}" if index >= 0 else "the transaction"
        super().__init__(f"outbox: invalid {field} of {where}: {reason}")
        self.index, self.field, self.reason = index, field, reason


class ConfigError(OutboxError):
    """The outbox's tables or config item cannot be used: missing, malformed,
    or (unknown=True) of a format version or mode this writer does not
    understand — upgrade the writer. Raised by Writer(), before any write."""

    code = "Outbox.Config"

    def __init__(self, reason: str, unknown: bool = False):
        super().__init__(f"outbox: {reason}")
        self.reason, self.unknown = reason, unknown


class ConditionFailedError(OutboxError):
    """A condition on one of your items failed (caller_reasons[i] is the
    cancellation reason of your item i, with Item as it was). Nothing was
    written: re-read the aggregate and retry the whole operation."""

    code = "Outbox.ConditionFailed"

    def __init__(self, message: str, caller_reasons: list):
        super().__init__(message)
        self.caller_reasons = caller_reasons


class ConflictError(OutboxError):
    """Conflicting transactions cancelled every attempt; nothing was written."""

    code = "Outbox.Conflict"


class ThrottledError(OutboxError):
    """DynamoDB throttled every attempt; nothing was written."""

    code = "Outbox.Throttled"


class SequenceFencedError(OutboxError):
    """Relays fenced the reserved numbers on every attempt (this writer is
    slower than their gap timeout); nothing was written."""

    code = "Outbox.SequenceFenced"


class BucketCountChangeError(OutboxError):
    """The writer could not follow an online BucketCount change: the
    counters contradict the config item (edited by hand), a change an older
    version left frozen could not be aborted, or the epoch kept changing
    while it reserved. Nothing was written."""

    code = "Outbox.BucketCountChange"


class RejectedError(OutboxError):
    """DynamoDB refused the request (validation, a missing table, access);
    nothing was written and retrying the same request cannot help."""

    code = "Outbox.Rejected"


class OutcomeUnknownError(OutboxError):
    """The transaction may have committed (no response). The reserved
    numbers are not fenced: if it did not commit, relays fence them after
    their gap timeout. The writer has already resent it, byte for byte with
    the same client_request_token, max_attempts times: read your items to
    learn whether it committed before writing again. Another write() cannot
    resend it (it reserves new sequence numbers), so with the same token
    DynamoDB refuses that one for 10 minutes (IdempotentParameterMismatch),
    which is this error too: an earlier write with the token may have
    committed; that write wrote nothing and released (fenced) its own
    numbers."""

    code = "Outbox.OutcomeUnknown"

    def __init__(self, message: str, client_request_token: str):
        super().__init__(message)
        self.client_request_token = client_request_token
