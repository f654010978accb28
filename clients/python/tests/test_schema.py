"""The schemas (schema/*.schema.json) accept the examples and what this
writer builds, and reject what the contract forbids."""

import copy
import json
import os
import sys

import jsonschema
import pytest

from conftest import REPO
from outbox_writer import contract
from outbox_writer.writer import Message

SCHEMA_DIR = os.path.join(REPO, "schema")
sys.path.insert(0, SCHEMA_DIR)
import validate  # noqa: E402

SCHEMAS = validate.load_schemas()


def example(name):
    with open(os.path.join(SCHEMA_DIR, "examples", name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def schema_for(name):
    for prefix, kind in (("message", "message-item"), ("fence", "fence-item"), ("published", "fence-item"),
                         ("counter", "counter-item"), ("config", "config-item")):
        if name.startswith(prefix):
            return SCHEMAS[kind]
    raise KeyError(name)


EXAMPLES = sorted(f[:-5] for f in os.listdir(os.path.join(SCHEMA_DIR, "examples")) if f.endswith(".json"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_are_valid(name):
    schema_for(name).validate(example(name))


def _set(item, k, v):
    item = copy.deepcopy(item)
    if v is None:
        item.pop(k)
    else:
        item[k] = v
    return item


REJECTED = [
    ("message-keyed", "v", {"N": "2"}, "a newer item format version"),
    ("message-keyed", "v", None, "no format version"),
    ("message-keyed", "id", None, "no id"),
    ("message-keyed", "id", {"S": "not-a-uuid"}, "an id that is not a UUID"),
    ("message-keyed", "t", {"S": ".."}, "an illegal topic"),
    ("message-keyed", "t", {"S": "a/b"}, "an illegal topic"),
    ("message-keyed", "b", {"N": "-1"}, "a negative bucket"),
    ("message-keyed", "s", {"N": "0"}, "sequence 0"),
    ("message-keyed", "s", {"S": "1"}, "a sequence that is not a number"),
    ("message-keyed", "h", {"B": ""}, "an empty header attribute"),
    ("message-keyed", "k", {"S": "order-42"}, "a key that is not binary"),
    ("message-keyed", "f", {"BOOL": True}, "a fence flag on a message"),
    ("message-keyed", "zz", {"S": "x"}, "an unknown attribute"),
    ("message-keyed", "c", None, "no created-at"),
    ("message-keyed", "p", {"N": "-3"}, "a negative partition"),
    ("fence", "f", {"BOOL": False}, "a fence flag that is false"),
    ("fence", "x", None, "a fence without TTL"),
    ("fence", "t", {"S": "t"}, "a fence with a topic"),
    ("counter", "n", {"N": "0"}, "a counter at 0"),
    ("counter", "pk", {"S": "bucket#03"}, "a bucket with a leading zero"),
    ("config-delete", "v", {"N": "5"}, "a newer config version"),
    ("message-keyed", "ep", {"N": "0"}, "an epoch stamp of 0 (epoch 0 has none)"),
    ("config-delete", "bc", {"N": "0"}, "no buckets"),
    ("config-delete", "rg", {"L": [{"S": "EU WEST"}]}, "a region id outside a-z, 0-9 and '-'"),
    ("config-delete", "rg", {"L": []}, "region mode without a region"),
    ("config-delete", "rgt", {"M": {"us-east-1": {"N": "1"}}}, "a takeover that names no region"),
    ("config-delete", "bc", {"N": "4097"}, "more than 4096 buckets"),
    ("config-delete", "rt", {"N": "3600"}, "a retention in delete mode"),
    ("config-delete", "md", {"S": "compact"}, "an unknown mode"),
    ("config-watermark", "v", {"N": "1"}, "watermark mode at version 1"),
    ("config-watermark", "rt", None, "watermark mode without retention"),
    ("config-watermark", "rt", {"N": "3599"}, "a retention under an hour"),
    ("config-watermark", "zz", {"S": "x"}, "an unknown attribute"),
    ("config-topics", "tp", {"SS": []}, "an empty topic list"),
    ("config-topics", "tp", {"SS": ["a/b"]}, "an illegal topic in the list"),
    ("config-topics", "tp", {"S": "orders"}, "a topic list that is not a string set"),
]


@pytest.mark.parametrize("name,attr,value,why", REJECTED, ids=[f"{r[0]}: {r[3]}" for r in REJECTED])
def test_schemas_reject(name, attr, value, why):
    with pytest.raises(jsonschema.ValidationError):
        schema_for(name).validate(_set(example(name), attr, value))


def to_json(item):
    return {k: contract.to_json(v) for k, v in item.items()}


def test_this_writers_items_are_valid():
    for key, value, headers, partition, retention in [
        (b"order-1", b"v", [("a", b"1"), ("b", None)], None, 0),
        (b"", None, [], None, 0),
        (None, b"", [], 7, 86400),
    ]:
        m = Message("t", value, key=key, headers=headers, partition=partition, id=contract.new_id(), created_ms=1764547200000)
        m.bucket, m.sequence = 3, 9
        SCHEMAS["message-item"].validate(to_json(contract.message_item(m, retention)))
    SCHEMAS["fence-item"].validate(to_json(contract.fence_item(3, 10, 1764547200.5, contract.DEFAULT_FENCE_TTL_SECONDS)))


def test_cross_checks_catch_a_misplaced_message_and_an_unreserved_number():
    rows = [("control", example("config-delete")), ("control", example("counter")), ("messages", example("message-keyed"))]
    counts, problems = validate.check(rows)
    assert counts["invalid"] == 1 and counts["placement_mismatches"] == 1  # order-42 is not in bucket 3 of 8
    bucket = contract.bucket_for_key(b"order-42", 8)
    msg = _set(example("message-keyed"), "b", {"N": str(bucket)})
    counts, problems = validate.check(rows[:2] + [("messages", msg)])
    assert counts["invalid"] == 1 and "never reserved" in problems[0]  # no counter for that bucket
    counter = {"pk": {"S": f"bucket#{bucket}"}, "sk": {"S": "seq"}, "n": {"N": "42"}, "v": {"N": "1"}}
    counts, problems = validate.check(rows[:1] + [("control", counter), ("messages", msg)])
    assert counts["invalid"] == 0, problems


def test_cross_checks_catch_a_topic_outside_the_config_items_list():
    bucket = contract.bucket_for_key(b"order-42", 8)
    msg = _set(example("message-keyed"), "b", {"N": str(bucket)})
    counter = {"pk": {"S": f"bucket#{bucket}"}, "sk": {"S": "seq"}, "n": {"N": "42"}, "v": {"N": "1"}}
    config = _set(example("config-topics"), "tp", {"SS": ["payments", "refunds"]})
    assert msg["t"]["S"] not in config["tp"]["SS"]
    counts, problems = validate.check([("control", config), ("control", counter), ("messages", msg)])
    assert counts["invalid"] == 1 and "is not one the outbox serves" in problems[0], problems
    config["tp"]["SS"].append(msg["t"]["S"])
    counts, problems = validate.check([("control", config), ("control", counter), ("messages", msg)])
    assert counts["invalid"] == 0, problems
