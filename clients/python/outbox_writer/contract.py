"""The item contract of docs/contract.md, in Python: the bucket function
(Kafka's murmur2), the header encoding, the message and fence items as
stored, and the config item's decoding. Pure functions, stdlib only."""

from __future__ import annotations

import base64
import os
import re
import time
import uuid

# Contract and format versions (docs/contract.md, "Versions").
CONTRACT_VERSION = 1
ITEM_FORMAT_VERSION = 1  # v of every messages-table item and counter item
CONFIG_VERSIONS = (1, 2, 3, 4)  # the config item versions this writer understands

MAX_BUCKET_COUNT = 4096
MAX_TOPIC_LENGTH = 249
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
MIN_RETENTION_SECONDS = 3600
DEFAULT_FENCE_TTL_SECONDS = 7 * 24 * 3600

# The headers the relay stamps; a message must not carry them.
MESSAGE_ID_HEADER = "x-outbox-message-id"
BUCKET_HEADER = "x-outbox-bucket"
SEQUENCE_HEADER = "x-outbox-sequence"
RECORD_OVERHEAD = 128
HEADER_OVERHEAD = 10
# The config item's MaxMessageBytes (mb) range: the Kafka publisher's
# largest (100 MiB less kgo's 4-byte batch length prefix).
MAX_SHARED_MESSAGE_BYTES = (100 << 20) - 4

CONFIG_KEY = {"pk": {"S": "config"}, "sk": {"S": "config"}}

MAX_REGION_ID_LENGTH = 32
_REGION_ID = re.compile(r"^[a-z0-9-]{1,32}$")

# The counter item's attributes (docs/contract.md section 5): n counts
# before any online BucketCount change, q from the first one on; ce is the
# epoch the counter serves (-E while frozen by a version before the
# cut-over for the change to epoch E), cf its cut point: the last number
# reserved on it before it moved to ce. After the first change n holds
# MOVED_COUNTER, so a writer that predates epochs fails its ADD instead of
# writing under a stale count.
MOVED_COUNTER = "moved to q by an online BucketCount change: upgrade this writer (docs/deploy.md, Changing BucketCount)"


def counter_key(bucket: int) -> dict:
    return {"pk": {"S": f"bucket#{bucket}"}, "sk": {"S": "seq"}}

_M32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2, seed 0x9747b28c) as an unsigned 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & _M32
    i = 0
    while length - i >= 4:
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & _M32
        k ^= k >> r
        k = (k * m) & _M32
        h = (h * m) & _M32
        h ^= k
        i += 4
    rest = length - i
    if rest == 3:
        h ^= data[i + 2] << 16
    if rest >= 2:
        h ^= data[i + 1] << 8
    if rest >= 1:
        h ^= data[i]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h


def bucket_for_key(key: bytes, bucket_count: int) -> int:
    """(murmur2(key) & 0x7fffffff) mod bucket_count: Kafka's default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % bucket_count


def valid_bucket_count(n: int) -> bool:
    """Whether n is a bucket count an outbox can have: 1..MAX_BUCKET_COUNT
    (the Go side's outbox.ValidBucketCount; test_contract holds them
    together)."""
    return 1 <= n <= MAX_BUCKET_COUNT


def bucket_for(message_id: str, key, partition, bucket_count: int) -> int:
    """The bucket of one message: partition mod bucket_count when it has an
    explicit partition; else its key's bucket (None is keyless, b"" is a key);
    else, keyless, the bucket of its id's 16 UUID bytes."""
    if not valid_bucket_count(bucket_count):
        raise ValueError(f"bucket count {bucket_count} is outside 1..{MAX_BUCKET_COUNT}")
    if partition is not None:
        if partition < 0:
            raise ValueError(f"partition {partition} is negative")
        return partition % bucket_count
    if key is not None:
        return bucket_for_key(bytes(key), bucket_count)
    return bucket_for_key(uuid.UUID(message_id).bytes, bucket_count)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_headers(headers) -> bytes | None:
    """The h attribute: version byte 1, uvarint count, then per header uvarint
    key length, key (UTF-8), presence byte (0 nil value, 1 present) and, when
    present, uvarint value length and value. None for no headers (the
    attribute is then omitted)."""
    if not headers:
        return None
    out = bytearray([1])
    out += _uvarint(len(headers))
    for k, v in headers:
        kb = k.encode("utf-8")
        out += _uvarint(len(kb)) + kb
        if v is None:
            out.append(0)
        else:
            out.append(1)
            out += _uvarint(len(v)) + bytes(v)
    return bytes(out)


