"""The Writer and config format 3 on a fake control table that keeps the
counters' epoch conditions (docs/contract.md section 5): a reservation
refused for its epoch, the pause while a change is in progress, the thaw,
the deadline, and region mode's slice. The same writer runs against
DynamoDB Local, beside a Go BucketCount change and the Go relay, in
integration/pywriter_test.go (TestPythonWriterRebucket)."""

import types

import pytest
from botocore.exceptions import ClientError

from outbox_writer import BucketCountChangeError, ConfigError, Message, Writer, contract


def ccf(old):
    return ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": "failed"}, "Item": old,
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, "UpdateItem")


class Table:
    """A control table of counters and one config item, with a clock that
    the writer's sleeps advance; on_sleep runs after each."""

    def __init__(self, config, counters=None):
        self.meta = types.SimpleNamespace(config=types.SimpleNamespace(retries={"total_max_attempts": 1}))
        self.config, self.counters = config, counters or {}
        self.now, self.on_sleep, self.calls, self.commits = 1000.0, None, [], []

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s
        if self.on_sleep:
            self.on_sleep(self)

    def get_item(self, **kw):
        if kw["Key"].get("pk"):
            self.calls.append("config")
            return {"Item": self.config}
        return {}

    def update_item(self, **kw):
        if kw["Key"]["pk"]["S"] == "config":
            return self.update_config(**kw)
        b = int(kw["Key"]["pk"]["S"].split("#")[1])
        item = self.counters.setdefault(b, {})
        names, vals, cond = kw["ExpressionAttributeNames"], kw["ExpressionAttributeValues"], kw.get("ConditionExpression")
        ce = item.get("ce", {}).get("N")
        ok = {"attribute_not_exists(#ce)": ce is None, "#ce = :e": ce == vals.get(":e", {}).get("N"),
              "#ce = :frz": ce == vals.get(":frz", {}).get("N"),
              "#ce BETWEEN :one AND :e": ce is not None and 1 <= int(ce) <= int(vals.get(":e", {"N": "0"})["N"])}[cond]
        if not ok:
            self.calls.append(("refused", b, kw["UpdateExpression"]))
            raise ccf(dict(item))
        if kw["UpdateExpression"] == "ADD #n :n SET #v = :v":
            attr = names["#n"]
            n = int(item.get(attr, {"N": "0"})["N"]) + int(vals[":n"]["N"])
            item[attr], item["v"] = {"N": str(n)}, vals[":v"]
            self.calls.append(("reserve", b, attr, n))
            return {"Attributes": {attr: {"N": str(n)}, "v": vals[":v"]}}
        if kw["UpdateExpression"] == "SET #cf = if_not_exists(#n, :z), #n = :moved, #ce = :frz":
            item["cf"], item["n"], item["ce"] = item.get("n", vals[":z"]), vals[":moved"], vals[":frz"]
            self.calls.append(("freeze", b, int(item["cf"]["N"])))
            return {"Attributes": dict(item)}
        assert kw["UpdateExpression"] == "SET #q = :cf, #ce = :e", kw
        item["q"], item["ce"] = vals[":cf"], vals[":e"]
        self.calls.append(("thaw", b, int(vals[":cf"]["N"])))
        return {}

    def update_config(self, **kw):
        """The abort's conditional write on the config item (the only one a
        writer makes); config_fault, if set, runs after it applied."""
        names, vals = kw["ExpressionAttributeNames"], kw["ExpressionAttributeValues"]
        assert kw["ConditionExpression"] == "#bc = :bc AND #be = :be AND #nb = :nb AND #cd = :cd", kw
        assert kw["UpdateExpression"] == "SET #be = :be1 REMOVE #nb, #cd", kw
        if self.config_denied:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "denied"}}, "UpdateItem")
        if any(self.config.get(names[k]) != vals[":" + k[1:]] for k in ("#bc", "#be", "#nb", "#cd")):
            self.calls.append("abort refused")
            raise ccf(dict(self.config))
        item = dict(self.config)
        item["be"] = vals[":be1"]
        del item["nb"], item["cd"]
        self.config = item
        self.calls.append("abort")
        if self.config_fault:
            fault, self.config_fault = self.config_fault, None
            raise fault
        return {}

    config_denied, config_fault = False, None

    def describe_table(self, **kw):
        return {"Table": {"TableName": kw["TableName"]}}  # no replicas (tests/test_writer.py tests the refusal)

    def put_item(self, **kw):
        self.calls.append(("fence", int(kw["Item"]["b"]["N"]), int(kw["Item"]["s"]["N"])))

    def transact_write_items(self, **kw):
        self.commits.append(kw["TransactItems"])


