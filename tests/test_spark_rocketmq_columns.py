"""The Spark `rocketmq` source's bulk decoder (rmq._native.spark_pull_columns) gives the same Arrow rows
as the reference path (decode_messages, one MessageExt per message, then pyarrow from lists), on
PULL_MESSAGE bodies built by the store's own unit encoder. No broker, no Spark."""
from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from kafka_bridge.spark import rocketmq_source as src  # noqa: E402
from rmq import native  # noqa: E402
from rmq.client.message import decode_messages  # noqa: E402
from rmq.common.message import COMPRESSED_FLAG, Message, pack_host, properties_to_bytes  # noqa: E402
from rmq.store.unit import PreparedMessage  # noqa: E402

pytestmark = pytest.mark.skipif(native.ext is None, reason="the C extension is not built")

R = {"topic": "T", "queue": 3, "broker": "broker-a"}


def unit(qoff: int, body: bytes = b"v", props: dict | None = None, *, raw_props: bytes | None = None,
         store=("10.0.0.7", 10911), born_ts: int = 1_700_000_000_000, store_ts: int = 1_700_000_000_500,
         reconsume: int = 0, sys_flag: int = 0) -> bytes:
    msg = Message("T", body, 3, 0, dict(props or {}), sys_flag, born_ts, ("10.0.0.9", 5555), reconsume, 0)
    addr, port, v6 = pack_host(store)
    pm = PreparedMessage(msg, v6)
    if raw_props is not None:
        pm.size += len(raw_props) - len(pm.props_bytes)
        pm.props_bytes = raw_props
    return pm.encode(qoff, 1000 + qoff * 300, store_ts, addr, port)


def reference(pulls, tags=None):
    msgs = []
    for body, lo, hi, mn, mx in pulls:
        for m in decode_messages(body, R["broker"], min_offset=mn, max_offset=mx):
            if lo <= m.queue_offset < hi and (tags is None or (m.tags is not None and m.tags.encode() in tags)):
                msgs.append(m)
    return src._to_arrow(msgs, R, src._arrow_schema()).to_pylist()


def fast(pulls, tags=None):
    cols = native.ext.spark_pull_columns(pulls, src.SYSTEM_NAMES, tags)
    assert cols is not None, "the C decoder declined"
    batch = src._columns_to_arrow(cols, R, src._arrow_schema())
    batch.validate(full=True)
    assert batch.schema == src._arrow_schema()
    return batch.to_pylist()


def test_every_column_matches_the_reference():
    body = b"".join([
        unit(10, b"a", {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "AC11000100002A9F0000000000000001",
                        "color": "red", "WAIT": "true", "ünï": "cödé"}),
        unit(11, b"", {}),                                    # no properties: msgId is the offsetMsgId
        unit(12, b"x" * 1000, {"KEYS": "", "TAGS": ""}),       # empty KEYS: key null, keys ""
        unit(13, b"b", {"RETRY_TOPIC": "%RETRY%g", "ORIGIN_MESSAGE_ID": "0A00", "RECONSUME_TIME": "2"},
             reconsume=2, born_ts=0),                         # born time 0: null
        unit(14, b"c", {"MIN_OFFSET": "5", "user": "u"}, store=("::1", 10911)),   # IPv6 store host
    ])
    pulls = [(body, 10, 15, 0, 99)]
    got = fast(pulls)
    assert got == reference(pulls)
    assert [r["offset"] for r in got] == [10, 11, 12, 13, 14]
    assert got[0]["properties"] == [("color", "red"), ("ünï", "cödé")]
    assert got[0]["msgId"] == "AC11000100002A9F0000000000000001" and got[0]["key"] == b"k1 k2"
    assert len(got[1]["msgId"]) == 32 and len(got[4]["msgId"]) == 56
    assert got[2]["key"] is None and got[2]["keys"] == ""
    assert got[3]["bornTimestamp"] is None and got[3]["retryTopic"] == "%RETRY%g"
    assert dict(got[4]["systemProperties"])["MIN_OFFSET"] == "0"


