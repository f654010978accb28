"""The ClientRequestToken rule (docs/contract.md section 6.1) against a fake
that answers tokens as DynamoDB does: a resend of a committed transaction
with the same token and identical items succeeds without writing again;
the token with other items is refused (IdempotentParameterMismatch)."""

import copy

import pytest
from botocore.exceptions import ReadTimeoutError

from outbox_writer import Message, OutcomeUnknownError, RejectedError, Writer
from test_writer import CONFIG, Fake, client_error

WATERMARK = dict(CONFIG, v={"N": "2"}, md={"S": "watermark"}, rt={"N": "3600"})


class Clock:
    def __init__(self, t=1764547200.25):
        self.t = t

    def __call__(self):
        return self.t


class TokenFake(Fake):
    """DynamoDB's token memory: the first request with a token runs
    (commits) and is remembered; lose of them have their answer lost after
    read_timeout seconds on the writer's clock."""

    def __init__(self, clock, lose=0, read_timeout=20, **kw):
        super().__init__(**kw)
        self.clock, self.lose, self.read_timeout = clock, lose, read_timeout
        self.tokens, self.committed = {}, []

    def transact_write_items(self, **kw):
        token, tx = kw["ClientRequestToken"], kw["TransactItems"]
        self.calls.append(("transact", token, copy.deepcopy(tx)))
        if token in self.tokens:
            if self.tokens[token] != tx:
                raise client_error("IdempotentParameterMismatchException")
        else:
            self.tokens[token] = copy.deepcopy(tx)
            self.committed.append(token)
        if self.lose:
            self.lose -= 1
            self.clock.t += self.read_timeout  # the committed answer never arrives
            raise ReadTimeoutError(endpoint_url="http://dynamodb")
        return {}


def test_a_lost_answer_is_resent_byte_for_byte_and_succeeds_in_watermark_mode():
    """The first attempt commits and its answer is lost; the resend, 20 s
    later on the clock, carries the same items and the same TTL, so
    DynamoDB answers success: one commit, no error, nothing fenced."""
    clock = Clock()
    f = TokenFake(clock, lose=1, config=WATERMARK)
    w = Writer(f, "msgs", "ctl", sleep=lambda s: None, clock=clock)
    res = w.write([], [Message("orders", b"1", key=b"o-1")], client_request_token="tok-1")
    tx = [c for c in f.calls if c[0] == "transact"]
    assert len(tx) == 2 and tx[0][1] == tx[1][1] == "tok-1"
    assert tx[0][2] == tx[1][2], "the resend differs from the first attempt"
    ttl = tx[1][2][0]["Put"]["Item"]["x"]["N"]
    assert int(ttl) == int(1764547200.25) + 1 + 3600  # from the first attempt's clock, not the resend's
    assert res.attempts == 2 and f.committed == ["tok-1"] and not f.fences


def test_the_token_of_a_committed_write_again_is_not_nothing_written():
    """A write that committed with every answer lost ends in
    OutcomeUnknownError; the caller's retry with the same token reserves new
    numbers, so DynamoDB refuses it with IdempotentParameterMismatch. That
    is not "nothing was written": the first write committed. The writer
    says the outcome is unknown (an earlier write with the token may have
    committed), and fences only its own new numbers."""
    clock = Clock()
    f = TokenFake(clock, lose=2, config=WATERMARK)
    w = Writer(f, "msgs", "ctl", sleep=lambda s: None, clock=clock, max_attempts=2)
    msgs = [Message("orders", b"1", key=b"o-1")]
    with pytest.raises(OutcomeUnknownError) as first:
        w.write([], msgs, client_request_token="tok-2")
    assert not f.fences and f.committed == ["tok-2"]
    with pytest.raises(OutcomeUnknownError) as again:
        w.write([], msgs, client_request_token=first.value.client_request_token)
    e = again.value
    assert not isinstance(e, RejectedError) and e.code == "Outbox.OutcomeUnknown"
    msg = str(e)
    assert "nothing was written" not in msg and "may have committed" in msg and "do not write again under new ids" in msg
    assert "IdempotentParameterMismatchException" in msg and "tok-2" in msg
    assert f.committed == ["tok-2"]  # the retry ran nothing
    b = f.tokens["tok-2"][0]["Put"]["Item"]["b"]["N"]  # the committed message's bucket, at sequence 1
    assert e.released == [(int(b), 2)] == f.fences  # its own reservation, never the committed (b, 1)


def test_the_outcome_unknown_message_does_not_promise_a_resend():
    """write() cannot resend an earlier call's transaction (it reserves new
    numbers), so OutcomeUnknownError says to read the items, not to retry
    with the token to learn the outcome."""
    clock = Clock()
    f = TokenFake(clock, lose=1, config=WATERMARK)
    w = Writer(f, "msgs", "ctl", sleep=lambda s: None, clock=clock, max_attempts=1)
    with pytest.raises(OutcomeUnknownError) as e:
        w.write([], [Message("orders", b"1")])
    assert "read your items" in str(e.value) and "to learn its outcome" not in str(e.value)