def decode_headers(b: bytes):
    """The inverse of encode_headers (for tests and tools); raises ValueError."""
    if not b or b[0] != 1:
        raise ValueError("header attribute is empty or not format 1")
    off = 1

    def uv():
        nonlocal off
        shift = n = 0
        while True:
            if off >= len(b) or shift > 63:
                raise ValueError(f"truncated varint at byte {off}")
            c = b[off]
            off += 1
            n |= (c & 0x7F) << shift
            if c < 0x80:
                return n
            shift += 7

    def chunk():
        nonlocal off
        n = uv()
        if n > len(b) - off:
            raise ValueError(f"length {n} exceeds the remaining bytes at {off}")
        v = b[off:off + n]
        off += n
        return v

    count = uv()
    if count == 0:
        raise ValueError("header count 0 (no headers is encoded as no attribute)")
    hs = []
    for _ in range(count):
        k = chunk().decode("utf-8")
        if off >= len(b):
            raise ValueError("missing presence byte")
        p = b[off]
        off += 1
        if p == 0:
            hs.append((k, None))
        elif p == 1:
            hs.append((k, bytes(chunk())))
        else:
            raise ValueError(f"presence byte {p}")
    if off != len(b):
        raise ValueError("trailing bytes")
    return hs


_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def topic_error(topic) -> str | None:
    """Why topic is not a legal Kafka topic name, or None."""
    if not isinstance(topic, str) or topic == "":
        return "topic is empty"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"topic is {len(topic)} characters long; Kafka allows at most {MAX_TOPIC_LENGTH}"
    if topic in (".", ".."):
        return f"topic {topic!r} is not allowed by Kafka"
    if not _TOPIC.match(topic):
        return f"topic {topic!r} has characters outside a-z A-Z 0-9 . _ -"
    return None


def canonical_uuid(s) -> bool:
    if not isinstance(s, str) or len(s) != 36:
        return False
    try:
        return str(uuid.UUID(s)) == s.lower()
    except ValueError:
        return False


