"""The Writer's algorithm against a fake client (no DynamoDB): the order of
calls, the token rule, the fenced-put rule, releasing and classification.
The same writer runs against DynamoDB Local and the Go relay in
integration/pywriter_test.go."""

import types

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from outbox_writer import (ConditionFailedError, ConfigError, Message, OutcomeUnknownError, SequenceFencedError,
                           ThrottledError, ValidationError, Writer)

CONFIG = {"pk": {"S": "config"}, "sk": {"S": "config"}, "bc": {"N": "8"}, "v": {"N": "1"}}


def client_error(code, **extra):
    resp = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": 400}}
    resp.update(extra)
    return ClientError(resp, "TransactWriteItems")


class Fake:
    """Records calls; transact answers pop from self.answers (an exception or None).
    describe_table answers from self.tables (table -> the DescribeTable Table,
    or an exception; absent: no replicas) and records the tables described
    in self.described, apart from calls: the writer sends them at once."""

    def __init__(self, config=CONFIG, retries=None):
        self.meta = types.SimpleNamespace(config=types.SimpleNamespace(retries=retries or {"total_max_attempts": 1}))
        self.config, self.calls, self.answers, self.counters, self.fences = config, [], [], {}, []
        self.tables, self.described, self.on_describe = {}, [], None

    def describe_table(self, **kw):
        name = kw["TableName"]
        self.described.append(name)
        if self.on_describe is not None:
            self.on_describe(name)
        t = self.tables.get(name, {"TableName": name})
        if isinstance(t, Exception):
            raise t
        return {"Table": t}

    def get_item(self, **kw):
        self.calls.append(("get", kw["TableName"]))
        return {"Item": self.config} if kw["Key"].get("pk") else {}

    def update_item(self, **kw):
        b = kw["Key"]["pk"]["S"]
        self.counters[b] = self.counters.get(b, 0) + int(kw["ExpressionAttributeValues"][":n"]["N"])
        self.calls.append(("reserve", b, self.counters[b]))
        return {"Attributes": {"n": {"N": str(self.counters[b])}}}

    def put_item(self, **kw):
        assert kw["ConditionExpression"] == "attribute_not_exists(#s)"
        item = kw["Item"]
        self.fences.append((int(item["b"]["N"]), int(item["s"]["N"])))
        self.calls.append(("fence", self.fences[-1]))

    def transact_write_items(self, **kw):
        self.calls.append(("transact", kw["ClientRequestToken"], kw["TransactItems"]))
        a = self.answers.pop(0) if self.answers else None
        if a is not None:
            raise a


def writer(fake, **kw):
    return Writer(fake, "msgs", "ctl", sleep=lambda s: None, **kw)


def test_refuses_a_client_that_retries_by_itself():
    with pytest.raises(ConfigError, match="retries"):
        writer(Fake(retries={"mode": "standard"}))


def test_refuses_an_unknown_config_before_writing():
    f = Fake(config=dict(CONFIG, v={"N": "5"}))
    with pytest.raises(ConfigError) as e:
        writer(f)
    assert e.value.unknown
    assert [c[0] for c in f.calls] == ["get"]


def test_refuses_another_outboxs_messages_table():
    with pytest.raises(ConfigError, match="belongs to messages table other"):
        writer(Fake(config=dict(CONFIG, mt={"S": "other"})))
    writer(Fake(config=dict(CONFIG, mt={"S": "msgs"})))


# --- global tables: refused outside region mode (docs/contract.md section 2) ---

REGION_MODE = dict(CONFIG, v={"N": "3"}, rg={"L": [{"S": "us-east-1"}, {"S": "eu-west-1"}]})


def global_table(name, *regions):
    return {"TableName": name, "Replicas": [{"RegionName": r, "ReplicaStatus": "ACTIVE"} for r in regions]}


@pytest.mark.parametrize("table,role", [("msgs", "messages"), ("ctl", "control")])
def test_refuses_a_global_table_outside_region_mode_before_writing(table, role):
    f = Fake()
    f.tables[table] = global_table(table, "us-east-1", "eu-west-1")
    with pytest.raises(ConfigError) as e:
        writer(f)
    msg = str(e.value)
    assert f"the {role} table {table} has replicas in us-east-1, eu-west-1 (a global table)" in msg
    assert "region mode" in msg and "tables without replicas" in msg and "last-writer-wins" in msg
    assert not e.value.unknown
    assert sorted(f.described) == ["ctl", "msgs"]
    assert [c[0] for c in f.calls] == ["get", "get"]  # reads only: nothing reserved, nothing written


def test_refuses_both_global_tables_at_once():
    f = Fake()
    f.tables = {"msgs": global_table("msgs", "us-east-1", "eu-west-1"), "ctl": global_table("ctl", "us-east-1", "eu-west-1")}
    with pytest.raises(ConfigError, match="the messages table msgs has replicas.*; the control table ctl has replicas"):
        writer(f)


