"""The third-party consumer: kafka-python (not franz-go) reads back what the
relay published and checks it independently of the Go checker.

Usage: python thirdparty_consumer.py BOOTSTRAP TOPIC PARTITIONS WANT_UNIQUE ID_HEADER [WANT_RECORDS]

Reads every partition of TOPIC from the start to its end offset (no group)
and checks, per record:
  - headers: the outbox message-id header is there and names the id in the
    JSON value, and the writers' "kind" header came through;
  - placement: the partition is murmur2(key) % PARTITIONS as kafka-python's
    own port of the Java client's partitioner computes it;
  - order per key: the first copy of each message of a key comes after the
    first copies of every message of that key with a lower (version, index).
Prints one line, "thirdparty: ...", and exits 1 if anything is wrong, the
unique messages read are not WANT_UNIQUE, or (if given) the records read,
duplicates included, are not WANT_RECORDS (what the Go checker read).
"""

import json
import sys

from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2


def main():
    bootstrap, topic, partitions, want, id_header = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    want_records = int(sys.argv[6]) if len(sys.argv) > 6 else None
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=20000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    remaining = {tp: end for tp, end in ends.items() if end > 0}
    records = misplaced = header_mismatch = order_violations = 0
    seen = set()
    last = {}  # key -> highest order among first copies
    for rec in consumer:
        tp = TopicPartition(rec.topic, rec.partition)
        records += 1
        headers = {k: v for k, v in rec.headers}
        value = json.loads(rec.value)
        if headers.get(id_header, b"").decode() != value["id"] or headers.get("kind") != b"order-updated":
            header_mismatch += 1
        if rec.key is None or (murmur2(rec.key) & 0x7FFFFFFF) % partitions != rec.partition:
            misplaced += 1
        if value["id"] not in seen:
            seen.add(value["id"])
            order = value["ver"] * 1000 + value["idx"]
            if order < last.get(rec.key, -1):
                order_violations += 1
            last[rec.key] = max(order, last.get(rec.key, -1))
        if rec.offset + 1 >= remaining.get(tp, 0):
            remaining.pop(tp, None)
        if not remaining:
            break
    consumer.close()
    ok = (not remaining and misplaced == 0 and header_mismatch == 0 and order_violations == 0 and len(seen) == want
          and (want_records is None or records == want_records))
    print("thirdparty: client=kafka-python records=%d want_records=%s unique=%d want=%d keys=%d misplaced=%d header_mismatch=%d "
          "order_violations=%d unread_partitions=%d %s" % (records, want_records, len(seen), want, len(last), misplaced,
                                                           header_mismatch, order_violations, len(remaining),
                                                           "ok" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