def test_offsets_outside_the_window_tags_and_several_pulls():
    a = b"".join(unit(o, b"%d" % o, {"TAGS": "A" if o % 2 else "B"}) for o in range(0, 6))
    b = b"".join(unit(o, b"%d" % o, {"TAGS": "A" if o % 2 else "B"}) for o in range(6, 9))
    pulls = [(a, 2, 6, 0, 9), (b, 6, 8, 0, 9)]
    assert [r["offset"] for r in fast(pulls)] == [2, 3, 4, 5, 6, 7]
    assert fast(pulls) == reference(pulls)
    assert [r["offset"] for r in fast(pulls, (b"A",))] == [3, 5, 7]
    assert fast(pulls, (b"A",)) == reference(pulls, (b"A",))
    assert fast([(a, 100, 200, 0, 9)]) == []


def test_repeated_names_and_odd_separators_read_like_a_dict():
    raw = b"\x02a\x011\x02noseparator\x02b\x012\x02a\x013\x02\x02=\x01\x02KEYS\x01k\x02"
    pulls = [(unit(0, raw_props=raw), 0, 1, 0, 1)]
    got = fast(pulls)
    assert got == reference(pulls)
    assert got[0]["properties"] == [("a", "3"), ("b", "2"), ("=", "")]


@pytest.mark.parametrize("case", ["bad-utf8", "compressed", "truncated"])
def test_what_the_c_decoder_declines_goes_through_the_reference(case):
    if case == "bad-utf8":
        body = unit(0, b"v", raw_props=b"k\x01\xff\xfe\x02") + unit(1, b"w", {"p": "q"})
    elif case == "compressed":
        import zlib
        body = unit(0, zlib.compress(b"inflated"), {"p": "q"}, sys_flag=COMPRESSED_FLAG)
    else:
        body = unit(0, b"v", {"p": "q"})[:-3]
    pulls = [(body, 0, 2, 0, 2)]
    assert native.ext.spark_pull_columns(pulls, src.SYSTEM_NAMES, None) is None
    if case == "truncated":
        with pytest.raises(Exception):
            reference(pulls)
        return
    got = src._pulls_to_arrow(pulls, R, src._arrow_schema(), None).to_pylist()
    assert got == reference(pulls)
    if case == "compressed":
        assert got[0]["value"] == b"inflated"


def test_bad_arguments_raise_type_errors():
    with pytest.raises(TypeError):
        native.ext.spark_pull_columns([(b"", 0)], src.SYSTEM_NAMES, None)
    with pytest.raises(TypeError):
        native.ext.spark_pull_columns([], ("TAGS",), None)
    with pytest.raises(TypeError):
        native.ext.spark_pull_columns([], src.SYSTEM_NAMES, ["A"])
    assert native.ext.spark_pull_columns([], src.SYSTEM_NAMES, None)[0] == 0


def test_a_property_list_the_reference_also_reads():
    props = {f"p{i}": str(i) for i in range(300)}       # over the C decoder's 256: it declines
    pulls = [(unit(0, b"v", props), 0, 1, 0, 1)]
    assert native.ext.spark_pull_columns(pulls, src.SYSTEM_NAMES, None) is None
    assert len(src._pulls_to_arrow(pulls, R, src._arrow_schema(), None).to_pylist()[0]["properties"]) == 300
    assert properties_to_bytes(props)


def test_bench_max_transfer_is_refused_with_a_running_broker():
    from click.testing import CliRunner
    from kafka_bridge.bench.spark import bench_spark
    res = CliRunner().invoke(bench_spark, ["--bootstrap", "127.0.0.1:1", "--namesrv", "127.0.0.1:2",
                                           "--max-transfer", "1024"])
    assert res.exit_code != 0 and "--max-transfer" in res.output and "--namesrv" in res.output