def test_accepts_a_global_table_in_region_mode():
    tables = {"msgs": global_table("msgs", "us-east-1", "eu-west-1"), "ctl": global_table("ctl", "us-east-1", "eu-west-1")}
    f = Fake()  # the same tables in the default mode: refused
    f.tables = dict(tables)
    with pytest.raises(ConfigError, match="replicas"):
        writer(f)
    f = Fake(config=REGION_MODE)
    f.tables = dict(tables)
    f.meta.region_name = "eu-west-1"
    w = writer(f, region="eu-west-1")  # region mode: one replica per listed region is what it needs
    res = w.write([], [Message("t", b"1", key=b"k")])
    assert res.messages[0].bucket >= 4 and [c[0] for c in f.calls] == ["get", "get", "reserve", "transact"]


@pytest.mark.parametrize("table", [{}, {"Replicas": []}])
def test_accepts_tables_without_replicas(table):
    f = Fake()
    f.tables = {"msgs": dict(table, TableName="msgs"), "ctl": dict(table, TableName="ctl")}
    writer(f).write([], [Message("t", b"1")])
    assert sorted(f.described) == ["ctl", "msgs"]  # it did look


def test_describe_table_access_denied_names_the_permission():
    f = Fake()
    f.tables["ctl"] = client_error("AccessDeniedException")
    with pytest.raises(ConfigError, match="describe table ctl, to refuse a global table: access denied; grant dynamodb:DescribeTable on it"):
        writer(f)
    assert [c[0] for c in f.calls] == ["get", "get"]


def test_a_table_describe_table_does_not_find_is_left_to_the_existence_check():
    f = Fake()
    f.tables["msgs"] = client_error("ResourceNotFoundException")
    writer(f)  # the existence check found it: that check decides, not DescribeTable
    get = f.get_item

    def get_item(**kw):
        if kw["TableName"] == "msgs":
            raise client_error("ResourceNotFoundException")
        return get(**kw)

    f.get_item = get_item
    with pytest.raises(ConfigError, match="the messages table msgs does not exist$"):
        writer(f)


def test_both_tables_are_described_at_once():
    """Each DescribeTable waits for the other to be in flight: one after
    the other, the first one's wait breaks (after 30 s, so a busy machine
    cannot make it fail)."""
    import threading
    f = Fake()
    both = threading.Barrier(2, timeout=30)
    f.on_describe = lambda name: both.wait()
    writer(f)
    assert sorted(f.described) == ["ctl", "msgs"]


def test_reserve_then_one_transaction_with_conditional_puts():
    f = Fake()
    w = writer(f)
    mine = {"Update": {"TableName": "orders", "Key": {"id": {"S": "o1"}}, "UpdateExpression": "SET s = :p",
                       "ExpressionAttributeValues": {":p": {"S": "paid"}}}}
    res = w.write([mine], [Message("t", b"1", key=b"order-1"), Message("t", b"2", key=b"order-1")], client_request_token="tok-1")
    kinds = [c[0] for c in f.calls]
    assert kinds == ["get", "get", "reserve", "transact"]  # one reservation per bucket, right before the commit
    _, token, tx = f.calls[-1]
    assert token == "tok-1" and tx[0] == mine and len(tx) == 3
    for put in tx[1:]:
        assert put["Put"]["ConditionExpression"] == "attribute_not_exists(#s)"
        assert put["Put"]["ExpressionAttributeNames"] == {"#s": "s"}
    assert [m.sequence for m in res.messages] == [1, 2]
    assert res.messages[0].bucket == 0 or res.messages[0].bucket >= 0


def test_lost_response_is_retried_with_the_same_token_and_items():
    f = Fake()
    f.answers = [ReadTimeoutError(endpoint_url="http://x"), None]
    w = writer(f)
    w.write([], [Message("t", b"1", key=b"k")])
    tx = [c for c in f.calls if c[0] == "transact"]
    assert len(tx) == 2 and tx[0][1] == tx[1][1] and tx[0][2] == tx[1][2]
    assert not f.fences


def test_fenced_put_reserves_again_with_a_new_token():
    f = Fake()
    fenced = client_error("TransactionCanceledException", CancellationReasons=[
        {"Code": "ConditionalCheckFailed", "Item": {"b": {"N": "0"}, "s": {"N": "1"}, "f": {"BOOL": True}}}])
    f.answers = [fenced, None]
    w = writer(f)
    res = w.write([], [Message("t", b"1", key=b"k")])
    kinds = [c[0] for c in f.calls[2:]]
    assert kinds == ["reserve", "transact", "fence", "reserve", "transact"]
    tx = [c for c in f.calls if c[0] == "transact"]
    assert tx[0][1] != tx[1][1]
    assert res.messages[0].sequence == 2 and res.reservations == 2


