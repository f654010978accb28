"""Writer: the caller's items and outbox messages in one TransactWriteItems,
per docs/contract.md ("Writing a message")."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import random
import threading
import time
import uuid

from . import contract
from .errors import (BucketCountChangeError, ConditionFailedError, ConfigError, ConflictError, OutcomeUnknownError,
                     RejectedError, SequenceFencedError, ThrottledError, ValidationError)

DEFAULT_MAX_ATTEMPTS = 6
# Kept for callers that pass it: BucketCount changes no longer make a
# writer wait (docs/design.md section 13, the cut-over), so there is no
# deadline to be past.
DEFAULT_CHANGE_GRACE_SECONDS = 10.0
# How many times one write follows a BucketCount change (a cut, a new
# epoch) before it gives up: changes never overlap, so two suffice.
MAX_EPOCH_MEETINGS = 4

_THROTTLE_CODES = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
                   "LimitExceededException", "TooManyRequestsException", "Throttling"}
_AMBIGUOUS_CODES = {"TransactionInProgressException", "InternalServerError", "ServiceUnavailable", "InternalFailure"}
_ACCESS_DENIED_CODES = {"AccessDeniedException", "AccessDenied"}

# Why a table with replicas is refused outside region mode, and what to do
# (the Go writer's refusal says the same: store/dynamo/replicas.go).
_GLOBAL_TABLE_FIX = (
    "the outbox does not support DynamoDB global tables in the default mode: writers in two regions increment the same "
    "sequence counter, replication resolves it last-writer-wins, so both regions' messages get the same (bucket, sequence) "
    "and one overwrites the other — a committed message is lost without an error. Put the outbox in region mode (the "
    "stack's Regions parameter, outbox init --regions; docs/deploy.md, Global tables) and give the writer region=, or use "
    "tables without replicas (remove them, or run one outbox with its own tables per region)")


@dataclasses.dataclass
class Message:
    """One outbox message. key None is keyless (no order promised); b"" is a
    real, empty key. value None is a Kafka tombstone. headers are (key str,
    value bytes or None) pairs, in order. id (a canonical UUID) and
    created_ms (Unix ms) are set by the writer when None; bucket and
    sequence are the writer's to assign (a message with either set is
    refused): read them from the result."""

    topic: str
    value: bytes | None = None
    key: bytes | None = None
    headers: list = dataclasses.field(default_factory=list)
    partition: int | None = None
    id: str | None = None
    created_ms: int | None = None
    bucket: int = -1
    sequence: int = 0


@dataclasses.dataclass
class Result:
    """The written messages, in the order given, with id, bucket, sequence
    and created_ms set; the client request token that committed them."""

    messages: list
    client_request_token: str
    attempts: int
    reservations: int  # how many times numbers were reserved (1 + re-reservations after fences)
    rebuckets: int = 0  # how many times the messages moved to a new BucketCount (an online change)
    paused_seconds: float = 0.0  # always 0: a BucketCount change no longer makes a write wait (kept for callers)
    bucket_count: int = 0  # the BucketCount the messages were written under
    epoch: int = 0  # and its epoch
    aborted_changes: int = 0  # frozen BucketCount changes of a version before the cut-over this write aborted
    cuts: int = 0  # counters this write cut into its epoch (a change's changer had not reached them)


def new_client(endpoint_url: str | None = None, region_name: str | None = None, session=None):
    """A boto3 DynamoDB client as the Writer needs it: botocore's retries
    off (total_max_attempts=1), since the Writer is the one retry layer and
    must see every attempt to know whether a transaction may have committed."""
    import boto3
    from botocore.config import Config as BotoConfig

    cfg = BotoConfig(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=20)
    return (session or boto3).client("dynamodb", endpoint_url=endpoint_url, region_name=region_name, config=cfg)


def _code(exc) -> str:
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict):
        return resp.get("Error", {}).get("Code", "") or ""
    return ""


def _kind(exc) -> str:
    """ambiguous (may have run), throttled, conflict or rejected."""
    code = _code(exc)
    if code in _THROTTLE_CODES:
        return "throttled"
    if code == "TransactionConflictException":
        return "conflict"
    if code == "" or code in _AMBIGUOUS_CODES:
        return "ambiguous"  # no API answer: a timeout, a lost connection
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return "ambiguous" if status >= 500 else "rejected"


class _EpochRefused(Exception):
    """A counter update refused for its BucketCount epoch: the counter
    serves epoch counter (negative: frozen by a version before the
    cut-over for the change to epoch -counter), with cut point fence (cf)."""

    def __init__(self, bucket, epoch, old):
        super().__init__(f"bucket {bucket}'s counter does not serve epoch {epoch}")
        self.bucket, self.epoch = bucket, epoch
        self.counter = _num(old, "ce")
        self.fence = _num(old, "cf")


class _CounterAhead(BucketCountChangeError):
    """A cut into epoch refused because a later change cut the counter
    into counter first (what _meet_epoch follows)."""

    def __init__(self, bucket, epoch, counter):
        super().__init__(f"outbox: cut bucket {bucket} into BucketCount epoch {epoch}: its counter serves "
                         f"epoch {counter}; nothing was written")
        self.bucket, self.epoch, self.counter = bucket, epoch, counter


def _num(item, name) -> int:
    av = (item or {}).get(name) or {}
    try:
        return int(av.get("N", "0"))
    except ValueError:
        return 0


class _WriteState:
    """One write's view (BucketCount, epoch) and what changes cost it."""

    def __init__(self, view):
        self.view, self.rebuckets, self.paused_seconds = view, 0, 0.0
        self.aborted_changes, self.cuts = 0, 0

    def result(self, msgs, token, attempts, reservations):
        return Result(msgs, token, attempts, reservations, self.rebuckets, self.paused_seconds, self.view[0], self.view[1],
                      self.aborted_changes, self.cuts)


