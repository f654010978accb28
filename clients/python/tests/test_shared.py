"""The outbox's shared settings in the config item (docs/contract.md
section 2): MaxMessageBytes (mb) and the stamped headers' names (hi, hb,
hs), taken from the item only, as the Go writer takes them, and enforced
as it enforces them (HeaderNames.Validate): a record above mb and a
message carrying a stamped header's name are refused before anything is
reserved."""

import inspect

import pytest

from outbox_writer import ConfigError, Message, ValidationError, Writer, contract
from test_writer import CONFIG, Fake, writer

SMALL = dict(CONFIG, mb={"N": "2048"})
RENAMED = dict(CONFIG, hi={"S": "x-msg-id"}, hb={"S": "x-msg-bucket"})


def nothing_reserved(f):
    return [c[0] for c in f.calls] == ["get", "get"]


def test_a_record_above_the_outboxs_max_message_bytes_is_refused():
    f = Fake(config=SMALL)
    w = writer(f)
    assert w.max_message_bytes == 2048
    with pytest.raises(ValidationError) as e:
        w.write([], [Message("orders", b"v" * 5000, key=b"o-1")])
    assert e.value.field == "Value" and e.value.index == 0
    assert "above MaxMessageBytes=2048; shrink the key, value or headers" in str(e.value)
    assert nothing_reserved(f)


def test_the_limit_is_the_go_writers_record_size_bound():
    """A value that makes the record exactly mb bytes passes; one byte more
    is refused (the bound counts the stamped headers under their names)."""
    f = Fake(config=dict(SMALL, hi={"S": "x-a-much-longer-message-id-header"}))
    w = writer(f)
    # Go: RecordOverhead + key + value + 3*HeaderOverhead + len(names) + 36 + 4 + 19.
    fixed = 128 + 3 + 3 * 10 + len("x-a-much-longer-message-id-header") + 36 + len("x-outbox-bucket") + 4 + len("x-outbox-sequence") + 19
    w.write([], [Message("orders", b"v" * (2048 - fixed), key=b"o-1")])
    with pytest.raises(ValidationError, match="the record is 2049 bytes"):
        w.write([], [Message("orders", b"v" * (2048 - fixed + 1), key=b"o-1")])


@pytest.mark.parametrize("name,what", [("x-msg-id", "message-id"), ("x-msg-bucket", "bucket"), ("x-outbox-sequence", "sequence")])
def test_the_outboxs_stamped_header_names_are_refused(name, what):
    f = Fake(config=RENAMED)
    with pytest.raises(ValidationError) as e:
        writer(f).write([], [Message("orders", b"1", headers=[("trace", b"t"), (name, b"forged")])])
    assert e.value.field == "Headers[1].Key"
    assert f"{name!r} is the {what} header the relay stamps; use another name" in str(e.value)
    assert nothing_reserved(f)


def test_a_default_name_the_outbox_renamed_is_an_ordinary_header():
    """As in Go: only the names the relay stamps under are reserved."""
    f = Fake(config=RENAMED)
    writer(f).write([], [Message("orders", b"1", headers=[("x-outbox-message-id", b"mine")])])
    assert [c[0] for c in f.calls].count("transact") == 1


def test_the_shared_settings_come_from_the_config_item_only():
    """No argument of Writer states MaxMessageBytes or a header name: an
    item that states none gives the defaults (docs/design.md section 11.1)."""
    assert writer(Fake(config=SMALL)).max_message_bytes == 2048
    w = writer(Fake())
    assert w.max_message_bytes == contract.DEFAULT_MAX_MESSAGE_BYTES
    assert w.stamped_headers == (contract.MESSAGE_ID_HEADER, contract.BUCKET_HEADER, contract.SEQUENCE_HEADER)
    shared = ("max_message_bytes", "bucket_count", "mode", "header", "retention", "topics")
    params = [p for p in inspect.signature(Writer).parameters if any(s in p for s in shared)]
    assert params == [], f"Writer takes {params}: the config item is their one source"


@pytest.mark.parametrize("extra,reason", [
    ({"mb": {"N": "100"}}, "mb \\(MaxMessageBytes\\) is 100: it must be 128..104857596"),
    ({"mb": {"S": "2048"}}, "mb is .* not a number"),
    ({"hb": {"S": "x-outbox-message-id"}}, "hb names 'x-outbox-message-id', as does hi"),
    ({"hi": {"S": "h"}, "hs": {"S": "h"}}, "hs names 'h', as does hi"),
    ({"hi": {"N": "1"}}, "hi is .* not a string"),
])
def test_a_config_item_with_bad_shared_settings_is_refused(extra, reason):
    with pytest.raises(ConfigError, match=reason):
        writer(Fake(config=dict(CONFIG, **extra)))