def test_condition_failed_fences_the_reserved_numbers_at_once():
    f = Fake()
    f.answers = [client_error("TransactionCanceledException", CancellationReasons=[
        {"Code": "ConditionalCheckFailed", "Item": {"id": {"S": "o1"}}}, {"Code": "None"}, {"Code": "None"}])]
    w = writer(f)
    mine = {"ConditionCheck": {"TableName": "orders", "Key": {"id": {"S": "o1"}}, "ConditionExpression": "attribute_exists(id)"}}
    with pytest.raises(ConditionFailedError) as e:
        w.write([mine], [Message("t", b"1", key=b"k"), Message("t", b"2", key=b"k")])
    assert sorted(e.value.released) == sorted(f.fences) and len(f.fences) == 2
    assert e.value.caller_reasons[0]["Item"] == {"id": {"S": "o1"}}


def test_our_own_message_at_the_position_means_committed():
    f = Fake()
    w = writer(f)
    m = Message("t", b"1", key=b"k", id="01890a5d-ac96-774b-bcce-b302099a8057")
    f.answers = [ReadTimeoutError(endpoint_url="http://x"), client_error("TransactionCanceledException", CancellationReasons=[
        {"Code": "ConditionalCheckFailed", "Item": {"id": {"S": m.id}}}])]
    res = w.write([], [m])
    assert res.messages[0].id == m.id and not f.fences


def test_ambiguous_to_the_end_is_outcome_unknown_and_not_fenced():
    f = Fake()
    f.answers = [ReadTimeoutError(endpoint_url="http://x")] * 6
    with pytest.raises(OutcomeUnknownError):
        writer(f).write([], [Message("t", b"1")])
    assert not f.fences


def test_throttled_to_the_end_is_throttled_and_fenced():
    f = Fake()
    f.answers = [client_error("ThrottlingException")] * 3
    with pytest.raises(ThrottledError):
        writer(f, max_attempts=3).write([], [Message("t", b"1")])
    assert len(f.fences) == 1


def test_fenced_every_time_gives_up():
    f = Fake()
    f.answers = [client_error("TransactionCanceledException", CancellationReasons=[{"Code": "ConditionalCheckFailed"}])] * 2
    with pytest.raises(SequenceFencedError):
        writer(f, max_attempts=2).write([], [Message("t", b"1")])


@pytest.mark.parametrize("msg,field", [
    (Message(""), "Topic"),
    (Message("a/b"), "Topic"),
    (Message("t", headers=[("x-outbox-sequence", b"1")]), "Headers[0].Key"),
    (Message("t", partition=-1), "Partition"),
    (Message("t", id="not-a-uuid"), "ID"),
    (Message("t", value=b"x" * (1 << 20)), "Value"),
    (Message("t", value="text"), "Value"),
    (Message("t", bucket=3), "Bucket"),
    (Message("t", sequence=9), "Sequence"),
])
def test_bad_messages_write_nothing(msg, field):
    f = Fake()
    with pytest.raises(ValidationError) as e:
        writer(f).write([], [msg])
    assert e.value.field == field
    assert [c[0] for c in f.calls] == ["get", "get"]


def test_topics_outside_the_outbox_list_are_refused():
    f = Fake(config=dict(CONFIG, tp={"SS": ["orders", "payments"]}))
    w = writer(f)
    w.write([], [Message("orders", b"1")])
    with pytest.raises(ValidationError) as e:
        w.write([], [Message("payments", b"1"), Message("ordres", b"1")])
    assert e.value.field == "Topic" and e.value.index == 1 and "orders, payments" in str(e.value)
    assert [c[0] for c in f.calls].count("transact") == 1


def test_two_messages_with_one_id():
    f = Fake()
    mid = "01890a5d-ac96-774b-bcce-b302099a8057"
    with pytest.raises(ValidationError) as e:
        writer(f).write([], [Message("t", id=mid), Message("t", id=mid)])
    assert e.value.field == "ID" and e.value.index == 1


def test_too_many_items():
    f = Fake()
    with pytest.raises(ValidationError) as e:
        writer(f).write([], [Message("t")] * 101)
    assert e.value.field == "Transaction"


def test_readme_example_runs(monkeypatch, capsys):
    """The README's snippet, on the fake client: it commits, and on a failed
    version condition it reports the item as it was."""
    import os

    import outbox_writer
    from conftest import HERE
    with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
        readme = f.read()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    fake = Fake()
    monkeypatch.setattr(outbox_writer, "new_client", lambda *a, **k: fake)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    tx = [c for c in fake.calls if c[0] == "transact"]
    assert len(tx) == 1 and tx[0][2][0]["Update"]["Key"] == {"id": {"S": "order-42"}}
    fake.answers = [client_error("TransactionCanceledException", CancellationReasons=[
        {"Code": "ConditionalCheckFailed", "Item": {"version": {"N": "8"}}}, {"Code": "None"}])]
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert "the order changed since it was read: {'version': {'N': '8'}}" in capsys.readouterr().out