def new_id(now_ms: int | None = None) -> str:
    """A UUID v7 (48-bit Unix ms, version 7, RFC 4122 variant, random bits)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rnd = int.from_bytes(os.urandom(10), "big")
    n = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rnd >> 68 & 0xFFF) << 64 | 0b10 << 62 | (rnd & ((1 << 62) - 1))
    return str(uuid.UUID(int=n))


def record_size(key, value, headers, stamped=(MESSAGE_ID_HEADER, BUCKET_HEADER, SEQUENCE_HEADER)) -> int:
    """The Kafka record size bound the Go writer checks (outbox.RecordSize):
    key + value + headers + the three stamped headers (named stamped: id,
    bucket, sequence) at their longest + overheads."""
    n = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for k, v in headers:
        n += HEADER_OVERHEAD + len(k.encode("utf-8")) + len(v or b"")
    hid, hb, hs = (h.encode("utf-8") for h in stamped)
    n += 3 * HEADER_OVERHEAD + len(hid) + 36 + len(hb) + 4 + len(hs) + 19
    return n


def _number_size(s: str) -> int:
    s = s.lstrip("+-").split("e")[0].split("E")[0]
    digits = s.replace(".", "", 1).strip("0")
    return 1 if not digits else (len(digits) + 1) // 2 + 1


def item_size(item) -> int:
    """DynamoDB's size of an item in low-level (boto3 client) form, for the
    scalar and binary types the outbox writes (and the keys of yours)."""
    n = 0
    for name, av in item.items():
        n += len(name.encode("utf-8"))
        ((t, v),) = av.items()
        if t == "S":
            n += len(v.encode("utf-8"))
        elif t == "B":
            n += len(v)
        elif t == "N":
            n += _number_size(v)
        elif t in ("BOOL", "NULL"):
            n += 1
        else:  # lists, maps, sets: counted roughly; DynamoDB checks the real size
            n += len(repr(v))
    return n


def message_item(m, retention_seconds: int = 0, now_s: float | None = None, epoch: int = 0) -> dict:
    """The stored message item (boto3 low-level form: B values are bytes).
    m has id, bucket, sequence, topic, key, value, headers, partition and
    created_ms. In watermark mode (retention_seconds > 0) it gets the TTL x:
    the later of created-at and the wall clock, plus the retention, in epoch
    seconds rounded up. epoch is the BucketCount epoch its sequence number
    was reserved at: stamped as ep from epoch 1 on (the relays' gate)."""
    item = {
        "b": {"N": str(m.bucket)},
        "s": {"N": str(m.sequence)},
        "v": {"N": str(ITEM_FORMAT_VERSION)},
        "id": {"S": m.id},
        "t": {"S": m.topic},
        "c": {"N": str(m.created_ms)},
    }
    if m.key is not None:
        item["k"] = {"B": bytes(m.key)}
    if m.value is not None:
        item["val"] = {"B": bytes(m.value)}
    h = encode_headers(m.headers)
    if h is not None:
        item["h"] = {"B": h}
    if m.partition is not None:
        item["p"] = {"N": str(m.partition)}
    if epoch > 0:
        item["ep"] = {"N": str(epoch)}
    if retention_seconds > 0:
        base_ms = max(m.created_ms, int((time.time() if now_s is None else now_s) * 1000))
        item["x"] = {"N": str(-(-(base_ms + retention_seconds * 1000) // 1000))}
    return item


def fence_item(bucket: int, sequence: int, now_s: float, ttl_seconds: int) -> dict:
    """A fence tombstone: it takes a reserved sequence number nobody will
    commit, so relays pass over it at once."""
    now_ms = int(now_s * 1000)
    return {
        "b": {"N": str(bucket)},
        "s": {"N": str(sequence)},
        "v": {"N": str(ITEM_FORMAT_VERSION)},
        "f": {"BOOL": True},
        "c": {"N": str(now_ms)},
        "x": {"N": str(-(-(max(now_ms, int(time.time() * 1000)) + ttl_seconds * 1000) // 1000))},
    }


class Config:
    """What the config item says."""

    def __init__(self, bucket_count: int, version: int, mode: str, retention_seconds: int, topics=(), epoch: int = 0,
                 next_bucket_count: int = 0, change_deadline_ms: int = 0, regions=(), taken_over=None,
                 max_message_bytes: int = 0, headers=("", "", ""), old_bucket_count: int = 0):
        self.bucket_count = bucket_count
        self.version = version
        self.mode = mode
        self.retention_seconds = retention_seconds
        self.topics = tuple(sorted(set(topics)))  # the topics the outbox serves; empty: any topic
        self.epoch = epoch  # be: the online BucketCount changes so far
        self.next_bucket_count = next_bucket_count  # nb: a change a version before the cut-over left frozen (0: none)
        self.change_deadline_ms = change_deadline_ms  # cd: that change's deadline, or when the old epoch should have drained, epoch ms
        self.old_bucket_count = old_bucket_count  # ob: the old epoch's count while it drains (0: none); writers need not know
        self.regions = tuple(regions)  # rg: region mode's regions, in order; empty: the default mode
        self.taken_over = dict(taken_over or {})  # rgt: region -> the region draining its slice (writers ignore it)
        self.max_message_bytes = max_message_bytes  # mb: the outbox's MaxMessageBytes (0: not stated)
        self.headers = tuple(headers)  # hi, hb, hs: the stamped headers' names, id, bucket, sequence ("": not stated)

    @property
    def stamped_headers(self):
        """The names the relay stamps the id, bucket and sequence under:
        the item's, the default for a name it does not state."""
        return _with_defaults(self.headers)

    @property
    def changing(self) -> bool:
        return self.next_bucket_count != 0

    def region_slice(self, region: str):
        """(lo, per): region's slice of buckets lo .. lo+per-1 (region mode)."""
        per = self.bucket_count // len(self.regions)
        return self.regions.index(region) * per, per

    def __repr__(self):
        return (f"Config(bucket_count={self.bucket_count}, version={self.version}, mode={self.mode!r}, "
                f"retention_seconds={self.retention_seconds}, topics={self.topics!r}, epoch={self.epoch}, "
                f"next_bucket_count={self.next_bucket_count}, change_deadline_ms={self.change_deadline_ms}, "
                f"regions={self.regions!r}, taken_over={self.taken_over!r}, max_message_bytes={self.max_message_bytes}, "
                f"headers={self.headers!r}, old_bucket_count={self.old_bucket_count})")


class ConfigItemError(Exception):
    """The config item is missing, malformed, or of a version or mode this
    writer does not understand; unknown is True for the latter (upgrade)."""

    def __init__(self, reason: str, unknown: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.unknown = unknown


def _int_attr(item, name, required=True):
    av = item.get(name)
    if av is None:
        if required:
            raise ConfigItemError(f"the config item has no attribute {name}")
        return None
    if set(av) != {"N"}:
        raise ConfigItemError(f"the config item's {name} is {av!r}, not a number")
    try:
        return int(av["N"])
    except ValueError:
        raise ConfigItemError(f"the config item's {name} is {av['N']!r}, not an integer") from None


def parse_config(item) -> Config:
    """Decode the config item (boto3 low-level form). It refuses, with a
    ConfigItemError, a version other than 1..4 and a mode other than delete
    or watermark (unknown=True: the outbox was set up by a newer version;
    upgrade the writer), and an item that contradicts itself. Attributes it
    does not know are ignored, as the Go writer does: a change that writers
    must respect raises the version (docs/contract.md, section 10)."""
    if not item:
        raise ConfigItemError("there is no config item (pk=config, sk=config): create the outbox first (outbox init or the stack)")
    version = _int_attr(item, "v")
    if version not in CONFIG_VERSIONS:
        raise ConfigItemError(
            f"config item format version {version}; this writer understands {CONFIG_VERSIONS[0]}..{CONFIG_VERSIONS[-1]} "
            "(the outbox was created by a newer version: upgrade the writer)", unknown=version > CONFIG_VERSIONS[-1])
    bc = _int_attr(item, "bc")
    if not valid_bucket_count(bc):
        raise ConfigItemError(f"bucket count {bc} is outside 1..{MAX_BUCKET_COUNT}")
    mode = "delete"
    if "md" in item:
        if set(item["md"]) != {"S"}:
            raise ConfigItemError(f"the config item's md is {item['md']!r}, not a string")
        mode = item["md"]["S"]
        if mode not in ("delete", "watermark"):
            raise ConfigItemError(f"mode {mode!r}: this writer knows delete and watermark (upgrade the writer)", unknown=True)
    rt = _int_attr(item, "rt", required=False) or 0
    if mode == "watermark" and version < 2:
        raise ConfigItemError(f"a watermark-mode config item must have format version 2; it has {version}")
    if mode == "watermark" and rt < MIN_RETENTION_SECONDS:
        raise ConfigItemError(f"retention {rt}s in watermark mode; it must be at least {MIN_RETENTION_SECONDS}s")
    if mode == "delete" and rt != 0:
        raise ConfigItemError("a retention in delete mode: the item contradicts itself")
    topics = ()
    if "tp" in item:
        if set(item["tp"]) != {"SS"} or not isinstance(item["tp"]["SS"], list):
            raise ConfigItemError(f"the config item's tp is {item['tp']!r}, not a string set")
        topics = item["tp"]["SS"]
        for t in topics:
            err = topic_error(t)
            if err:
                raise ConfigItemError(f"the config item's topic list: {err}")
    epoch, nb, cd, ob = (_int_attr(item, a, required=False) or 0 for a in ("be", "nb", "cd", "ob"))
    for name, val in (("be", epoch), ("nb", nb), ("cd", cd), ("ob", ob)):
        if val < 0:
            raise ConfigItemError(f"the config item's {name} is {val}, negative")
    if ob and version < 4:
        raise ConfigItemError(f"a config item whose old BucketCount epoch drains (ob) must have format version 4; it has {version}")
    if ob and not valid_bucket_count(ob):
        raise ConfigItemError(f"old bucket count {ob} is outside 1..{MAX_BUCKET_COUNT}")
    if nb and not valid_bucket_count(nb):
        raise ConfigItemError(f"next bucket count {nb} is outside 1..{MAX_BUCKET_COUNT}")
    if nb and not cd:
        raise ConfigItemError("a BucketCount change in progress (nb) without a deadline (cd)")
    regions, taken = _regions(item)
    if regions and version < 3:
        raise ConfigItemError(f"a region-mode config item must have format version 3; it has {version}")
    mb, headers = _shared(item)
    return Config(bc, version, mode, rt, topics, epoch, nb, cd, regions, taken, mb, headers, ob)


def _with_defaults(headers):
    """(id, bucket, sequence) header names, each empty one its default."""
    return tuple(h or d for h, d in zip(headers, (MESSAGE_ID_HEADER, BUCKET_HEADER, SEQUENCE_HEADER)))


def _shared(item):
    """mb and hi/hb/hs, checked as the Go side checks them (checkShared:
    MaxMessageBytes 128..MAX_SHARED_MESSAGE_BYTES, the names valid UTF-8
    and distinct once the defaults fill the unstated ones)."""
    mb = _int_attr(item, "mb", required=False) or 0
    if mb and not RECORD_OVERHEAD <= mb <= MAX_SHARED_MESSAGE_BYTES:
        raise ConfigItemError(f"the config item's mb (MaxMessageBytes) is {mb}: it must be {RECORD_OVERHEAD}..{MAX_SHARED_MESSAGE_BYTES}, "
                              "and at most every topic's max.message.bytes")
    headers = []
    for attr in ("hi", "hb", "hs"):
        av = item.get(attr)
        if av is None:
            headers.append("")
            continue
        if set(av) != {"S"} or not isinstance(av["S"], str):
            raise ConfigItemError(f"the config item's {attr} is {av!r}, not a string")
        try:
            av["S"].encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigItemError(f"the config item's {attr} is not valid UTF-8 (Kafka header keys are strings)") from None
        headers.append(av["S"])
    named = _with_defaults(headers)
    for i, (attr, name) in enumerate(zip(("hi", "hb", "hs"), named)):
        for other, o in zip(("hi", "hb", "hs")[:i], named[:i]):
            if o == name:
                raise ConfigItemError(f"the config item's {attr} names {name!r}, as does {other}: the stamped headers need distinct names")
    return mb, tuple(headers)


def _regions(item):
    """rg and rgt, checked as the Go side checks them (outbox.Config.CheckRegions)."""
    if "rg" not in item:
        if "rgt" in item:
            raise ConfigItemError("the config item has takeovers (rgt) without regions (rg)")
        return (), {}
    av = item["rg"]
    if set(av) != {"L"} or not isinstance(av["L"], list):
        raise ConfigItemError(f"the config item's rg is {av!r}, not a list")
    regions = []
    for r in av["L"]:
        if not isinstance(r, dict) or set(r) != {"S"}:
            raise ConfigItemError(f"the config item's rg holds {r!r}, not a string")
        rid = r["S"]
        if not _REGION_ID.match(rid):
            raise ConfigItemError(f"region id {rid!r} must be 1..{MAX_REGION_ID_LENGTH} of a-z, 0-9 and '-'")
        if rid in regions:
            raise ConfigItemError(f"region {rid!r} is listed twice")
        regions.append(rid)
    bc = int(item["bc"]["N"])
    if regions and bc % len(regions):
        raise ConfigItemError(f"BucketCount {bc} is not a multiple of the {len(regions)} regions ({','.join(regions)})")
    taken = {}
    if "rgt" in item:
        m = item["rgt"]
        if set(m) != {"M"} or not isinstance(m["M"], dict):
            raise ConfigItemError(f"the config item's rgt is {m!r}, not a map")
        for frm, by in m["M"].items():
            if not isinstance(by, dict) or set(by) != {"S"}:
                raise ConfigItemError(f"the config item's rgt[{frm!r}] is {by!r}, not a string")
            if frm not in regions or by["S"] not in regions:
                raise ConfigItemError(f"takeover {frm!r} -> {by['S']!r} between regions not listed in rg")
            taken[frm] = by["S"]
    return tuple(regions), taken


def to_json(av):
    """One attribute value from boto3 low-level form to DynamoDB JSON (B as base64)."""
    ((t, v),) = av.items()
    if t == "B":
        return {"B": base64.b64encode(v).decode()}
    if t == "BS":
        return {"BS": [base64.b64encode(x).decode() for x in v]}
    if t == "M":
        return {"M": {k: to_json(x) for k, x in v.items()}}
    if t == "L":
        return {"L": [to_json(x) for x in v]}
    return {t: v}


def from_json(av):
    """The inverse of to_json: DynamoDB JSON to boto3 low-level form."""
    if not isinstance(av, dict) or len(av) != 1:
        raise ValueError(f"{av!r} is not one DynamoDB JSON attribute value")
    ((t, v),) = av.items()
    if t == "B":
        return {"B": base64.b64decode(v, validate=True)}
    if t == "BS":
        return {"BS": [base64.b64decode(x, validate=True) for x in v]}
    if t == "M":
        return {"M": {k: from_json(x) for k, x in v.items()}}
    if t == "L":
        return {"L": [from_json(x) for x in v]}
    return {t: v}