def cfg(bc, v=1, **attrs):
    item = {"pk": {"S": "config"}, "sk": {"S": "config"}, "bc": {"N": str(bc)}, "v": {"N": str(v)}}
    item.update({k: ({"N": str(x)} if isinstance(x, int) else x) for k, x in attrs.items()})
    return item


def writer(t, **kw):
    return Writer(t, "msgs", "ctl", clock=t.clock, sleep=t.sleep, **kw)


KEY = b"order-1"  # bucket 6 of 8, 6 of 16, 2 of 12 (testdata/bucket_vectors.json)


def test_a_change_it_had_not_seen_is_learnt_from_the_reservation():
    t = Table(cfg(8))
    w = writer(t)
    assert w.write(messages=[Message("t", b"1", key=KEY)]).epoch == 0
    # A change to 16 ran to its end meanwhile (the changer thawed every counter).
    t.config = cfg(16, v=3, be=1)
    t.counters = {b: {"n": {"S": contract.MOVED_COUNTER}, "q": {"N": "5"}, "ce": {"N": "1"}} for b in range(16)}
    t.calls = []
    res = w.write(messages=[Message("t", b"2", key=KEY)])
    m = res.messages[0]
    assert (res.rebuckets, res.bucket_count, res.epoch, m.bucket, m.sequence) == (1, 16, 1, contract.bucket_for_key(KEY, 16), 6)
    assert t.calls[:3] == [("refused", 6, "ADD #n :n SET #v = :v"), "config", ("reserve", 6, "q", 6)]
    assert w.view == (16, 1)
    # The next write reserves at epoch 1 at once, conditionally.
    t.calls = []
    w.write(messages=[Message("t", b"3", key=KEY)])
    assert t.calls == [("reserve", 6, "q", 7)]


def test_it_pauses_while_a_change_is_in_progress_then_thaws_and_rebuckets():
    t = Table(cfg(8))
    w = writer(t)
    # The change to 12 froze the counters (fence point 4 in bucket 2) and is draining.
    t.config = cfg(8, v=3, be=0, nb=12, cd=int((t.now + 30) * 1000))
    t.counters = {b: {"n": {"S": contract.MOVED_COUNTER}, "cf": {"N": "4"}, "ce": {"N": "-1"}} for b in range(12)}

    def flip(t):
        if t.now >= 1000.5:  # the relays drained: the changer flips the config item, not yet the counters
            t.config = cfg(12, v=3, be=1)
    t.on_sleep = flip
    res = w.write(messages=[Message("t", b"1", key=KEY), Message("t", b"2", key=b"other")])
    m = res.messages[0]
    assert (res.bucket_count, res.epoch, m.bucket) == (12, 1, contract.bucket_for_key(KEY, 12))
    assert m.sequence == 5  # on from the fence point
    assert 0.5 <= res.paused_seconds <= 0.7 and res.rebuckets == 1
    assert ("thaw", m.bucket, 4) in t.calls
    polls = t.calls.count("config")
    assert 5 <= polls <= 60, polls  # every 10..100 ms over half a second
    assert len(t.commits) == 1


def abandoned(t, deadline_in=1.0):
    """A change 8 -> 16 whose tool stopped after freezing every counter."""
    t.config = cfg(8, v=3, be=0, nb=16, cd=int((t.now + deadline_in) * 1000))
    t.counters = {b: {"n": {"S": contract.MOVED_COUNTER}, "cf": {"N": "3"}, "ce": {"N": "-1"}} for b in range(16)}


def test_a_change_past_its_deadline_is_aborted_by_the_writer():
    t = Table(cfg(8))
    w = writer(t)
    abandoned(t)
    start = t.now
    res = w.write(messages=[Message("t", b"1", key=KEY)])
    assert 1 <= t.now - start <= 1.2  # waited for the deadline, no longer
    assert res.aborted_changes == 1 and t.calls.count("abort") == 1
    assert (res.bucket_count, res.epoch, res.messages[0].bucket, res.messages[0].sequence) == (8, 1, contract.bucket_for_key(KEY, 8), 4)
    assert t.config == cfg(8, v=3, be=1)
    assert all(c["ce"] == {"N": "1"} and c["q"] == {"N": "3"} for b, c in t.counters.items() if b != 6)  # every counter thawed
    assert len(t.commits) == 1


