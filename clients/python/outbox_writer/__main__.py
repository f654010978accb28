"""python -m outbox_writer: write outbox messages from JSON (see README.md).

  python -m outbox_writer --endpoint URL --messages-table T --control-table C \\
      --json-messages FILE [--json-items FILE] [--token TOKEN]
  python -m outbox_writer ... --json-batch FILE     # one transaction per entry, in order
  python -m outbox_writer ... --json-lines -        # one transaction per input line, answered as it arrives
  (--region-id R: this writer's region, required when the outbox is in region mode)

Prints one JSON line per transaction: {"ok": true, "messages": [{"id", "topic",
"bucket", "sequence"}...], ...} or {"ok": false, "error": "Outbox.ConditionFailed",
"message": ..., "released": [[bucket, seq]...]}. Exit status: the worst of the
transactions': 0 all committed, 3 config refused (nothing written), 4 a
condition failed, 5 another failure that wrote nothing, 6 outcome unknown,
7 abandoned (--abandon-after-reserve), 8 invalid input; 1 and 2 are
Python's own (an uncaught exception, a bad command line).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

from . import contract
from .errors import (ConditionFailedError, ConfigError, OutboxError, OutcomeUnknownError, ValidationError)
from .writer import Message, Writer, new_client

EXIT = {ValidationError: 8, ConfigError: 3, ConditionFailedError: 4, OutcomeUnknownError: 6}


class Abandoned(Exception):
    """--abandon-after-reserve: the writer stops between reservation and
    commit, as a crashed writer would (tests only)."""

    def __init__(self, reserved):
        super().__init__("abandoned after reserving")
        self.reserved = reserved


def _bytes(obj, name, where):
    """text in name, or base64 in name_b64; None when neither is present."""
    if obj.get(name + "_b64") is not None:
        return base64.b64decode(obj[name + "_b64"], validate=True)
    v = obj.get(name)
    if v is None:
        return None
    if name == "value" and not isinstance(v, str):
        return json.dumps(v, separators=(",", ":")).encode()
    if not isinstance(v, str):
        raise ValidationError(where, name.capitalize(), f"{name} must be a string (or {name}_b64 base64)")
    return v.encode("utf-8")


def message_from_json(obj, i) -> Message:
    """{"topic", "key" | "key_b64", "value" (text or any JSON) | "value_b64",
    "headers": [{"key", "value" | "value_b64"}], "partition", "id", "created_ms"}."""
    if not isinstance(obj, dict):
        raise ValidationError(i, "Message", "each message is a JSON object")
    headers = []
    for j, h in enumerate(obj.get("headers") or []):
        if not isinstance(h, dict) or not isinstance(h.get("key"), str):
            raise ValidationError(i, f"Headers[{j}]", 'a header is {"key": str, "value": str | null} or value_b64')
        headers.append((h["key"], _bytes(h, "value", i)))
    return Message(topic=obj.get("topic"), key=_bytes(obj, "key", i), value=_bytes(obj, "value", i), headers=headers,
                   partition=obj.get("partition"), id=obj.get("id"), created_ms=obj.get("created_ms"))


def items_from_json(items):
    """Your TransactWriteItems in DynamoDB JSON (B as base64), to boto3 form."""
    out = []
    for it in items:
        conv = {}
        for kind, body in it.items():
            body = dict(body)
            for field in ("Item", "Key", "ExpressionAttributeValues"):
                if field in body:
                    body[field] = {k: contract.from_json(v) for k, v in body[field].items()}
            conv[kind] = body
        out.append(conv)
    return out


def run_one(writer, items, messages, token, abandon=False) -> tuple[int, dict]:
    try:
        msgs = [message_from_json(m, i) for i, m in enumerate(messages)]
        if abandon:
            def stop(reserved):
                raise Abandoned(reserved)
            writer.after_reserve = stop
        try:
            res = writer.write(items_from_json(items), msgs, client_request_token=token)
        finally:
            writer.after_reserve = None
    except Abandoned as a:
        return 7, {"ok": False, "error": "Abandoned", "reserved": [[b, s] for b, f, n in a.reserved for s in range(f, f + n)]}
    except OutboxError as e:
        code = next((c for cls, c in EXIT.items() if isinstance(e, cls)), 5)
        return code, {"ok": False, "error": e.code, "message": str(e), "released": [list(x) for x in e.released]}
    return 0, {"ok": True, "token": res.client_request_token, "attempts": res.attempts, "reservations": res.reservations,
               "rebuckets": res.rebuckets, "paused_ms": int(res.paused_seconds * 1000), "bucket_count": res.bucket_count,
               "epoch": res.epoch, "aborted_changes": res.aborted_changes, "cuts": res.cuts,
               "messages": [{"id": m.id, "topic": m.topic, "bucket": m.bucket, "sequence": m.sequence, "created_ms": m.created_ms}
                            for m in res.messages]}


def _load(path):
    with (sys.stdin if path == "-" else open(path, encoding="utf-8")) as f:
        return json.load(f)


def _lines(path):
    f = sys.stdin if path == "-" else open(path, encoding="utf-8")
    for line in f:
        if line.strip():
            yield json.loads(line)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m outbox_writer", description="Write outbox messages per docs/contract.md.")
    p.add_argument("--endpoint", help="DynamoDB endpoint URL (DynamoDB Local, LocalStack); default: AWS")
    p.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    p.add_argument("--messages-table", required=True)
    p.add_argument("--control-table", required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--json-messages", help="a JSON list of messages: one transaction ('-' reads stdin)")
    src.add_argument("--json-batch", help='a JSON list of {"items": [...], "messages": [...], "token": ...}: one transaction each')
    src.add_argument("--json-lines", help="one such object per line ('-' reads stdin), each written and answered before the next is read")
    p.add_argument("--region-id", help="this writer's region, when the outbox is in region mode (its config item lists regions)")
    p.add_argument("--json-items", help="a JSON list of your TransactWriteItems (DynamoDB JSON), with --json-messages")
    p.add_argument("--token", help="the ClientRequestToken (an idempotency key), with --json-messages")
    p.add_argument("--abandon-after-reserve", action="store_true", help="tests: reserve, then stop without committing")
    p.add_argument("--report-change-waits", action="store_true",
                   help='tests: print {"event": "change-wait", ...} on stderr when a write starts waiting for a BucketCount change')
    a = p.parse_args(argv)

    try:
        writer = Writer(new_client(a.endpoint, a.region), a.messages_table, a.control_table, region=a.region_id)
    except ConfigError as e:
        print(json.dumps({"ok": False, "error": e.code, "message": str(e), "unknown": e.unknown}), flush=True)
        return 3
    if a.report_change_waits:
        def report(c):
            print(json.dumps({"event": "change-wait", "bucket_count": c.bucket_count, "next_bucket_count": c.next_bucket_count,
                              "epoch": c.epoch}), file=sys.stderr, flush=True)
        writer.on_change_wait = report
    if a.json_messages:
        batch = [{"items": _load(a.json_items) if a.json_items else [], "messages": _load(a.json_messages), "token": a.token}]
    elif a.json_lines:
        batch = _lines(a.json_lines)
    else:
        batch = _load(a.json_batch)
    worst = 0
    for tx in batch:
        code, out = run_one(writer, tx.get("items") or [], tx.get("messages") or [], tx.get("token"),
                            abandon=a.abandon_after_reserve or tx.get("abandon_after_reserve", False))
        print(json.dumps(out), flush=True)
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
