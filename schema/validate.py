"""Validate a dump of outbox items against the schemas of this directory.

  python schema/validate.py DUMP.jsonl [--label NAME] [--items-only]

DUMP.jsonl holds one JSON object per line, {"table": "messages" | "control",
"item": <the item in DynamoDB JSON as stored>} (integration tests write it
with a Scan). Each item is checked against its schema — messages-table items
with f against fence-item, the others against message-item; the config item
and the counters (sk "seq") against theirs; leases, heartbeats and dead
letters (relay-internal, not part of the writer's contract) are counted as
other — and across items: every bucket below the config item's bc, every
message's bucket the one the contract's bucket function gives it, no stored
sequence number above its bucket's counter, x present exactly in watermark
mode, every message's topic in the config item's list (tp, when it has
one), and h decodable. Prints one summary line:

  schema: LABEL items=N messages=M fences=F counters=C configs=1 other=O invalid=0 placement_mismatches=0

and the reasons of every invalid item on stderr; exit status 1 if any.
--items-only checks each item against its schema alone (a dump of item
builders' output, without a whole outbox around them).
Needs jsonschema (scripts/install-python-deps.sh installs it).
"""

import argparse
import base64
import json
import os
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))
from outbox_writer import contract  # noqa: E402  (the contract's bucket function and header decoder)


def load_schemas():
    out = {}
    for kind in ("message-item", "fence-item", "counter-item", "config-item"):
        with open(os.path.join(HERE, kind + ".schema.json"), encoding="utf-8") as f:
            s = json.load(f)
        jsonschema.Draft202012Validator.check_schema(s)
        out[kind] = jsonschema.Draft202012Validator(s, format_checker=jsonschema.FormatChecker())
    return out


def kind_of(table, item):
    if table == "messages":
        return "fence-item" if "f" in item else "message-item"
    pk, sk = item.get("pk", {}).get("S", ""), item.get("sk", {}).get("S", "")
    if pk == "config" and sk == "config":
        return "config-item"
    if pk.startswith("bucket#") and sk == "seq":
        return "counter-item"
    return None


def check(rows, cross=True):
    """Returns (counts, problems) for the (table, item) rows."""
    schemas = load_schemas()
    counts = {"items": 0, "messages": 0, "fences": 0, "counters": 0, "configs": 0, "other": 0, "invalid": 0,
              "placement_mismatches": 0}
    problems = []
    config, counters, stored = None, {}, []
    for n, (table, item) in enumerate(rows):
        counts["items"] += 1
        kind = kind_of(table, item)
        if kind is None:
            counts["other"] += 1
            continue
        counts[{"message-item": "messages", "fence-item": "fences", "counter-item": "counters", "config-item": "configs"}[kind]] += 1
        errs = sorted(schemas[kind].iter_errors(item), key=lambda e: list(e.path))
        if errs:
            counts["invalid"] += 1
            for e in errs:
                problems.append(f"item {n} ({kind}): {'/'.join(map(str, e.path)) or '(item)'}: {e.message}")
            continue
        if kind == "config-item":
            config = item
        elif kind == "counter-item":
            counters[int(item["pk"]["S"].split("#", 1)[1])] = int(item["n"]["N"])
        else:
            stored.append((n, kind, item))
    if not cross:
        return counts, problems
    if config is None:
        problems.append("no config item in the dump: the cross-item checks need it")
        counts["invalid"] += 1
        return counts, problems
    bc = int(config["bc"]["N"])
    watermark = config.get("md", {}).get("S") == "watermark"
    topics = set(config.get("tp", {}).get("SS", []))  # empty: any topic
    for b in counters:
        if b >= bc:
            problems.append(f"counter of bucket {b}: outside the {bc} configured buckets")
            counts["invalid"] += 1
    for n, kind, item in stored:
        b, s = int(item["b"]["N"]), int(item["s"]["N"])
        bad = []
        if b >= bc:
            bad.append(f"bucket {b} is outside the {bc} configured buckets")
        if s > counters.get(b, 0):
            bad.append(f"sequence {s} is above bucket {b}'s counter {counters.get(b, 0)}: it was never reserved")
        if kind == "message-item":
            if topics and item["t"]["S"] not in topics:
                bad.append(f"topic {item['t']['S']!r} is not one the outbox serves ({', '.join(sorted(topics))})")
            if watermark != ("x" in item):
                bad.append("x (TTL) must be present exactly in watermark mode")
            if "h" in item:
                try:
                    contract.decode_headers(base64.b64decode(item["h"]["B"]))
                except ValueError as e:
                    bad.append(f"h does not decode: {e}")
            key = base64.b64decode(item["k"]["B"]) if "k" in item else None
            part = int(item["p"]["N"]) if "p" in item else None
            want = contract.bucket_for(item["id"]["S"], key, part, bc)
            if want != b:
                counts["placement_mismatches"] += 1
                bad.append(f"message {item['id']['S']} is in bucket {b}; the bucket function gives {want}")
        if bad:
            counts["invalid"] += 1
            problems.extend(f"item {n} ({kind} b={b} s={s}): {x}" for x in bad)
    return counts, problems


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("dump")
    p.add_argument("--label", default="")
    p.add_argument("--items-only", action="store_true")
    a = p.parse_args(argv)
    rows = []
    with open(a.dump, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows.append((r["table"], r["item"]))
    counts, problems = check(rows, cross=not a.items_only)
    for x in problems:
        print("schema: " + x, file=sys.stderr)
    label = (a.label + " ") if a.label else ""
    print("schema: " + label + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    return 1 if counts["invalid"] or problems else 0


if __name__ == "__main__":
    sys.exit(main())
