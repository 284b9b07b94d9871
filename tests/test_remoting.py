"""Unit tests for rmq.remoting: frames, RemotingCommand headers (JSON and ROCKETMQ), codes,
typed custom headers and fastjson-style bodies."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.remoting import (
    DEFAULT_MAX_FRAME_SIZE, FLAG_ONEWAY, FLAG_RESPONSE, BadHeaderField, BodyDecodeError,
    BrokerData, ClusterInfo, CommandDecodeError, ConsumerData, ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader, DataVersion, EndTransactionRequestHeader, FrameDecoder,
    FramingError, GetConsumerListByGroupResponseBody, GetRouteInfoRequestHeader, HeartbeatData,
    KVTable, LanguageCode, LockBatchRequestBody, LockBatchResponseBody, MessageQueue,
    MissingHeaderField, ProducerData, PullMessageRequestHeader, PullMessageResponseHeader,
    QueueData, RegisterBrokerBody, RegisterBrokerRequestHeader, RemotingCommand, RequestCode,
    ResponseCode, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    SendMessageResponseHeader, SerializeType, SubscriptionData, TopicConfig,
    TopicConfigSerializeWrapper, TopicList, TopicRouteData, UnregisterClientRequestHeader,
    decode_request_header, decode_send_message_header, request_code_name, response_code_name,
)
from rmq.remoting import fastjson


# ============================================================================ codes
def test_request_codes_match_rocketmq():
    expected = {
        "SEND_MESSAGE": 10, "PULL_MESSAGE": 11, "QUERY_MESSAGE": 12, "QUERY_CONSUMER_OFFSET": 14,
        "UPDATE_CONSUMER_OFFSET": 15, "UPDATE_AND_CREATE_TOPIC": 17, "GET_ALL_TOPIC_CONFIG": 21,
        "GET_BROKER_RUNTIME_INFO": 28, "SEARCH_OFFSET_BY_TIMESTAMP": 29, "GET_MAX_OFFSET": 30,
        "GET_MIN_OFFSET": 31, "GET_EARLIEST_MSG_STORETIME": 32, "VIEW_MESSAGE_BY_ID": 33,
        "HEART_BEAT": 34, "UNREGISTER_CLIENT": 35, "CONSUMER_SEND_MSG_BACK": 36,
        "END_TRANSACTION": 37, "GET_CONSUMER_LIST_BY_GROUP": 38, "CHECK_TRANSACTION_STATE": 39,
        "NOTIFY_CONSUMER_IDS_CHANGED": 40, "LOCK_BATCH_MQ": 41, "UNLOCK_BATCH_MQ": 42,
        "PUT_KV_CONFIG": 100, "GET_KV_CONFIG": 101, "DELETE_KV_CONFIG": 102,
        "REGISTER_BROKER": 103, "UNREGISTER_BROKER": 104, "GET_ROUTEINFO_BY_TOPIC": 105,
        "GET_BROKER_CLUSTER_INFO": 106, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER": 206,
        "DELETE_TOPIC_IN_BROKER": 215, "GET_KVLIST_BY_NAMESPACE": 219, "SEND_MESSAGE_V2": 310,
        "SEND_BATCH_MESSAGE": 320,
    }
    for name, code in expected.items():
        assert getattr(RequestCode, name) == code, name
    assert request_code_name(105) == "GET_ROUTEINFO_BY_TOPIC"
    assert request_code_name(99999) == "UNKNOWN(99999)"


def test_response_codes_match_rocketmq():
    expected = {
        "SUCCESS": 0, "SYSTEM_ERROR": 1, "SYSTEM_BUSY": 2, "REQUEST_CODE_NOT_SUPPORTED": 3,
        "FLUSH_DISK_TIMEOUT": 10, "SLAVE_NOT_AVAILABLE": 11, "FLUSH_SLAVE_TIMEOUT": 12,
        "MESSAGE_ILLEGAL": 13, "SERVICE_NOT_AVAILABLE": 14, "VERSION_NOT_SUPPORTED": 15,
        "NO_PERMISSION": 16, "TOPIC_NOT_EXIST": 17, "TOPIC_EXIST_ALREADY": 18,
        "PULL_NOT_FOUND": 19, "PULL_RETRY_IMMEDIATELY": 20, "PULL_OFFSET_MOVED": 21,
        "QUERY_NOT_FOUND": 22, "SUBSCRIPTION_PARSE_FAILED": 23, "SUBSCRIPTION_NOT_EXIST": 24,
        "SUBSCRIPTION_NOT_LATEST": 25, "SUBSCRIPTION_GROUP_NOT_EXIST": 26,
        "TRANSACTION_SHOULD_COMMIT": 200, "TRANSACTION_SHOULD_ROLLBACK": 201,
        "TRANSACTION_STATE_UNKNOW": 202, "TRANSACTION_STATE_GROUP_WRONG": 203, "NO_BUYER_ID": 204,
        "NOT_IN_CURRENT_UNIT": 205, "CONSUMER_NOT_ONLINE": 206, "CONSUME_MSG_TIMEOUT": 207,
        "NO_MESSAGE": 208,
    }
    for name, code in expected.items():
        assert getattr(ResponseCode, name) == code, name
    assert response_code_name(17) == "TOPIC_NOT_EXIST"


# ============================================================================ byte vectors
def test_json_frame_byte_vector():
    cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, language=LanguageCode.CPP,
                          opaque=1, ext_fields={"topic": "TopicTest"})
    header = (b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"CPP",'
              b'"opaque":1,"serializeTypeCurrentRPC":"JSON","version":0}')
    assert len(header) == 0x80
    expected = b"\x00\x00\x00\x84" + b"\x00\x00\x00\x80" + header
    assert cmd.encode() == expected
    back = RemotingCommand.decode(expected[4:])
    assert back == cmd
    assert back.serialize_type == SerializeType.JSON


def test_rocketmq_binary_frame_byte_vector():
    cmd = RemotingCommand(RequestCode.HEART_BEAT, language=LanguageCode.PYTHON, version=401,
                          opaque=5, remark="ok", ext_fields={"k": "v"}, body=b"B",
                          serialize_type=SerializeType.ROCKETMQ)
    expected = bytes.fromhex(
        "00000024"      # total length 36 = 4 + 31 + 1
        "0100001f"      # serialize type ROCKETMQ, header length 31
        "0022"          # code 34
        "03"            # language PYTHON
        "0191"          # version 401
        "00000005"      # opaque
        "00000000"      # flag
        "00000002") + b"ok" + bytes.fromhex(
        "00000008"      # extFields length
        "0001") + b"k" + bytes.fromhex("00000001") + b"v" + b"B"
    assert cmd.encode() == expected
    assert RemotingCommand.decode_frame(expected) == cmd


def test_response_json_header_is_fastjson_ordered_and_cpp_readable():
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x", opaque=42,
                                  language=LanguageCode.CPP)
    hdr = SendMessageResponseHeader(msgId="C0A8000100002A9F0000000000000000", queueId=3,
                                    queueOffset=12)
    resp = RemotingCommand.response_to(req, ResponseCode.SUCCESS, None, hdr.to_ext_fields())
    assert resp.opaque == 42 and resp.is_response and not resp.is_oneway
    text = resp.encode_header_json().decode()
    assert text == ('{"code":0,"extFields":{"msgId":"C0A8000100002A9F0000000000000000",'
                    '"queueId":"3","queueOffset":"12"},"flag":1,"language":"JAVA","opaque":42,'
                    '"serializeTypeCurrentRPC":"JSON","version":401}')
    obj = json.loads(text)
    # The C++ client reads these with jsoncpp and only accepts string extFields values.
    assert all(isinstance(v, str) for v in obj["extFields"].values())
    assert isinstance(obj["code"], int) and isinstance(obj["opaque"], int)


def test_response_keeps_request_serialize_type():
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, serialize_type=SerializeType.ROCKETMQ)
    resp = RemotingCommand.response_to(req, ResponseCode.PULL_NOT_FOUND, "none")
    assert resp.serialize_type == SerializeType.ROCKETMQ
    frame = resp.encode()
    assert frame[4] == SerializeType.ROCKETMQ
    back = RemotingCommand.decode_frame(frame)
    assert back.code == ResponseCode.PULL_NOT_FOUND and back.remark == "none"
    assert back.flag == FLAG_RESPONSE


def test_oneway_flag_and_prefix_plus_body():
    cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, {"a": "b"}, b"payload", oneway=True)
    assert cmd.is_oneway and not cmd.is_response and cmd.flag == FLAG_ONEWAY
    assert cmd.encode_prefix() + cmd.body == cmd.encode()
    assert cmd.encode_prefix(body_length=7) == cmd.encode_prefix()


# ============================================================================ round trips
def _sample_command(stype: int) -> RemotingCommand:
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, language=LanguageCode.JAVA, version=401,
                           opaque=123456, flag=FLAG_ONEWAY, remark="r\u00e9mark \u4e2d",
                           ext_fields={"a": "grp", "b": "T\u00f6pic", "i": "KEYS\x01k1\x02"},
                           body=bytes(range(256)), serialize_type=stype)


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_command_round_trip(stype):
    cmd = _sample_command(stype)
    back = RemotingCommand.decode_frame(cmd.encode())
    assert back == cmd


@settings(max_examples=60, deadline=None)
@given(code=st.integers(-32768, 32767), opaque=st.integers(-(2**31), 2**31 - 1),
       flag=st.integers(0, 3), remark=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
       ext=st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=5),
       body=st.binary(max_size=64), stype=st.sampled_from([0, 1]))
def test_command_round_trip_property(code, opaque, flag, remark, ext, body, stype):
    cmd = RemotingCommand(code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                          body=body, serialize_type=stype)
    back = RemotingCommand.decode_frame(cmd.encode())
    assert (back.code, back.opaque, back.flag, back.ext_fields, back.body, back.remark) == \
        (code, opaque, flag, ext, body, remark)


def test_cpp_client_style_json_header_is_accepted():
    # jsoncpp FastWriter output: ints for some extFields, empty remark, trailing newline,
    # no serializeTypeCurrentRPC, high byte of the header length word left zero.
    header = (b'{"code":10,"extFields":{"AccessKey":"","ONSChannelKey":"","Signature":"",'
              b'"bornTimestamp":"1700000000000","defaultTopic":"TBW102",'
              b'"defaultTopicQueueNums":4,"flag":0,"producerGroup":"pg","properties":"",'
              b'"queueId":2,"reconsumeTimes":"0","sysFlag":0,"topic":"T","unitMode":"0"},'
              b'"flag":0,"language":"CPP","opaque":9,"remark":"","version":0}\n')
    payload = struct.pack(">i", len(header)) + header + b"body"
    cmd = RemotingCommand.decode(payload)
    assert cmd.language == "CPP" and cmd.body == b"body" and cmd.remark == ""
    hdr = decode_send_message_header(cmd)
    assert hdr.queueId == 2 and hdr.defaultTopicQueueNums == 4 and hdr.unitMode is False
    assert hdr.bornTimestamp == 1700000000000 and hdr.batch is False


# ============================================================================ frames
def test_frame_decoder_incremental_and_multiple():
    frames = [RemotingCommand.request(RequestCode.HEART_BEAT, body=b"x" * n, opaque=n).encode()
              for n in (0, 1, 300)]
    stream = b"".join(frames)
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):           # one byte at a time
        got += dec.feed(stream[i:i + 1])
    assert [RemotingCommand.decode(p).opaque for p in got] == [0, 1, 300]
    assert dec.buffered == 0
    dec.eof()
    dec2 = FrameDecoder()
    assert [len(RemotingCommand.decode(p).body) for p in dec2.feed(stream)] == [0, 1, 300]


def test_truncated_frame():
    frame = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"abc").encode()
    dec = FrameDecoder()
    assert dec.feed(frame[:-1]) == []
    with pytest.raises(FramingError, match="ended inside a frame"):
        dec.eof()
    dec = FrameDecoder()
    assert dec.feed(frame[:2]) == []
    with pytest.raises(FramingError):
        dec.eof()
    with pytest.raises(FramingError):
        RemotingCommand.decode_frame(frame[:-1])


def test_oversized_frame_rejected_before_buffering():
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FramingError, match="exceeds the maximum of 1024"):
        dec.feed(struct.pack(">i", 1025))       # only the length field has arrived
    with pytest.raises(FramingError):           # the stream stays broken
        dec.feed(b"more")
    assert dec.broken
    dec = FrameDecoder()
    with pytest.raises(FramingError):
        dec.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE + 1))
    assert DEFAULT_MAX_FRAME_SIZE > 16 * 1024 * 1024


def test_frame_decoder_whole_frame_reads():
    """A read that is exactly one frame (the common case the decoder answers without buffering)
    gives the same payload, as bytes, as the byte-by-byte path, with the same length checks."""
    frame = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T"}, b"x" * 1024, opaque=5).encode()
    dec = FrameDecoder()
    for data in (frame, bytearray(frame), memoryview(frame)):
        out = dec.feed(data)
        assert len(out) == 1 and type(out[0]) is bytes and out[0] == frame[4:]
        assert dec.buffered == 0
    # a whole frame right after a partial one is not taken as whole: the bytes stay in order
    dec = FrameDecoder()
    assert dec.feed(frame[:10]) == []
    assert dec.feed(frame[10:] + frame) == [frame[4:], frame[4:]]
    dec = FrameDecoder()
    assert dec.feed(frame[:4]) == []  # the length field alone: the payload's length is now known
    assert dec.feed(frame[4:]) == [frame[4:]]
    dec.eof()
    # too small or too large, as a whole read: refused, and the stream stays broken
    for bad, size in ((struct.pack(">i", 0), 4096), (struct.pack(">i", 2000) + b"\x00" * 2000, 1024)):
        dec = FrameDecoder(max_frame_size=size)
        with pytest.raises(FramingError):
            dec.feed(bad)
        assert dec.broken
        with pytest.raises(FramingError):
            dec.feed(frame)


@pytest.mark.parametrize("length", [-1, 0, 3, -(2**31)])
def test_bad_frame_lengths(length):
    with pytest.raises(FramingError):
        FrameDecoder().feed(struct.pack(">i", length) + b"\x00" * 8)


def test_good_frames_before_bad_one_are_delivered():
    good = RemotingCommand.request(RequestCode.HEART_BEAT, opaque=77).encode()
    dec = FrameDecoder(max_frame_size=4096)
    out = dec.feed(good + struct.pack(">i", 10**6))
    assert [RemotingCommand.decode(p).opaque for p in out] == [77]
    with pytest.raises(FramingError):
        dec.feed(b"")


@pytest.mark.parametrize("payload, match", [
    (b"\x00\x00", "no header-length word"),
    (b"\x00\x00\x00\x10{}", "exceeds"),
    (b"\x02\x00\x00\x02{}", "unknown serialize type 2"),
    (b"\x00\x00\x00\x05{code", "not valid JSON"),
    (b"\x00\x00\x00\x02[]", "not an object"),
    (b'\x00\x00\x00\x0c{"code":"x"}', "not an integer"),
    (b'\x00\x00\x00\x1a{"code":1,"extFields":[1]}', "extFields"),
    (b"\x00\x00\x00\x80\xff", "exceeds"),
])
def test_bad_command_headers(payload, match):
    with pytest.raises(CommandDecodeError, match=match):
        RemotingCommand.decode(payload)


def test_bad_rocketmq_binary_headers():
    good = RemotingCommand(1, opaque=1, remark="hi", ext_fields={"key": "val"},
                           serialize_type=SerializeType.ROCKETMQ).encode_header_rocketmq()

    def payload(header: bytes) -> bytes:
        return struct.pack(">i", (1 << 24) | len(header)) + header

    assert RemotingCommand.decode(payload(good)).ext_fields == {"key": "val"}
    with pytest.raises(CommandDecodeError, match="shorter"):
        RemotingCommand.decode(payload(good[:10]))
    bad_remark = good[:13] + struct.pack(">i", 1000) + good[17:]
    with pytest.raises(CommandDecodeError, match="remark length"):
        RemotingCommand.decode(payload(bad_remark))
    # extFields map with a key length that overruns it
    ext_at = 13 + 4 + 2
    bad_key = good[:ext_at + 4] + struct.pack(">h", 500) + good[ext_at + 6:]
    with pytest.raises(CommandDecodeError, match="key length"):
        RemotingCommand.decode(payload(bad_key))
    bad_ext = good[:ext_at] + struct.pack(">i", 9999) + good[ext_at + 4:]
    with pytest.raises(CommandDecodeError, match="extFields length"):
        RemotingCommand.decode(payload(bad_ext))


# ============================================================================ headers
def _send_ext() -> dict[str, str]:
    return {"producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
            "bornTimestamp": "1700000000123", "flag": "0", "properties": "KEYS\x01k\x02",
            "reconsumeTimes": "0", "unitMode": "false", "batch": "true", "maxReconsumeTimes": "16"}


def test_send_header_conversion():
    hdr = SendMessageRequestHeader.from_ext_fields(_send_ext())
    assert hdr.topic == "T" and hdr.queueId == 1 and hdr.bornTimestamp == 1700000000123
    assert hdr.batch is True and hdr.unitMode is False and hdr.maxReconsumeTimes == 16
    assert hdr.to_ext_fields() == _send_ext()


def test_send_header_v2_short_names():
    v1 = SendMessageRequestHeader.from_ext_fields(_send_ext())
    v2 = v1.to_v2()
    ext = v2.to_ext_fields()
    assert ext == {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
                   "g": "1700000000123", "h": "0", "i": "KEYS\x01k\x02", "j": "0",
                   "k": "false", "l": "16", "m": "true"}
    assert SendMessageRequestHeaderV2.from_ext_fields(ext).to_v1() == v1
    assert SendMessageRequestHeaderV2.from_v1(v1) == v2
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        cmd = RemotingCommand.request(code, ext)
        assert decode_request_header(cmd) == v1
        assert decode_send_message_header(cmd) == v1
    with pytest.raises(MissingHeaderField) as info:
        SendMessageRequestHeaderV2.from_ext_fields({k: v for k, v in ext.items() if k != "b"})
    assert info.value.field == "b (topic)" and "topic" in info.value.remark


def test_missing_header_field_names_field():
    ext = _send_ext()
    del ext["topic"]
    with pytest.raises(MissingHeaderField) as info:
        SendMessageRequestHeader.from_ext_fields(ext)
    err = info.value
    assert err.field == "topic" and err.header == "SendMessageRequestHeader"
    assert err.response_code == ResponseCode.SYSTEM_ERROR
    assert "<topic>" in err.remark
    with pytest.raises(MissingHeaderField, match="consumerGroup"):
        decode_request_header(RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}))


@pytest.mark.parametrize("field, value", [
    ("queueId", "abc"), ("queueId", "2147483648"), ("queueId", ""), ("queueId", "1.5"),
    ("bornTimestamp", "9223372036854775808"), ("unitMode", "maybe"),
])
def test_bad_header_field(field, value):
    ext = _send_ext()
    ext[field] = value
    with pytest.raises(BadHeaderField) as info:
        SendMessageRequestHeader.from_ext_fields(ext)
    assert info.value.field == field and field in info.value.remark


def test_header_type_edges():
    ext = _send_ext()
    ext.update(queueId="-2147483648", bornTimestamp="9223372036854775807", unitMode="TRUE")
    hdr = SendMessageRequestHeader.from_ext_fields(ext)
    assert hdr.queueId == -2**31 and hdr.bornTimestamp == 2**63 - 1 and hdr.unitMode is True
    # optional fields absent -> defaults
    minimal = {k: _send_ext()[k] for k in ("producerGroup", "topic", "defaultTopic",
                                            "defaultTopicQueueNums", "queueId", "sysFlag",
                                            "bornTimestamp", "flag")}
    hdr = SendMessageRequestHeader.from_ext_fields(minimal)
    assert hdr.properties is None and hdr.unitMode is False and hdr.batch is False
    assert "properties" not in hdr.to_ext_fields()
    with pytest.raises(MissingHeaderField):
        SendMessageResponseHeader(msgId="x").to_ext_fields()


def test_various_headers():
    pull = PullMessageRequestHeader.from_ext_fields({
        "consumerGroup": "cg", "topic": "T", "queueId": "0", "queueOffset": "5",
        "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "15000",
        "subscription": "TagA || TagB", "subVersion": "1700000000000"})
    assert pull.maxMsgNums == 32 and pull.expressionType is None
    assert PullMessageResponseHeader(suggestWhichBrokerId=0, nextBeginOffset=6, minOffset=0,
                                     maxOffset=6).to_ext_fields() == {
        "suggestWhichBrokerId": "0", "nextBeginOffset": "6", "minOffset": "0", "maxOffset": "6"}
    # C++ consumers send only group, delayLevel and offset.
    back = ConsumerSendMsgBackRequestHeader.from_ext_fields(
        {"group": "cg", "delayLevel": "3", "offset": "1234"})
    assert back.originMsgId is None and back.maxReconsumeTimes is None
    reg = RegisterBrokerRequestHeader.from_ext_fields({
        "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912", "brokerId": "0"})
    assert reg.compressed is False and reg.bodyCrc32 == 0
    assert GetRouteInfoRequestHeader.from_ext_fields({"topic": "T"}).topic == "T"
    unreg = UnregisterClientRequestHeader.from_ext_fields({"clientID": "c", "producerGroup": ""})
    assert unreg.producerGroup == "" and unreg.consumerGroup is None
    # C++ CreateTopicRequestHeader leaves out `order`.
    ct = CreateTopicRequestHeader.from_ext_fields({
        "topic": "T", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
        "perm": "6", "topicFilterType": "SINGLE_TAG"})
    assert ct.order is False
    with pytest.raises(BadHeaderField, match="topicFilterType"):
        CreateTopicRequestHeader.from_ext_fields({
            "topic": "T", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
            "perm": "6", "topicFilterType": "NOPE"})
    end = {"producerGroup": "pg", "tranStateTableOffset": "1", "commitLogOffset": "2",
           "commitOrRollback": "8", "msgId": "m"}
    assert EndTransactionRequestHeader.from_ext_fields(end).fromTransactionCheck is False
    with pytest.raises(BadHeaderField, match="commitOrRollback"):
        EndTransactionRequestHeader.from_ext_fields({**end, "commitOrRollback": "5"})
    assert decode_request_header(RemotingCommand.request(RequestCode.HEART_BEAT)) is None


# ============================================================================ fastjson
def test_fastjson_integer_keys_written_bare_and_read_both_ways():
    route = TopicRouteData(
        queueDatas=[QueueData("broker-a", 4, 4, 6, 0)],
        brokerDatas=[BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911",
                                                               1: "127.0.0.1:10921"})])
    raw = route.encode()
    assert raw == (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
                   b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
                   b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
                   b'"topicSynFlag":0,"writeQueueNums":4}]}')
    with pytest.raises(ValueError):
        json.loads(raw)                          # really not standard JSON
    assert TopicRouteData.decode(raw) == route
    quoted = route.encode(quote_int_keys=True)
    assert json.loads(quoted)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911",
                                                                     "1": "127.0.0.1:10921"}
    assert TopicRouteData.decode(quoted) == route


def test_fastjson_loads_leaves_strings_alone():
    text = '{ 0 :"a", -1:{"s":",5:{7:"}, "t":"x\\",9:y"}'
    assert fastjson.loads(text) == {"0": "a", "-1": {"s": ",5:{7:"}, "t": 'x",9:y'}
    assert fastjson.loads(b'[1,2]\n\x00') == [1, 2]
    for bad in (b"", b"\xff\xfe", b"{nope}", b"NaN", b"[" * 100000):
        with pytest.raises(BodyDecodeError):
            fastjson.loads(bad)
    assert fastjson.dumps({"k": "\u4e2d\n", 3: [True, None, 1.5]}) == '{"k":"\u4e2d\\n",3:[true,null,1.5]}'


def test_cluster_info_and_topic_list():
    ci = ClusterInfo(brokerAddrTable={"broker-a": BrokerData("C", "broker-a", {0: "h:1"})},
                     clusterAddrTable={"C": ["broker-a"]})
    raw = ci.encode()
    assert raw == (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1"},"brokerName":"broker-a",'
                   b'"cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}')
    assert ClusterInfo.decode(raw) == ci
    tl = TopicList(["b", "a"])
    assert tl.encode() == b'{"topicList":["a","b"]}'
    assert TopicList.decode(b'{"brokerAddr":"h:1","topicList":["x"]}') == TopicList(["x"], "h:1")


# ============================================================================ bodies
def test_heartbeat_from_cpp_client():
    # HeartbeatData::Encode in rocketmq-client-cpp: no producerDataSet key when empty,
    # subVersion as a string, no expressionType/classFilterMode/unitMode, trailing newline.
    body = (b'{"clientID":"10.0.0.1@1234","consumerDataSet":[{"consumeFromWhere":'
            b'"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cg",'
            b'"messageModel":"CLUSTERING","subscriptionDataSet":[{"subString":"*",'
            b'"subVersion":"1700000000000","topic":"T"}]}]}\n')
    hb = HeartbeatData.decode(body)
    assert hb.clientID == "10.0.0.1@1234" and hb.producerDataSet == []
    sub = hb.consumerDataSet[0].subscriptionDataSet[0]
    assert sub.subVersion == 1700000000000 and sub.tagsSet == [] and sub.expressionType == "TAG"


def test_heartbeat_java_shape_round_trip():
    hb = HeartbeatData("ip@pid", [ProducerData("pg")], [ConsumerData(
        "cg", subscriptionDataSet=[SubscriptionData("T", "A || B", ["A", "B"], [65, 66], 5)])])
    raw = hb.encode()
    assert raw.startswith(b'{"clientID":"ip@pid","consumerDataSet":[{"consumeFromWhere":'
                          b'"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
                          b'"groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":'
                          b'[{"classFilterMode":false,"codeSet":[65,66],"expressionType":"TAG",')
    assert HeartbeatData.decode(raw) == hb


@pytest.mark.parametrize("body, match", [
    (b"[]", "expected a JSON object"),
    (b'{"consumerDataSet":[]}', "clientID"),
    (b'{"clientID":"c","consumerDataSet":{}}', "consumerDataSet: expected a JSON array"),
    (b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[7]}]}',
     r"subscriptionDataSet\[0\]"),
    (b'{"clientID":"c","producerDataSet":[{"groupName":["g"]}]}', "groupName"),
    (b"", "empty"),
    (b"not json", "not valid JSON"),
])
def test_heartbeat_rejects_wrong_shapes(body, match):
    with pytest.raises(BodyDecodeError, match=match):
        HeartbeatData.decode(body)


def test_route_rejects_wrong_shapes():
    with pytest.raises(BodyDecodeError, match="brokerAddrs"):
        TopicRouteData.decode(b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"x":"h"}}]}')
    with pytest.raises(BodyDecodeError, match=r"queueDatas\[0\].perm"):
        TopicRouteData.decode(b'{"queueDatas":[{"brokerName":"b","perm":"rw"}]}')
    # 5.x spelling of the queue flag is accepted too
    qd = TopicRouteData.decode(b'{"queueDatas":[{"brokerName":"b","topicSysFlag":3}]}')
    assert qd.queueDatas[0].topicSynFlag == 3


def test_lock_batch_and_consumer_list_bodies():
    req = LockBatchRequestBody("cg", "cid", [MessageQueue("T", "broker-a", 1),
                                             MessageQueue("T", "broker-a", 0)])
    raw = req.encode()
    assert raw == (b'{"clientId":"cid","consumerGroup":"cg","mqSet":[{"brokerName":"broker-a",'
                   b'"queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":1,"topic":"T"}]}')
    assert set(LockBatchRequestBody.decode(raw).mqSet) == set(req.mqSet)
    resp = LockBatchResponseBody([MessageQueue("T", "broker-a", 0)])
    assert LockBatchResponseBody.decode(resp.encode()) == resp
    ids = GetConsumerListByGroupResponseBody(["c1", "c2"])
    assert ids.encode() == b'{"consumerIdList":["c1","c2"]}'
    assert GetConsumerListByGroupResponseBody.decode(ids.encode()) == ids


def test_register_broker_body_and_kv_table():
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(
        {"T": TopicConfig("T", 4, 4)}, DataVersion(timestamp=1700000000000, counter=3)))
    raw = body.encode()
    assert raw == (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
                   b'{"counter":3,"timestamp":1700000000000},"topicConfigTable":{"T":{"order":false,'
                   b'"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T",'
                   b'"topicSysFlag":0,"writeQueueNums":4}}}}')
    assert RegisterBrokerBody.decode(raw) == body
    kv = KVTable({"T": "broker-a:4"})
    assert kv.encode() == b'{"table":{"T":"broker-a:4"}}'
    assert KVTable.decode(kv.encode()) == kv
    with pytest.raises(BodyDecodeError, match="table"):
        KVTable.decode(b'{"table":{"k":1}}')


def test_hostile_json_is_rejected_without_quadratic_scan():
    # Fallback parsing of fastjson keys must stay linear: these would hang if it were not.
    for text in ('"' + '\\"' * 500_000, "," + "1" * 500_000 + " " * 500_000 + "x",
                 '"a' * 500_000):
        with pytest.raises(BodyDecodeError):
            fastjson.loads(text)


def test_large_frame_in_chunks():
    body = bytes(range(256)) * (5 * 4096)          # 5 MiB
    frame = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, body).encode()
    dec = FrameDecoder()
    out = []
    for i in range(0, len(frame), 65536):
        out += dec.feed(frame[i:i + 65536])
    assert len(out) == 1 and RemotingCommand.decode(out[0]).body == body
    assert dec.buffered == 0