def test_the_abort_survives_a_resend():
    # The abort applied, its response was lost, the writer sent it again:
    # the second one's condition fails on the item the first one wrote.
    t = Table(cfg(8))
    w = writer(t)
    abandoned(t, deadline_in=0)
    t.config_fault = ClientError({"Error": {"Code": "InternalServerError", "Message": "lost"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "UpdateItem")
    res = w.write(messages=[Message("t", b"1", key=KEY)])
    assert t.calls.count("abort") == 1 and t.calls.count("abort refused") == 1
    assert res.aborted_changes == 1 and (res.bucket_count, res.epoch) == (8, 1)
    assert t.config == cfg(8, v=3, be=1) and len(t.commits) == 1


def test_a_change_another_party_ended_is_only_thawed():
    t = Table(cfg(8))
    w = writer(t)
    abandoned(t, deadline_in=0)

    def other(**kw):  # the resumed change flipped to 16 between the writer's read and its write
        t.config = cfg(16, v=3, be=1)
        return Table.update_config(t, **kw)
    t.update_config = other
    res = w.write(messages=[Message("t", b"1", key=KEY)])
    assert res.aborted_changes == 0 and t.calls.count("abort refused") == 1
    assert (res.bucket_count, res.epoch) == (16, 1) and len(t.commits) == 1
    assert all(c["ce"] == {"N": "1"} for c in t.counters.values())  # thawed all the same


def test_a_change_it_cannot_abort_fails_after_the_grace_with_nothing_written():
    t = Table(cfg(8))
    w = writer(t, change_grace_seconds=2)
    abandoned(t)
    t.config_denied = True
    start = t.now
    with pytest.raises(BucketCountChangeError, match="could not abort it"):
        w.write(messages=[Message("t", b"1", key=KEY)])
    assert 3 <= t.now - start <= 3.2  # the deadline (1 s) plus the grace (2 s)
    assert t.commits == []


def test_a_counter_left_behind_is_frozen_and_thawed_into_the_epoch():
    # 8 -> 4 -> 8: the change to 4 froze buckets 0..7 and thawed them into
    # epoch 1; bucket 6's counter is still at epoch 0's n (say a restore put
    # it back), and the writer at epoch 2 meets it.
    t = Table(cfg(8, v=3, be=2))
    w = writer(t)
    t.counters = {6: {"n": {"N": "9"}}}
    m = w.write(messages=[Message("t", b"1", key=KEY)]).messages[0]
    assert (m.bucket, m.sequence) == (6, 10)  # on from the old counter's last number
    assert t.calls[-3:] == [("freeze", 6, 9), ("thaw", 6, 9), ("reserve", 6, "q", 10)]
    assert t.counters[6]["n"] == {"S": contract.MOVED_COUNTER} and t.counters[6]["ce"] == {"N": "2"}


def test_a_counter_ahead_of_the_config_item_is_refused():
    t = Table(cfg(8, v=3, be=1))
    w = writer(t)
    t.counters = {6: {"q": {"N": "3"}, "ce": {"N": "2"}}}
    with pytest.raises(BucketCountChangeError, match="edited by hand"):
        w.write(messages=[Message("t", b"1", key=KEY)])
    assert t.commits == []


def test_region_mode_writes_its_slice_and_needs_its_region():
    regions = {"rg": {"L": [{"S": "a"}, {"S": "b"}]}}
    t = Table(cfg(8, v=3, **regions))
    with pytest.raises(ConfigError, match="region mode"):
        writer(t)
    with pytest.raises(ConfigError, match="not one of the outbox's regions"):
        writer(t, region="c")
    with pytest.raises(ConfigError, match="not in region mode"):
        writer(Table(cfg(8)), region="a")
    t.meta.region_name = "a"  # the client of region a's replica
    with pytest.raises(ConfigError, match="region is 'b' but its DynamoDB client is for 'a'"):
        writer(t, region="b")
    assert [c for c in t.calls if c != "config"] == []  # refused before anything was reserved
    for region, lo in (("a", 0), ("b", 4)):
        t.meta.region_name = region
        w = writer(t, region=region)
        for i in range(20):
            key = f"k{i}".encode()
            b = w.write(messages=[Message("t", b"v", key=key)]).messages[0].bucket
            assert b == lo + contract.bucket_for_key(key, 4)
