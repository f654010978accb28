"""The Writer and config formats 3 and 4 on a fake control table that
keeps the counters' epoch conditions (docs/contract.md section 5): a
reservation refused for its epoch, the cut of a counter the changer has not
reached, the re-bucket on a later epoch, the epoch stamp, no waiting, an
older version's frozen change aborted, and region mode's slice. The same
writer runs against DynamoDB Local, beside a Go BucketCount change and the
Go relay, in integration/pyrebucket_test.go (TestPythonWriterRebucket)."""

import types

import pytest
from botocore.exceptions import ClientError

from outbox_writer import BucketCountChangeError, ConfigError, Message, Writer, contract


def ccf(old):
    return ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": "failed"}, "Item": old,
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, "UpdateItem")


CUT_LEGACY = "SET #cf = if_not_exists(#n, :z), #q = if_not_exists(#n, :z), #n = :moved, #ce = :to"
CUT_EARLIER = "SET #cf = if_not_exists(#q, :z), #ce = :to"
CUT_FROZEN = "SET #q = if_not_exists(#cf, :z), #ce = :to"


class Table:
    """A control table of counters and one config item, with a clock that
    the writer's sleeps advance (a write during a change must not sleep);
    resend_cut applies each cut twice and answers the second, as the SDK
    does when the first response was lost."""

    def __init__(self, config, counters=None):
        self.meta = types.SimpleNamespace(config=types.SimpleNamespace(retries={"total_max_attempts": 1}))
        self.config, self.counters = config, counters or {}
        self.now, self.slept, self.calls, self.commits = 1000.0, 0.0, [], []
        self.resend_cut = False

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s
        self.slept += s

    def get_item(self, **kw):
        if kw["Key"].get("pk"):
            self.calls.append("config")
            return {"Item": self.config}
        return {}

    def update_item(self, **kw):
        if kw["Key"]["pk"]["S"] == "config":
            return self.update_config(**kw)
        out = self.update_counter(**kw)
        if self.resend_cut and kw["UpdateExpression"] in (CUT_LEGACY, CUT_EARLIER, CUT_FROZEN):
            return self.update_counter(**kw)
        return out

    def update_counter(self, **kw):
        b = int(kw["Key"]["pk"]["S"].split("#")[1])
        item = self.counters.setdefault(b, {})
        vals, cond, upd = kw["ExpressionAttributeValues"], kw.get("ConditionExpression"), kw["UpdateExpression"]
        ce = item.get("ce", {}).get("N")
        num = (lambda k: int(vals[k]["N"]))
        ok = {"attribute_not_exists(#ce)": lambda: ce is None, "#ce = :e": lambda: ce is not None and ce == vals[":e"]["N"],
              "#ce = :frz": lambda: ce == vals[":frz"]["N"],
              "#ce BETWEEN :one AND :before": lambda: ce is not None and num(":one") <= int(ce) <= num(":before")}[cond]()
        if not ok:
            self.calls.append(("refused", b, upd))
            raise ccf(dict(item))
        if upd == "ADD #n :n SET #v = :v":
            attr = kw["ExpressionAttributeNames"]["#n"]
            n = int(item.get(attr, {"N": "0"})["N"]) + num(":n")
            item[attr], item["v"] = {"N": str(n)}, vals[":v"]
            self.calls.append(("reserve", b, attr, n))
            return {"Attributes": {attr: {"N": str(n)}, "v": vals[":v"]}}
        if upd == CUT_LEGACY:
            n = item.get("n", vals[":z"])
            item["cf"], item["q"], item["n"], item["ce"] = n, n, vals[":moved"], vals[":to"]
        elif upd == CUT_EARLIER:
            item["cf"], item["ce"] = item.get("q", vals[":z"]), vals[":to"]
        else:
            assert upd == CUT_FROZEN, kw
            item["q"], item["ce"] = item.get("cf", vals[":z"]), vals[":to"]
        self.calls.append(("cut", b, int(item["cf"]["N"])))
        return {"Attributes": dict(item)}

    def update_config(self, **kw):
        """The abort of an older version's frozen change (the only write a
        writer makes on the config item)."""
        names, vals = kw["ExpressionAttributeNames"], kw["ExpressionAttributeValues"]
        assert kw["ConditionExpression"] == "#bc = :bc AND #be = :be AND #nb = :nb AND #cd = :cd", kw
        if any(self.config.get(names[k]) != vals[":" + k[1:]] for k in ("#bc", "#be", "#nb", "#cd")):
            self.calls.append("abort refused")
            raise ccf(dict(self.config))
        item = dict(self.config)
        item["be"] = vals[":be1"]
        del item["nb"], item["cd"]
        self.config = item
        self.calls.append("abort")
        return {}

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


def stamps(t):
    """The epoch stamp (ep) of every message put committed, None when absent."""
    return [int(p["Put"]["Item"]["ep"]["N"]) if "ep" in p["Put"]["Item"] else None for tx in t.commits for p in tx]


KEY = b"order-1"  # bucket 6 of 8, 6 of 16, 10 of 12 (testdata/bucket_vectors.json)