class _Outcome:
    def __init__(self, kind, detail="", caller_reasons=None, cancelled=False):
        self.kind, self.detail, self.caller_reasons, self.cancelled = kind, detail, caller_reasons or [], cancelled


class Writer:
    """Writes outbox messages in the same transaction as the caller's items.

    Writer() reads the config item (the bucket count and its epoch, the
    mode and its retention, the topics the outbox serves, region mode's
    regions, MaxMessageBytes and the stamped headers' names, the defaults
    for those it does not state: no argument states them) and refuses, with a ConfigError, an outbox it does not
    understand (a config item version other than 1, 2 or 3, an unknown
    mode), a malformed config item, or a missing table. Read once: restart
    writers after the mode, topics or regions change.

    Outside region mode it also refuses, with a ConfigError naming the
    table and its replicas' regions, a messages or control table with
    replicas (a DynamoDB global table): writers in two regions would
    reserve the same sequence numbers and one region's message would
    overwrite the other's, silently. It asks DescribeTable of both tables
    at once (the writer needs dynamodb:DescribeTable on both; without it,
    a ConfigError says to grant it). Nothing is written before any refusal.

    BucketCount changes online (docs/design.md section 13, the cut-over):
    every reservation is conditional on the BucketCount epoch the writer
    knows, so the writer learns of a change from the reservation it makes
    anyway, and never waits for it. A counter at a later epoch: it fences
    what it reserved, reads the config item, moves the messages to the new
    count's buckets and reserves again. A counter at an earlier epoch (the
    change's changer has not cut it yet): it cuts it (records its cut point
    and moves it to its epoch) and reserves again. Every message item is
    stamped with the epoch its number was reserved at (ep, from epoch 1),
    which the relays' gate reads. A change a version before the cut-over
    left frozen (nb) is aborted when met.

    Region mode (the config item lists regions, for DynamoDB global
    tables): region names this writer's region, required then (a
    ConfigError without it, or with a region not listed) and refused in the
    default mode; it is an AWS region, and the client's (meta.region_name)
    must be the same (a ConfigError otherwise: the writer would reserve its
    region's sequence numbers in another region's replica). Every message
    goes to the region's slice of buckets, lo + bucket(key, bc / regions).

    client is a boto3 DynamoDB client with botocore's retries off (see
    new_client); the writer retries itself, MaxAttempts-style: max_attempts
    bounds the requests of each call.
    """

    def __init__(self, client, messages_table: str, control_table: str, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 fence_ttl_seconds: int = contract.DEFAULT_FENCE_TTL_SECONDS, region: str | None = None,
                 change_grace_seconds: float = DEFAULT_CHANGE_GRACE_SECONDS, clock=time.time, sleep=time.sleep):
        if not messages_table or not control_table or messages_table == control_table:
            raise ConfigError("messages_table and control_table are required and must differ")
        if max_attempts < 1:
            raise ConfigError(f"max_attempts={max_attempts}: must be at least 1")
        if change_grace_seconds < 0:
            raise ConfigError(f"change_grace_seconds={change_grace_seconds}: must be at least 0")
        retries = getattr(getattr(getattr(client, "meta", None), "config", None), "retries", None)
        if retries is not None and retries.get("total_max_attempts") != 1:
            raise ConfigError("the client retries by itself (botocore retries are on); create it with "
                              "outbox_writer.new_client() or Config(retries={'total_max_attempts': 1}): "
                              "the writer is the one retry layer")
        self.client, self.messages_table, self.control_table = client, messages_table, control_table
        self.max_attempts, self.fence_ttl_seconds = max_attempts, fence_ttl_seconds
        self.clock, self.sleep = clock, sleep
        self.region, self.change_grace_seconds = region, change_grace_seconds
        # Test seams: called with the reservations before each commit; with
        # the config item when a write starts waiting for a change to end.
        self.after_reserve = None
        self.on_change_wait = None
        self.config = self._read_config()
        # The shared settings are the config item's: no argument states them.
        self.max_message_bytes = self.config.max_message_bytes or contract.DEFAULT_MAX_MESSAGE_BYTES
        self.stamped_headers = self.config.stamped_headers
        self._check_region()
        # The BucketCount and epoch messages are put under; a reservation
        # refused for its epoch replaces them (_await_epoch).
        self._view_lock = threading.Lock()
        self._view = (self.config.bucket_count, self.config.epoch)
        self._check_tables()

    # --- setup -----------------------------------------------------------

    def _read_config(self) -> contract.Config:
        try:
            out = self._call(self.client.get_item, TableName=self.control_table, Key=contract.CONFIG_KEY, ConsistentRead=True)
        except Exception as e:  # noqa: BLE001 - translated at this boundary
            if _code(e) == "ResourceNotFoundException":
                raise ConfigError(f"the control table {self.control_table} does not exist (create the outbox first)") from e
            raise
        item = out.get("Item")
        try:
            cfg = contract.parse_config(item)
        except contract.ConfigItemError as e:
            raise ConfigError(f"config item in {self.control_table}: {e.reason}", unknown=e.unknown) from None
        paired = (item.get("mt") or {}).get("S")
        if paired is not None and paired != self.messages_table:
            raise ConfigError(f"control table {self.control_table} belongs to messages table {paired}, not {self.messages_table}: "
                              "use the messages table it was created with (the stack's MessagesTableName output)")
        return cfg

    def _check_region(self):
        regions = self.config.regions
        if regions and not self.region:
            raise ConfigError(f"the outbox is in region mode (regions {', '.join(regions)}): give the writer its region "
                              "(Writer(..., region=...), --region-id): without it, it would write into every region's buckets "
                              "and two regions would overwrite each other's messages")
        if regions and self.region not in regions:
            raise ConfigError(f"region {self.region!r} is not one of the outbox's regions ({', '.join(regions)}): "
                              "fix the region, or add it to the config item's list")
        if not regions and self.region:
            raise ConfigError(f"region {self.region!r} given, but the outbox is not in region mode: remove the region, "
                              "or switch the outbox to region mode on an empty outbox (outbox init --regions)")
        # Only this region's writers write its counters, in its replica: a
        # client of another region would reserve there (docs/contract.md
        # section 2, region mode).
        client_region = getattr(getattr(self.client, "meta", None), "region_name", None)
        if regions and client_region != self.region:
            raise ConfigError(f"the writer's region is {self.region!r} but its DynamoDB client is for {client_region!r}: it would "
                              f"reserve {self.region}'s sequence numbers in {client_region}'s replica, where replication keeps only "
                              "one of two regions' writes (two messages with one sequence number, one lost); give it a client for "
                              f"{self.region} (new_client(region_name={self.region!r}), --region), or the region of its client")

    def _check_tables(self):
        """The messages table exists, and outside region mode neither table
        has replicas (_check_single_region). The DescribeTables and the
        GetItem go at once: this is on every writer's start."""
        if self.config.regions:
            self._check_messages_table()  # region mode: replicas are expected, one per listed region
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="outbox-describe") as pool:
            described = [pool.submit(self._describe_replicas, t) for t in (self.messages_table, self.control_table)]
            self._check_messages_table()  # a missing table is this check's to name
            self._check_single_region([f.result() for f in described])

    def _describe_replicas(self, table):
        """table's replicas' regions (empty: none, or the table does not
        exist, which the other checks name), or the error to raise."""
        try:
            out = self._call(self.client.describe_table, TableName=table)
        except Exception as e:  # noqa: BLE001 - translated at this boundary
            code = _code(e)
            if code == "ResourceNotFoundException":
                return []
            if code in _ACCESS_DENIED_CODES:
                err = ConfigError(f"describe table {table}, to refuse a global table: access denied; grant "
                                  f"dynamodb:DescribeTable on it (the stack's WriterPolicy has it): {e}")
                err.__cause__ = e
                return err
            return e
        return [r.get("RegionName", "?") for r in (out.get("Table") or {}).get("Replicas") or []]

    def _check_single_region(self, described):
        """Refuse a messages or control table with replicas (a DynamoDB
        global table) outside region mode, with a ConfigError naming each
        table and its replicas' regions, before anything is written."""
        found = []
        for (role, table), got in zip((("messages", self.messages_table), ("control", self.control_table)), described):
            if isinstance(got, Exception):
                raise got
            if got:
                found.append(f"the {role} table {table} has replicas in {', '.join(got)} (a global table)")
        if found:
            raise ConfigError("; ".join(found) + f", and the outbox is not in region mode (the config item lists no regions): {_GLOBAL_TABLE_FIX}")

    def _check_messages_table(self):
        try:
            self._call(self.client.get_item, TableName=self.messages_table, Key={"b": {"N": "-1"}, "s": {"N": "0"}})
        except Exception as e:  # noqa: BLE001
            if _code(e) == "ResourceNotFoundException":
                raise ConfigError(f"the messages table {self.messages_table} does not exist") from e
            raise

    @property
    def bucket_count(self) -> int:
        """The BucketCount messages go under, as last learnt."""
        return self.view[0]

    @property
    def view(self):
        """(BucketCount, epoch) as last learnt."""
        with self._view_lock:
            return self._view

    def bucket(self, m, count: int | None = None) -> int:
        """m's bucket under count buckets (the writer's view by default):
        the bucket function, or in region mode its region's slice's."""
        count = self.view[0] if count is None else count
        if not self.config.regions:
            return contract.bucket_for(m.id, m.key, m.partition, count)
        per = count // len(self.config.regions)
        lo = self.config.regions.index(self.region) * per
        return lo + contract.bucket_for(m.id, m.key, m.partition, per)

    # --- one retry layer for the single-item calls --------------------------

    def _call(self, fn, **kw):
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(**kw)
            except Exception as e:  # noqa: BLE001
                if _kind(e) in ("ambiguous", "throttled") and attempt < self.max_attempts and _code(e) != "ConditionalCheckFailedException":
                    self._pause(attempt, _kind(e) == "throttled")
                    continue
                raise

    def _pause(self, attempt, throttled):
        base, cap = (0.2, 5.0) if throttled else (0.05, 2.0)
        self.sleep(random.uniform(0, min(cap, base * 2 ** (attempt - 1))))

    # --- write ------------------------------------------------------------

    def write(self, items=(), messages=(), client_request_token: str | None = None) -> Result:
        """Commit items (yours, boto3 TransactWriteItem dicts) and messages in
        one TransactWriteItems. Validates everything first (a ValidationError
        writes nothing), reserves the messages' sequence numbers (one
        UpdateItem ADD per bucket, in order of first appearance) immediately
        before the commit, and puts each message conditional on
        attribute_not_exists(s). A lost response is retried with the same
        client request token (client_request_token, or a new UUID) and
        identical items; if relays fenced the reserved numbers, new ones are
        reserved and the transaction resubmitted with a new token. Every
        failure that certainly wrote nothing fences the reserved numbers at
        once. A client_request_token an earlier write used in the last 10
        minutes (a retry under your idempotency key: new numbers, other
        items) is refused by DynamoDB and raises OutcomeUnknownError, since
        that earlier write may have committed. Call it after reading the
        aggregate your items are built from."""
        items = list(items)
        st = _WriteState(self.view)
        msgs = self._prepare(items, list(messages), st.view[0], st.view[1])
        token = client_request_token or str(uuid.uuid4())
        reserved = self._reserve(msgs, st)
        reservations = 1
        # Built once per reservation and resent as it is: a resend with the
        # token must be byte-identical (a TTL taken from the clock again
        # would differ, and DynamoDB would refuse the resend of a committed
        # transaction with IdempotentParameterMismatch).
        tx = self._transaction(items, msgs, st.view[1])
        maybe_committed = False
        last = None
        for attempt in range(1, self.max_attempts + 1):
            if self.after_reserve is not None:
                self.after_reserve(list(reserved))
            try:
                self.client.transact_write_items(TransactItems=tx, ClientRequestToken=token)
                return st.result(msgs, token, attempt, reservations)
            except Exception as e:  # noqa: BLE001 - classified below
                last = self._classify(e, len(items), msgs)
            if last.kind == "committed":
                return st.result(msgs, token, attempt, reservations)
            if last.kind == "ambiguous":
                maybe_committed = True
            elif last.cancelled:
                maybe_committed = False  # DynamoDB evaluated this token's request and cancelled it
            if attempt == self.max_attempts:
                break
            if last.kind == "fenced":
                self._release(reserved)  # what is left of the old numbers; a relay took the others
                reserved = self._reserve(msgs, st)
                reservations += 1
                tx = self._transaction(items, msgs, st.view[1])
                token = str(uuid.uuid4())  # new items, new token
                continue
            if last.kind in ("conflict", "throttled", "ambiguous"):
                self._pause(attempt, last.kind == "throttled")
                continue
            break
        raise self._fail(last, maybe_committed, reserved, token)

    def _prepare(self, items, msgs, count, epoch):
        total = len(items) + len(msgs)
        if total == 0:
            raise ValidationError(-1, "Transaction", "nothing to write: no items and no messages")
        if total > contract.MAX_TRANSACTION_ITEMS:
            raise ValidationError(-1, "Transaction", f"{total} items ({len(items)} yours + {len(msgs)} messages); "
                                  f"DynamoDB allows at most {contract.MAX_TRANSACTION_ITEMS} in one transaction: split the write")
        size = 0
        for i, it in enumerate(items):
            kinds = [k for k in ("Put", "Update", "Delete", "ConditionCheck") if k in it]
            if len(kinds) != 1:
                raise ValidationError(-1, f"items[{i}]", "exactly one of Put, Update, Delete or ConditionCheck must be set")
            body = it[kinds[0]]
            size += contract.item_size(body.get("Item") or body.get("Key") or {})
        now_ms = int(self.clock() * 1000)
        out = []
        seen_ids: dict[str, int] = {}
        stamped = dict(zip(self.stamped_headers, ("message-id", "bucket", "sequence")))
        for i, m in enumerate(msgs):
            if m.bucket != -1:
                raise ValidationError(i, "Bucket", f"is {m.bucket}; the writer assigns the bucket from the key (or partition): leave it unset and read it from the result")
            if m.sequence != 0:
                raise ValidationError(i, "Sequence", f"is {m.sequence}; the writer reserves the sequence number: leave it unset and read it from the result")
            m = dataclasses.replace(m, headers=list(m.headers))
            err = contract.topic_error(m.topic)
            if err:
                raise ValidationError(i, "Topic", err)
            if self.config.topics and m.topic not in self.config.topics:
                raise ValidationError(i, "Topic", f"topic {m.topic!r} is not one this outbox serves ({', '.join(self.config.topics)}); "
                                      "fix the topic name, or add it to the outbox's topic list and restart the writers")
            for name, val in (("Key", m.key), ("Value", m.value)):
                if val is not None and not isinstance(val, (bytes, bytearray)):
                    raise ValidationError(i, name, f"must be bytes or None, not {type(val).__name__}")
            for j, h in enumerate(m.headers):
                if not (isinstance(h, (tuple, list)) and len(h) == 2 and isinstance(h[0], str)
                        and (h[1] is None or isinstance(h[1], (bytes, bytearray)))):
                    raise ValidationError(i, f"Headers[{j}]", "a header is a (str key, bytes or None value) pair")
                try:
                    h[0].encode("utf-8")
                except UnicodeEncodeError:
                    raise ValidationError(i, f"Headers[{j}].Key", "header keys must be valid UTF-8 (Kafka header keys are strings)") from None
                if h[0] in stamped:
                    raise ValidationError(i, f"Headers[{j}].Key", f"{h[0]!r} is the {stamped[h[0]]} header the relay stamps; use another name")
            if m.partition is not None and (not isinstance(m.partition, int) or not 0 <= m.partition <= 0x7FFFFFFF):
                raise ValidationError(i, "Partition", f"{m.partition!r} is not an int32 >= 0")
            if m.id is None:
                m.id = contract.new_id(now_ms)
            elif not contract.canonical_uuid(m.id):
                raise ValidationError(i, "ID", f"{m.id!r} is not a UUID in canonical form (36 lower-case characters); leave it None to get a UUID v7")
            if m.id in seen_ids:
                raise ValidationError(i, "ID", f"{m.id} is also message {seen_ids[m.id]}'s id; every message needs its own")
            seen_ids[m.id] = i
            if m.created_ms is None:
                m.created_ms = now_ms
            if not isinstance(m.created_ms, int) or m.created_ms < 0:
                raise ValidationError(i, "CreatedAt", f"{m.created_ms!r} is not Unix milliseconds >= 0")
            rs = contract.record_size(m.key, m.value, m.headers, self.stamped_headers)
            if rs > self.max_message_bytes:
                raise ValidationError(i, "Value", f"the record is {rs} bytes (key+value+headers+stamped headers+{contract.RECORD_OVERHEAD} "
                                      f"overhead), above MaxMessageBytes={self.max_message_bytes}; shrink the key, value or headers")
            m.bucket = self.bucket(m, count)
            size += self._check_size(i, m, epoch)
            out.append(m)
        if size > contract.MAX_TRANSACTION_BYTES:
            raise ValidationError(-1, "Transaction", f"the items add up to at least {size} bytes; DynamoDB allows {contract.MAX_TRANSACTION_BYTES}")
        return out

    def _check_size(self, i, m, epoch) -> int:
        m.sequence = 2**63 - 1  # the widest sequence: the size is an upper bound
        n = contract.item_size(self._item(m, epoch))
        m.sequence = 0
        if n > contract.MAX_ITEM_BYTES:
            raise ValidationError(i, "Value", f"the DynamoDB item would be {n} bytes, above DynamoDB's {contract.MAX_ITEM_BYTES}-byte item limit")
        return n

    def _item(self, m, epoch):
        retention = self.config.retention_seconds if self.config.mode == "watermark" else 0
        return contract.message_item(m, retention, self.clock(), epoch)

    def _reserve(self, msgs, st):
        """Reserve the messages' numbers at st.view's epoch; a reservation
        refused for its epoch (an online BucketCount change) cuts a counter
        nobody cut yet, or moves the messages to the new count's buckets,
        and reserves again: no waiting. Returns [(bucket, first, n)]."""
        for _ in range(MAX_EPOCH_MEETINGS):
            try:
                return self._reserve_once(msgs, st.view[1])
            except _EpochRefused as ee:
                view = self._meet_epoch(st, ee)
            if view != st.view:
                for i, m in enumerate(msgs):
                    m.bucket = self.bucket(m, view[0])
                    self._check_size(i, m, view[1])
                st.view = view
                st.rebuckets += 1
        raise BucketCountChangeError(f"outbox: the BucketCount epoch changed {MAX_EPOCH_MEETINGS} times while this write reserved; "
                                     "nothing was written: check the config item and the counters (outbox status), then retry")

    def _reserve_once(self, msgs, epoch):
        """One conditional UpdateItem ADD n per bucket, in order of first
        appearance; numbers assigned in message order."""
        counts: dict[int, int] = {}
        for m in msgs:
            counts[m.bucket] = counts.get(m.bucket, 0) + 1
        attr = "n" if epoch == 0 else "q"
        reserved = []
        for b, n in counts.items():
            kw = dict(TableName=self.control_table, Key=contract.counter_key(b),
                      UpdateExpression="ADD #n :n SET #v = :v",
                      ExpressionAttributeNames={"#n": attr, "#v": "v", "#ce": "ce"},
                      ExpressionAttributeValues={":n": {"N": str(n)}, ":v": {"N": str(contract.ITEM_FORMAT_VERSION)}},
                      ReturnValues="UPDATED_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD")
            if epoch == 0:
                kw["ConditionExpression"] = "attribute_not_exists(#ce)"
            else:
                kw["ConditionExpression"] = "#ce = :e"
                kw["ExpressionAttributeValues"][":e"] = {"N": str(epoch)}
            try:
                out = self._call(self.client.update_item, **kw)
            except Exception as e:  # noqa: BLE001
                if _code(e) == "ConditionalCheckFailedException":
                    self._release_quietly(reserved)
                    raise _EpochRefused(b, epoch, e.response.get("Item")) from None
                err = (ThrottledError if _kind(e) == "throttled" else RejectedError)(
                    f"outbox: reserving sequence numbers in bucket {b} failed before the transaction was sent; nothing was written: {e}")
                self._release_into(err, reserved)
                raise err from e
            last = int(out["Attributes"][attr]["N"])
            reserved.append((b, last - n + 1, n))
        nxt = {b: first for b, first, _ in reserved}
        for m in msgs:
            m.sequence = nxt[m.bucket]
            nxt[m.bucket] += 1
        return reserved

    def _release_quietly(self, reserved):
        try:
            self._release(reserved)
        except Exception:  # noqa: BLE001 - relays fence what is left after their gap timeout
            pass

    # --- online BucketCount changes (docs/design.md section 13) -------------

    def _meet_epoch(self, st, ee):
        """The Go writer's meetEpoch: the view to reserve at after a
        reservation refused by ee (nothing reserved). A counter at an
        earlier epoch than the write's (or frozen by a version before the
        cut-over for it) is cut into it; a later one means the count
        changed: read the config item and take its count and epoch. A
        change a version before the cut-over left frozen is aborted first."""
        had = st.view
        if 0 <= ee.counter < had[1] or (had[1] > 0 and ee.counter == -had[1]):
            try:
                self._cut(ee.bucket, had[1])
                st.cuts += 1
                return had
            except _CounterAhead as ahead:
                # A later change cut the counter between the refusal and
                # this cut (a change leaves counters no writer met uncut):
                # follow the config item as for a counter found there.
                ee = ahead
        c = self._read_config()
        if c.changing:
            if self.on_change_wait is not None:
                self.on_change_wait(c)
            if self._abort_change(c):
                st.aborted_changes += 1
            c = self._read_config()
        epoch = c.epoch
        if epoch <= had[1] or ee.counter > epoch:
            raise BucketCountChangeError(
                f"outbox: bucket {ee.bucket}'s counter serves BucketCount epoch {ee.counter}, the config item says {epoch} "
                f"and this writer had {had[1]}: the control table was edited by hand; nothing was written")
        view = (c.bucket_count, epoch)
        with self._view_lock:
            if epoch > self._view[1]:
                self._view = view
        return view

    def _abort_change(self, c) -> bool:
        """Abort the change c (the config item as read) says a version
        before the cut-over began and left frozen: the config item moves to
        the next epoch with the count unchanged, conditional on it still
        describing that change; then every counter of the change is cut
        (thawed) into that epoch. Returns whether this call's write ended
        it: a failed condition whose item already says what this write
        would (a resend of it after a lost response, or an identical abort)
        counts as this writer's."""
        e = c.epoch
        _, old = self._config_update(
            UpdateExpression="SET #be = :be1 REMOVE #nb, #cd",
            ConditionExpression="#bc = :bc AND #be = :be AND #nb = :nb AND #cd = :cd",
            ExpressionAttributeNames={"#bc": "bc", "#be": "be", "#nb": "nb", "#cd": "cd"},
            ExpressionAttributeValues={":bc": {"N": str(c.bucket_count)}, ":be": {"N": str(e)}, ":be1": {"N": str(e + 1)},
                                       ":nb": {"N": str(c.next_bucket_count)}, ":cd": {"N": str(c.change_deadline_ms)}})
        ours = old is None
        if not ours:
            now = self._read_config()
            if now.epoch <= e:
                raise BucketCountChangeError(f"outbox: abort the BucketCount change from {c.bucket_count} to {c.next_bucket_count}: "
                                             f"the config item changed meanwhile ({now!r}); nothing was written")
            ours = now.epoch == e + 1 and now.bucket_count == c.bucket_count and not now.changing
        for b in range(max(c.bucket_count, c.next_bucket_count)):
            self._cut(b, e + 1)
        return ours

    def _config_update(self, **kw):
        """A conditional UpdateItem on the config item; a failed condition
        returns the old item (ALL_OLD) instead of raising."""
        try:
            return self._call(self.client.update_item, TableName=self.control_table, Key=contract.CONFIG_KEY,
                              ReturnValuesOnConditionCheckFailure="ALL_OLD", **kw), None
        except Exception as e:  # noqa: BLE001
            if _code(e) == "ConditionalCheckFailedException":
                return None, e.response.get("Item") or {}
            raise

    def _counter_update(self, **kw):
        """An UpdateItem on a counter; a failed condition returns the old
        item (ALL_OLD) instead of raising."""
        try:
            return self._call(self.client.update_item, TableName=self.control_table,
                              ReturnValuesOnConditionCheckFailure="ALL_OLD", **kw), None
        except Exception as e:  # noqa: BLE001
            if _code(e) == "ConditionalCheckFailedException":
                return None, e.response.get("Item") or {}
            raise

    def _cut(self, bucket, to):
        """Move bucket's counter to epoch to and return its cut point, the
        last number reserved on it before (sequence.Cut): one conditional
        UpdateItem. A counter at an earlier epoch (or none: epoch 0, never
        used) moves; one at to already (cut by another party, or a resend
        of this write) returns its recorded cut point; one a version before
        the cut-over froze for the change to to is thawed the same way."""
        z, t = {"N": "0"}, {"N": str(to)}
        legacy = dict(UpdateExpression="SET #cf = if_not_exists(#n, :z), #q = if_not_exists(#n, :z), #n = :moved, #ce = :to",
                      ConditionExpression="attribute_not_exists(#ce)",
                      ExpressionAttributeNames={"#cf": "cf", "#q": "q", "#ce": "ce", "#n": "n"},
                      ExpressionAttributeValues={":z": z, ":to": t, ":moved": {"S": contract.MOVED_COUNTER}})
        earlier = dict(UpdateExpression="SET #cf = if_not_exists(#q, :z), #ce = :to", ConditionExpression="#ce BETWEEN :one AND :before",
                       ExpressionAttributeNames={"#cf": "cf", "#q": "q", "#ce": "ce"},
                       ExpressionAttributeValues={":z": z, ":to": t, ":one": {"N": "1"}, ":before": {"N": str(to - 1)}})
        frozen = dict(UpdateExpression="SET #q = if_not_exists(#cf, :z), #ce = :to", ConditionExpression="#ce = :frz",
                      ExpressionAttributeNames={"#cf": "cf", "#q": "q", "#ce": "ce"},
                      ExpressionAttributeValues={":z": z, ":to": t, ":frz": {"N": str(-to)}})
        kw = legacy if to == 1 else earlier
        for _ in range(3):
            out, old = self._counter_update(Key=contract.counter_key(bucket), ReturnValues="ALL_NEW", **kw)
            if old is None:
                return _num(out.get("Attributes"), "cf")
            ce = _num(old, "ce")
            if "ce" not in old:
                kw = legacy
            elif ce == to:
                return _num(old, "cf")  # cut already
            elif ce == -to:
                kw = frozen
            elif 1 <= ce < to:
                kw = earlier
            elif ce > to:
                raise _CounterAhead(bucket, to, ce)
            else:
                raise BucketCountChangeError(f"outbox: cut bucket {bucket} into BucketCount epoch {to}: its counter serves "
                                             f"epoch {ce}; nothing was written")
        raise BucketCountChangeError(f"outbox: cut bucket {bucket}: the counter item kept changing; nothing was written")

    def _transaction(self, items, msgs, epoch):
        puts = [{"Put": {
            "TableName": self.messages_table,
            "Item": self._item(m, epoch),
            "ConditionExpression": "attribute_not_exists(#s)",
            "ExpressionAttributeNames": {"#s": "s"},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }} for m in msgs]
        return items + puts

    def _classify(self, exc, n_items, msgs):
        code = _code(exc)
        if code == "IdempotentParameterMismatchException":
            # The token was used in DynamoDB's 10-minute window by a
            # transaction with other items (this write's resends are
            # identical): an earlier write with the caller's token, which
            # reserved other numbers and may have committed. DynamoDB ran
            # none of this write's attempts.
            return _Outcome("token_reused", code)
        if code != "TransactionCanceledException":
            return _Outcome(_kind(exc), code or type(exc).__name__)
        reasons = exc.response.get("CancellationReasons") or []
        o = _Outcome("conflict", "cancelled without a known reason", reasons[:n_items], cancelled=True)
        found = {}
        for i, r in enumerate(reasons):
            rc = r.get("Code") or "None"
            if rc == "None":
                continue
            who = f"your item {i}" if i < n_items else f"outbox put {i - n_items}"
            detail = f"{who}: {rc}" + (f" ({r['Message']})" if r.get("Message") else "")
            if rc == "ConditionalCheckFailed" and i < n_items:
                found.setdefault("condition_failed", detail)
            elif rc == "ConditionalCheckFailed":
                old = r.get("Item") or {}
                j = i - n_items
                if old.get("id", {}).get("S") == msgs[j].id:
                    o.kind, o.detail = "committed", f"{who} already holds this message"
                    return o
                if not old or "f" in old:
                    found.setdefault("fenced", detail)
                else:
                    found.setdefault("rejected", detail + ": the reserved sequence number holds another outbox's message; "
                                     "the counter was reset or two outboxes share the messages table")
            elif rc == "TransactionConflict":
                found.setdefault("conflict", detail)
            elif rc in ("ThrottlingError", "ProvisionedThroughputExceeded"):
                found.setdefault("throttled", detail)
            else:
                found.setdefault("rejected", detail)
        for kind in ("condition_failed", "rejected", "fenced", "throttled", "conflict"):
            if kind in found:
                o.kind, o.detail = kind, found[kind]
                break
        return o

    def _fail(self, o, maybe_committed, reserved, token):
        if o.kind == "token_reused":
            err = OutcomeUnknownError(
                f"outbox: DynamoDB refused this write ({o.detail}): client request token {token} was used in the last "
                "10 minutes by a transaction with other items, an earlier write with this token, which may have committed. "
                "This write wrote nothing (its reserved numbers are fenced); do not write again under new ids: read your "
                "items to learn whether the earlier write committed", token)
            self._release_into(err, reserved)
            return err
        if maybe_committed or o.kind == "ambiguous":
            return OutcomeUnknownError(f"outbox: the transaction may have committed ({o.detail}); read your items to learn "
                                       "whether it did before writing again: another write() reserves new sequence numbers, "
                                       f"so with client request token {token} DynamoDB refuses it for 10 minutes", token)
        cls, fix = {
            "condition_failed": (ConditionFailedError, "nothing was written; re-read the aggregate and retry the whole operation"),
            "conflict": (ConflictError, "nothing was written; conflicting transactions on these items, retry later"),
            "throttled": (ThrottledError, "nothing was written; DynamoDB throttled the writes, retry later"),
            "fenced": (SequenceFencedError, "nothing was written; relays fenced the reserved numbers on every attempt"),
            "rejected": (RejectedError, "nothing was written; DynamoDB refused the request"),
        }[o.kind]
        msg = f"outbox: {o.detail}; {fix}"
        err = cls(msg, o.caller_reasons) if cls is ConditionFailedError else cls(msg)
        self._release_into(err, reserved)
        return err

    def _release_into(self, err, reserved):
        try:
            err.released = self._release(reserved)
        except Exception as e:  # noqa: BLE001 - relays fence what is left after their gap timeout
            err.release_error = e

    def _release(self, reserved):
        """Fence every reserved number that is still free (a number a relay
        fenced already is fine). Returns the (bucket, sequence) fenced or
        found fenced."""
        done = []
        now = self.clock()
        for b, first, n in reserved:
            for s in range(first, first + n):
                try:
                    self._call(self.client.put_item, TableName=self.messages_table,
                               Item=contract.fence_item(b, s, now, self.fence_ttl_seconds),
                               ConditionExpression="attribute_not_exists(#s)", ExpressionAttributeNames={"#s": "s"})
                except Exception as e:  # noqa: BLE001
                    if _code(e) != "ConditionalCheckFailedException":
                        raise
                done.append((b, s))
        return done
