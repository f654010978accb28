"""The contract's pure parts against the shared vectors (no DynamoDB)."""

import json
import os
import uuid

import pytest

from conftest import REPO
from outbox_writer import contract


def load(name):
    with open(os.path.join(REPO, "testdata", name), encoding="utf-8") as f:
        return json.load(f)


KEY_VECTORS = load("bucket_vectors.json")
MESSAGE_VECTORS = load("bucket_message_vectors.json")


@pytest.mark.parametrize("v", KEY_VECTORS, ids=lambda v: v.get("key_text") or v["key_hex"] or "empty")
def test_murmur2_and_bucket_for_key(v):
    key = bytes.fromhex(v["key_hex"])
    assert contract.murmur2(key) == v["murmur2"]
    for count, bucket in v["buckets"].items():
        assert contract.bucket_for_key(key, int(count)) == bucket


def test_murmur2_matches_kafka():
    # Kafka's own UtilsTest vectors, as signed Java ints.
    for text, want in {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
                       "a-little-bit-longer-string": -1486304829, "abc": 479470107,
                       "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}.items():
        assert contract.murmur2(text.encode()) == want & 0xFFFFFFFF


@pytest.mark.parametrize("v", MESSAGE_VECTORS, ids=lambda v: f"{v['case']}/{v['bucket_count']}")
def test_bucket_for_message(v):
    key = None if v["key_hex"] is None else bytes.fromhex(v["key_hex"])
    assert contract.bucket_for(v["id"], key, v["partition"], v["bucket_count"]) == v["bucket"]


def test_vectors_cover_the_cases():
    cases = {v["case"] for v in MESSAGE_VECTORS}
    assert any(v["key_hex"] == "" for v in MESSAGE_VECTORS)
    assert any(v["key_hex"] is None and v["partition"] is None for v in MESSAGE_VECTORS)
    assert "partition wins over the key" in cases
    assert any(v["key_hex"] == "" for v in KEY_VECTORS)


def test_headers_round_trip_and_layout():
    hs = [("a", b"1"), ("a", None), ("", b""), ("ü", b"x" * 200)]
    b = contract.encode_headers(hs)
    assert b[:3] == bytes([1, 4, 1])  # version, count, key length of "a"
    assert contract.decode_headers(b) == hs
    assert contract.encode_headers([]) is None
    # 200 encodes as a two-byte uvarint: 0xc8 0x01
    assert bytes([0xC8, 0x01]) in b


def test_headers_match_go_fixture():
    # The bytes store/dynamo's encodeHeaders writes for [{k,v},{k2,nil},{"",""}]
    # (the same layout, written out by hand from the Go doc comment).
    assert contract.encode_headers([("k", b"v"), ("k2", None), ("", b"")]) == bytes(
        [1, 3, 1, ord("k"), 1, 1, ord("v"), 2, ord("k"), ord("2"), 0, 0, 1, 0])


def test_new_id_is_uuid_v7():
    u = uuid.UUID(contract.new_id(1700000000123))
    assert u.version == 7 and u.variant == uuid.RFC_4122
    assert u.int >> 80 == 1700000000123
    assert contract.canonical_uuid(str(u))
    assert contract.canonical_uuid(str(u).upper())  # as the Go writer: 36 characters, any case
    assert not contract.canonical_uuid(u.hex)


def test_topic_rules():
    assert contract.topic_error("orders.v1_x-y") is None
    for bad in ["", ".", "..", "a/b", "x" * 250, "é"]:
        assert contract.topic_error(bad)


def test_parse_config():
    base = {"pk": {"S": "config"}, "sk": {"S": "config"}, "bc": {"N": "8"}, "v": {"N": "1"}}
    c = contract.parse_config(base)
    assert (c.bucket_count, c.mode, c.retention_seconds) == (8, "delete", 0)
    w = dict(base, v={"N": "2"}, md={"S": "watermark"}, rt={"N": "86400"})
    assert contract.parse_config(w).mode == "watermark"
    assert contract.parse_config(dict(base, zz={"S": "x"})).bucket_count == 8  # unknown attributes are ignored
    tp = contract.parse_config(dict(base, tp={"SS": ["b", "a"]}))
    assert tp.topics == ("a", "b") and contract.parse_config(base).topics == ()
    v3 = dict(base, v={"N": "3"})
    c = contract.parse_config(dict(v3, be={"N": "2"}, nb={"N": "12"}, cd={"N": "1764547200000"}))
    assert (c.epoch, c.next_bucket_count, c.change_deadline_ms, c.changing) == (2, 12, 1764547200000, True)
    assert contract.parse_config(base).epoch == 0 and not contract.parse_config(base).changing
    d = contract.parse_config(dict(base, v={"N": "4"}, bc={"N": "16"}, be={"N": "1"}, ob={"N": "8"}, cd={"N": "1764547200000"}))
    assert (d.bucket_count, d.epoch, d.old_bucket_count, d.changing) == (16, 1, 8, False)  # an old epoch draining: writers go on
    r = contract.parse_config(dict(v3, rg={"L": [{"S": "eu-west-1"}, {"S": "us-east-1"}]}, rgt={"M": {"us-east-1": {"S": "eu-west-1"}}}))
    assert r.regions == ("eu-west-1", "us-east-1") and r.taken_over == {"us-east-1": "eu-west-1"}
    assert r.region_slice("eu-west-1") == (0, 4) and r.region_slice("us-east-1") == (4, 4)
    refused = {
        "a topic list that is not a string set": (dict(base, tp={"S": "a"}), False),
        "an illegal topic in the list": (dict(base, tp={"SS": ["a/b"]}), False),
        "newer version": (dict(base, v={"N": "5"}), True),
        "regions at v1": (dict(base, rg={"L": [{"S": "a"}, {"S": "b"}]}), False),
        "regions that do not divide bc": (dict(v3, rg={"L": [{"S": "a"}, {"S": "b"}, {"S": "c"}]}), False),
        "a region listed twice": (dict(v3, rg={"L": [{"S": "a"}, {"S": "a"}]}), False),
        "a bad region id": (dict(v3, rg={"L": [{"S": "A"}, {"S": "b"}]}), False),
        "takeovers without regions": (dict(v3, rgt={"M": {"a": {"S": "b"}}}), False),
        "a takeover by an unlisted region": (dict(v3, rg={"L": [{"S": "a"}, {"S": "b"}]}, rgt={"M": {"a": {"S": "c"}}}), False),
        "a change without a deadline": (dict(v3, nb={"N": "16"}), False),
        "an old epoch draining at v3": (dict(v3, ob={"N": "8"}, cd={"N": "1"}), False),
        "a negative epoch": (dict(v3, be={"N": "-1"}), False),
        "unknown mode": (dict(base, v={"N": "2"}, md={"S": "compact"}, rt={"N": "86400"}), True),
        "watermark at v1": (dict(base, md={"S": "watermark"}, rt={"N": "86400"}), False),
        "short retention": (dict(w, rt={"N": "60"}), False),
        "retention in delete mode": (dict(base, rt={"N": "60"}), False),
        "bucket count 0": (dict(base, bc={"N": "0"}), False),
        "missing bc": ({k: v for k, v in base.items() if k != "bc"}, False),
        "no item": ({}, False),
    }
    for name, (item, unknown) in refused.items():
        with pytest.raises(contract.ConfigItemError) as e:
            contract.parse_config(item)
        assert e.value.unknown == unknown, name


def test_message_item_shape():
    class M:
        id, bucket, sequence, topic = "01890a5d-ac96-774b-bcce-b302099a8057", 3, 7, "t"
        key, value, headers, partition, created_ms = b"", None, [], None, 1000
    item = contract.message_item(M)
    assert item["k"] == {"B": b""} and "val" not in item and "h" not in item and "x" not in item
    assert item["v"] == {"N": "1"} and item["s"] == {"N": "7"}
    wm = contract.message_item(M, retention_seconds=3600, now_s=0.5)
    assert wm["x"] == {"N": str(1 + 3600)}  # max(created 1.0 s, now 0.5 s) + retention, rounded up


def test_docs_vector_table_and_header_example():
    """docs/contract.md's bucket table and header example are this code's output."""
    with open(os.path.join(REPO, "docs", "contract.md"), encoding="utf-8") as f:
        doc = f.read()
    table = doc[doc.index("| message | hashed bytes"):].split("\n\n", 1)[0].splitlines()[2:]
    assert len(table) == 4
    ident = "01890a5d-ac96-774b-bcce-b302099a8057"
    cases = [(ident, b"", None), (ident, b"order-1", None), (ident, None, None), (ident, b"order-1", 13)]
    for row, (mid, key, part) in zip(table, cases):
        cells = [c.strip() for c in row.strip("|").split("|")]
        if part is None:
            hashed = key if key is not None else uuid.UUID(mid).bytes
            assert cells[1] == ("none" if hashed == b"" else "`" + hashed.hex(" ") + "`"), row
            assert int(cells[2]) == contract.murmur2(hashed), row
        assert [int(c) for c in cells[3:6]] == [contract.bucket_for(mid, key, part, n) for n in (8, 64, 4096)], row
    example = contract.encode_headers([("k", b"v"), ("k2", None), ("", b"")]).hex(" ")
    assert f"`{example}`" in doc


def test_moved_counter_is_the_go_sides():
    """The string a first online change leaves in a counter's n (so that
    writers without epochs fail their ADD) is byte for byte the Go side's:
    this writer writes it too when it freezes a counter left behind."""
    with open(os.path.join(REPO, "sequence", "epoch.go"), encoding="utf-8") as f:
        src = f.read()
    assert f'MovedCounter = "{contract.MOVED_COUNTER}"' in src


def test_bucket_count_range_is_the_go_sides():
    """The writers of both languages accept the same bucket counts: Go's one
    check is outbox.ValidBucketCount, 1..MaxBucketCount (bucket.go)."""
    with open(os.path.join(REPO, "bucket.go"), encoding="utf-8") as f:
        src = f.read()
    assert f"const MaxBucketCount = {contract.MAX_BUCKET_COUNT}\n" in src
    assert "bool { return n >= 1 && n <= MaxBucketCount }" in src
    n = contract.MAX_BUCKET_COUNT
    assert [contract.valid_bucket_count(c) for c in (-1, 0, 1, n, n + 1)] == [False, False, True, True, False]
    for c in (0, n + 1):
        with pytest.raises(ValueError):
            contract.bucket_for(str(uuid.uuid4()), b"k", None, c)
    assert contract.bucket_for(str(uuid.uuid4()), None, n - 1, n) == n - 1