def test_a_change_it_had_not_seen_is_learnt_from_the_reservation():
    t = Table(cfg(8))
    w = writer(t)
    assert w.write(messages=[Message("t", b"1", key=KEY)]).epoch == 0
    # A change to 16 flipped the config item and cut every counter.
    t.config = cfg(16, v=4, be=1, ob=8, cd=2_000_000)
    t.counters = {b: {"n": {"S": contract.MOVED_COUNTER}, "q": {"N": "5"}, "cf": {"N": "5"}, "ce": {"N": "1"}} for b in range(16)}
    t.calls = []
    res = w.write(messages=[Message("t", b"2", key=KEY)])
    m = res.messages[0]
    assert (res.rebuckets, res.bucket_count, res.epoch, m.bucket, m.sequence) == (1, 16, 1, contract.bucket_for_key(KEY, 16), 6)
    assert t.calls[:3] == [("refused", 6, "ADD #n :n SET #v = :v"), "config", ("reserve", 6, "q", 6)]
    assert w.view == (16, 1) and t.slept == 0 and res.paused_seconds == 0
    assert stamps(t) == [None, 1]  # epoch 0 writes no stamp; epoch 1 stamps ep
    # The next write reserves at epoch 1 at once, conditionally.
    t.calls = []
    w.write(messages=[Message("t", b"3", key=KEY)])
    assert t.calls == [("reserve", 6, "q", 7)]


def test_it_cuts_a_counter_the_changer_has_not_reached_and_never_waits():
    # The change 8 -> 12 flipped the config item; its changer stopped
    # before cutting bucket 10, whose counter is at epoch 0 (4 reserved).
    t = Table(cfg(12, v=4, be=1, ob=8, cd=2_000_000), {10: {"n": {"N": "4"}}})
    w = writer(t)
    res = w.write(messages=[Message("t", b"1", key=KEY)])
    m = res.messages[0]
    assert (res.bucket_count, res.epoch, m.bucket, m.sequence, res.cuts) == (12, 1, 10, 5, 1)  # on from the cut point
    assert t.calls[-3:] == [("refused", 10, "ADD #n :n SET #v = :v"), ("cut", 10, 4), ("reserve", 10, "q", 5)]
    assert t.counters[10]["n"] == {"S": contract.MOVED_COUNTER} and t.counters[10]["cf"] == {"N": "4"}
    assert t.slept == 0 and res.paused_seconds == 0 and stamps(t) == [1]


def test_a_later_change_that_cut_the_counter_first_is_followed():
    # The change 8 -> 12 left bucket 10 uncut (epoch 0, 4 reserved). A
    # later change, 12 -> 16 at epoch 2, cuts it between the writer's
    # refusal and its own cut: the writer follows the config item.
    t = Table(cfg(12, v=4, be=1), {10: {"n": {"N": "4"}}})
    w = writer(t)
    cut = t.update_counter

    def later_change_first(**kw):
        if kw["UpdateExpression"] == CUT_LEGACY and t.config["bc"] == {"N": "12"}:
            t.config = cfg(16, v=4, be=2, ob=12, cd=2_000_000)
            t.counters = {b: {"n": {"S": contract.MOVED_COUNTER}, "q": {"N": "4"}, "cf": {"N": "4"}, "ce": {"N": "2"}} for b in range(16)}
        return cut(**kw)
    t.update_counter = later_change_first
    res = w.write(messages=[Message("t", b"1", key=KEY)])
    m = res.messages[0]
    assert (res.bucket_count, res.epoch, m.bucket, m.sequence) == (16, 2, contract.bucket_for_key(KEY, 16), 5)
    assert ("refused", 10, CUT_LEGACY) in t.calls and w.view == (16, 2) and stamps(t) == [2]


def test_a_cut_survives_a_resend():
    t = Table(cfg(12, v=4, be=1, ob=8, cd=2_000_000), {10: {"n": {"N": "4"}}})
    t.resend_cut = True
    res = writer(t).write(messages=[Message("t", b"1", key=KEY)])
    assert res.messages[0].sequence == 5
    assert ("cut", 10, 4) in t.calls and t.counters[10]["ce"] == {"N": "1"}


def test_a_counter_left_behind_at_an_older_epoch_is_cut():
    # 16 -> 8 -> 12 at epoch 2: bucket 10 last served epoch 1 (9 reserved).
    t = Table(cfg(12, v=4, be=2, ob=8, cd=2_000_000), {10: {"q": {"N": "9"}, "ce": {"N": "1"}}})
    m = writer(t).write(messages=[Message("t", b"1", key=KEY)]).messages[0]
    assert (m.bucket, m.sequence) == (10, 10)
    assert t.calls[-2:] == [("cut", 10, 9), ("reserve", 10, "q", 10)] and t.counters[10]["ce"] == {"N": "2"}


def test_an_older_versions_frozen_change_is_aborted():
    # A version before the cut-over froze every counter for 8 -> 16 and stopped.
    t = Table(cfg(8))
    w = writer(t)
    t.config = cfg(8, v=3, be=0, nb=16, cd=int((t.now + 3600) * 1000))
    t.counters = {b: {"n": {"S": contract.MOVED_COUNTER}, "cf": {"N": "4"}, "ce": {"N": "-1"}} for b in range(16)}
    res = w.write(messages=[Message("t", b"1", key=KEY)])
    m = res.messages[0]
    assert (res.bucket_count, res.epoch, res.aborted_changes, m.bucket, m.sequence) == (8, 1, 1, 6, 5)
    assert "abort" in t.calls and t.slept == 0
    assert all(t.counters[b]["ce"] == {"N": "1"} for b in range(16))


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
