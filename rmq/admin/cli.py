"""``rmq admin`` — mqadmin's everyday commands (SPEC §3 topics by cluster or broker, §5 filters,
§6 delay levels, §7 dead letters, §8 transactions, §9 cluster, §10 lag per queue and group):
updateTopic, deleteTopic, topicList, topicRoute, topicStatus, clusterList, brokerStatus, deleteKvConfig,
updateSubGroup, consumerProgress, queryMsgByKey, queryMsgById, queryMsgByOffset, sendMessage
(tags, keys, user properties, delay level, transactional), consumeMessage (a one-off pull with
a tag or SQL92 expression), pushConsume (a demo push consumer printing every delivery: retries,
orderly, broadcasting, idempotent), resendDLQ, and shareGroupProgress (a Kafka share group's
state, read from the broker's kafkaShareGroups config table).  Tables by default, ``--json`` for machines."""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
from typing import Any, Callable

import click

DEFAULT_NAMESRV = "127.0.0.1:9876"


def _namesrv_default() -> str:
    return os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV


def _ts(ms: int) -> str:
    if not ms or ms <= 0:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000.0).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


#: --access-key / --secret-key of the running command (SessionCredentials)
_CREDENTIALS: dict[str, str] = {}


def _set_credential(ctx: Any, param: Any, value: Any) -> Any:
    if value:
        _CREDENTIALS[param.name] = value
    else:
        _CREDENTIALS.pop(param.name, None)
    return value


def _client_config(**kw: Any):
    from rmq.client import ClientConfig
    return ClientConfig(access_key=_CREDENTIALS.get("access_key"), secret_key=_CREDENTIALS.get("secret_key"), **kw)


def _common(fn: Callable) -> Callable:
    """-n/--namesrv, --json and --timeout on every command; client errors become one clear line."""
    @click.option("-n", "--namesrv", "namesrv", default=_namesrv_default, show_default="$NAMESRV_ADDR or 127.0.0.1:9876",
                  help="NameServer address(es), 'host:port;host:port'.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @click.option("--timeout", type=float, default=5.0, show_default=True, help="Request timeout in seconds.")
    @click.option("--access-key", envvar="RMQ_ACCESS_KEY", expose_value=False, callback=_set_credential,
                  help="ACL accessKey for a broker with aclEnable (or $RMQ_ACCESS_KEY).")
    @click.option("--secret-key", envvar="RMQ_SECRET_KEY", expose_value=False, callback=_set_credential,
                  help="ACL secretKey (or $RMQ_SECRET_KEY); requests are signed as AclClientRPCHook does.")
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rmq.client.errors import MQClientError
        from rmq.remoting import RemotingError as CodecError
        try:
            return fn(*args, **kwargs)
        except MQClientError as exc:
            raise click.ClickException(_first_line(exc)) from None
        except (CodecError, OSError, ValueError) as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    return wrapper


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class _Admin:
    """MQAdmin opened for one command and closed afterwards."""

    def __init__(self, namesrv: str, timeout: float) -> None:
        from rmq.client.admin import MQAdmin
        self.admin = MQAdmin(namesrv, timeout=timeout, config=_client_config())

    def __enter__(self):  # noqa: ANN204
        return self.admin

    def __exit__(self, *exc: Any) -> None:
        self.admin.close()


def _emit(as_json: bool, data: Any, title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=1, default=str, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*[str(x) for x in r])
    Console(soft_wrap=False, width=max(100, min(200, _term_width()))).print(table)


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 160


def _mq(mq) -> dict:  # noqa: ANN001
    return {"topic": mq.topic, "brokerName": mq.brokerName, "queueId": mq.queueId}


def _msg_json(m) -> dict:  # noqa: ANN001
    try:
        body = m.body.decode("utf-8")
        enc = "utf-8"
    except UnicodeDecodeError:
        body = m.body.hex()
        enc = "hex"
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "brokerName": m.broker_name,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "commitLogOffset": m.commit_log_offset,
            "tags": m.properties.get("TAGS"), "keys": m.properties.get("KEYS"),
            "bornHost": f"{m.born_host[0]}:{m.born_host[1]}", "bornTimestamp": m.born_timestamp,
            "storeHost": f"{m.store_host[0]}:{m.store_host[1]}", "storeTimestamp": m.store_timestamp,
            "reconsumeTimes": m.reconsume_times, "sysFlag": m.sys_flag, "flag": m.flag, "storeSize": m.store_size,
            "bodyCRC": m.body_crc, "properties": m.properties, "body": body, "bodyEncoding": enc}


def _print_message(m, as_json: bool) -> None:  # noqa: ANN001
    d = _msg_json(m)
    if as_json:
        click.echo(json.dumps(d, indent=1, ensure_ascii=False))
        return
    rows = [[k, v] for k, v in (
        ("OffsetID", d["offsetMsgId"]), ("Msg ID", d["msgId"]), ("Topic", d["topic"]), ("Tags", d["tags"] or ""),
        ("Keys", d["keys"] or ""), ("Queue ID", d["queueId"]), ("Queue Offset", d["queueOffset"]),
        ("CommitLog Offset", d["commitLogOffset"]), ("Reconsume Times", d["reconsumeTimes"]),
        ("Born Timestamp", _ts(d["bornTimestamp"])), ("Store Timestamp", _ts(d["storeTimestamp"])),
        ("Born Host", d["bornHost"]), ("Store Host", d["storeHost"]), ("System Flag", d["sysFlag"]),
        ("Properties", d["properties"]), ("Message Body", d["body"] if len(d["body"]) <= 512 else d["body"][:512] + "..."))]
    _emit(False, None, None, ["Field", "Value"], rows)


@click.group("admin", context_settings={"help_option_names": ["-h", "--help"]})
def admin() -> None:
    """mqadmin-style administration over the RocketMQ remoting protocol (works against this
    broker and Apache RocketMQ 4.x)."""


# ------------------------------------------------------------------------------- topics
@admin.command("updateTopic")
@_common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--cluster", help="Create on every master of this cluster.")
@click.option("-b", "--broker-addr", "broker_addr", help="Create on this broker (host:port).")
@click.option("-r", "--read-queue-nums", "read_q", type=int, default=8, show_default=True)
@click.option("-w", "--write-queue-nums", "write_q", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=click.Choice(["2", "4", "6"]), default="6", show_default=True,
              help="2 write, 4 read, 6 both.")
@click.option("-o", "--order", is_flag=True, help="Mark the topic ordered.")
def update_topic(namesrv, as_json, timeout, topic, cluster, broker_addr, read_q, write_q, perm, order) -> None:
    """Create or update a topic on a broker (-b) or a whole cluster (-c)."""
    from rmq.client.producer import validate_topic
    if bool(cluster) == bool(broker_addr):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER_ADDR")
    validate_topic(topic)
    with _Admin(namesrv, timeout) as a:
        addrs = a.create_topic(topic, cluster=cluster, broker_addr=broker_addr, read_queue_nums=read_q,
                               write_queue_nums=write_q, perm=int(perm), order=order)
    data = {"topic": topic, "readQueueNums": read_q, "writeQueueNums": write_q, "perm": int(perm),
            "order": order, "brokers": addrs}
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        for addr in addrs:
            click.echo(f"create topic to {addr} success.")
        click.echo(f"TopicConfig [topicName={topic}, readQueueNums={read_q}, writeQueueNums={write_q}, "
                   f"perm={perm}, order={str(order).lower()}]")


@admin.command("deleteTopic")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", required=True, help="Delete on every master of this cluster, then on the NameServers.")
def delete_topic(namesrv, as_json, timeout, topic, cluster) -> None:
    """Delete a topic from a cluster's brokers and from the NameServers."""
    with _Admin(namesrv, timeout) as a:
        addrs = a.delete_topic(topic, cluster)
    if as_json:
        click.echo(json.dumps({"topic": topic, "cluster": cluster, "brokers": addrs}, indent=1))
    else:
        click.echo(f"delete topic [{topic}] from cluster [{cluster}] success ({', '.join(addrs) or 'no master'}).")
        click.echo(f"delete topic [{topic}] from NameServer success.")


@admin.command("topicList")
@_common
@click.option("-c", "--cluster", help="Only topics of this cluster.")
def topic_list(namesrv, as_json, timeout, cluster) -> None:
    """Every topic the NameServer knows."""
    with _Admin(namesrv, timeout) as a:
        topics = sorted(a.topic_list(cluster))
    _emit(as_json, {"topicList": topics}, f"{len(topics)} topics", ["Topic"], [[t] for t in topics])


@admin.command("topicRoute")
@_common
@click.option("-t", "--topic", required=True)
def topic_route(namesrv, as_json, timeout, topic) -> None:
    """The route (brokers and queue counts) of a topic."""
    with _Admin(namesrv, timeout) as a:
        route = a.topic_route(topic)
    if as_json:
        click.echo(json.dumps(route.to_json(), indent=1))
        return
    addrs = {bd.brokerName: bd for bd in route.brokerDatas}
    rows = []
    for qd in sorted(route.queueDatas, key=lambda q: q.brokerName):
        bd = addrs.get(qd.brokerName)
        rows.append([qd.brokerName, bd.cluster if bd else "", ", ".join(f"{k}={v}" for k, v in sorted(bd.brokerAddrs.items())) if bd else "",
                     qd.readQueueNums, qd.writeQueueNums, qd.perm])
    _emit(False, None, f"route of {topic}", ["Broker", "Cluster", "Addresses (id=addr)", "Read Qs", "Write Qs", "Perm"], rows)


@admin.command("topicStatus")
@_common
@click.option("-t", "--topic", required=True)
def topic_status(namesrv, as_json, timeout, topic) -> None:
    """Min offset, max offset and last update time of each queue of a topic."""
    with _Admin(namesrv, timeout) as a:
        rows = a.topic_status(topic)
    data = [dict(_mq(r.mq), minOffset=r.min_offset, maxOffset=r.max_offset,
                 lastUpdateTimestamp=r.last_update_timestamp) for r in rows]
    _emit(as_json, {"topic": topic, "queues": data}, f"status of {topic}",
          ["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"],
          [[r.mq.brokerName, r.mq.queueId, r.min_offset, r.max_offset, _ts(r.last_update_timestamp)] for r in rows])


# ------------------------------------------------------------------------------- cluster
@admin.command("deleteKvConfig")
@_common
@click.option("-s", "--namespace", required=True, help="KV config namespace (e.g. KAFKA_BRIDGE_MEMBERS).")
@click.option("-k", "--key", required=True, help="Key to delete.")
def delete_kv_config(namesrv, as_json, timeout, namespace, key) -> None:
    """Delete a KV config item on every NameServer (e.g. a decommissioned broker's Kafka membership)."""
    with _Admin(namesrv, timeout) as a:
        done = a.delete_kv_config(namespace, key)
    data = {"namespace": namespace, "key": key, "namesrv": done}
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo(f"deleted {namespace}/{key} on {', '.join(done)}")


@admin.command("clusterList")
@_common
@click.option("-c", "--cluster", help="Only this cluster.")
def cluster_list(namesrv, as_json, timeout, cluster) -> None:
    """Clusters, their brokers and each broker's version and load."""
    with _Admin(namesrv, timeout) as a:
        ci = a.cluster_info()
        out = []
        for cname in sorted(ci.clusterAddrTable):
            if cluster and cname != cluster:
                continue
            for bname in sorted(ci.clusterAddrTable[cname]):
                bd = ci.brokerAddrTable.get(bname)
                if bd is None:
                    continue
                for bid, addr in sorted(bd.brokerAddrs.items()):
                    try:
                        info = a.broker_runtime_info(addr)
                        err = None
                    except Exception as exc:  # one broker down must not hide the others
                        info, err = {}, _first_line(exc)
                    out.append({"cluster": cname, "brokerName": bname, "brokerId": bid, "addr": addr,
                                "version": info.get("brokerVersionDesc", ""), "putTps": info.get("putTps", ""),
                                "getTps": info.get("getTransferedTps", info.get("getFoundTps", "")),
                                "msgPutTotalTodayNow": info.get("msgPutTotalTodayNow", ""),
                                "msgGetTotalTodayNow": info.get("msgGetTotalTodayNow", ""),
                                "runtime": info.get("runtime", ""), "error": err})
    _emit(as_json, {"brokers": out}, "clusters",
          ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS", "#OutTPS", "#InTotalToday",
           "#OutTotalToday", "#Runtime"],
          [[o["cluster"], o["brokerName"], o["brokerId"], o["addr"], o["version"] or (o["error"] or ""),
            o["putTps"], o["getTps"], o["msgPutTotalTodayNow"], o["msgGetTotalTodayNow"], o["runtime"]] for o in out])


@admin.command("brokerStatus")
@_common
@click.option("-b", "--broker-addr", "broker_addr", help="Broker address host:port.")
@click.option("-c", "--cluster", help="Every broker of this cluster.")
def broker_status(namesrv, as_json, timeout, broker_addr, cluster) -> None:
    """GET_BROKER_RUNTIME_INFO: the broker's runtime key/value table."""
    if bool(cluster) == bool(broker_addr):
        raise click.UsageError("give exactly one of -b BROKER_ADDR or -c CLUSTER")
    with _Admin(namesrv, timeout) as a:
        addrs = [broker_addr] if broker_addr else a.master_addrs(cluster)
        tables = {addr: a.broker_runtime_info(addr) for addr in addrs}
    if as_json:
        click.echo(json.dumps(tables if cluster else tables[broker_addr], indent=1, sort_keys=True))
        return
    for addr, table in tables.items():
        _emit(False, None, f"broker {addr}", ["Key", "Value"], [[k, v] for k, v in sorted(table.items())])


# ------------------------------------------------------------------------------- consumers
@admin.command("consumerProgress")
@_common
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", help="Only this topic.")
def consumer_progress(namesrv, as_json, timeout, group, topic) -> None:
    """Per-queue broker offset, consumer offset and lag (diff) of a consumer group."""
    with _Admin(namesrv, timeout) as a:
        rows, tps = a.consumer_progress(group, topic)
    total = sum(r.diff for r in rows)
    data = {"group": group, "consumeTps": tps, "diffTotal": total,
            "queues": [dict(_mq(r.mq), brokerOffset=r.broker_offset, consumerOffset=r.consumer_offset,
                            diff=r.diff, lastTimestamp=r.last_timestamp) for r in rows]}
    _emit(as_json, data, f"{group}: consume TPS {tps:.2f}, diff total {total}",
          ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"],
          [[r.mq.topic, r.mq.brokerName, r.mq.queueId, r.broker_offset, r.consumer_offset, r.diff,
            _ts(r.last_timestamp)] for r in rows])


# ------------------------------------------------------------------------------- messages
@admin.command("queryMsgByKey")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-k", "--key", "msg_key", required=True, help="Message key (KEYS property).")
@click.option("--max", "max_num", type=int, default=64, show_default=True)
def query_msg_by_key(namesrv, as_json, timeout, topic, msg_key, max_num) -> None:
    """Messages of a topic carrying a key (the IndexFile lookup)."""
    with _Admin(namesrv, timeout) as a:
        msgs = a.query_msg_by_key(topic, msg_key, max_num)
    _emit(as_json, {"topic": topic, "key": msg_key, "messages": [_msg_json(m) for m in msgs]},
          f"{len(msgs)} message(s) with key {msg_key}",
          ["#Message ID", "#Offset Msg ID", "#QID", "#Offset", "#Store Time"],
          [[m.msg_id, m.offset_msg_id, m.queue_id, m.queue_offset, _ts(m.store_timestamp)] for m in msgs])


@admin.command("queryMsgById")
@_common
@click.option("-i", "--msg-id", "msg_id", required=True, help="offsetMsgId, or a client msgId with -t.")
@click.option("-t", "--topic", help="Topic, to look the id up as a client msgId (UNIQ_KEY).")
def query_msg_by_id(namesrv, as_json, timeout, msg_id, topic) -> None:
    """One message by its offsetMsgId (broker) or client msgId (with -t)."""
    with _Admin(namesrv, timeout) as a:
        m = a.query_msg_by_id(msg_id.strip(), topic)
    _print_message(m, as_json)


@admin.command("queryMsgByOffset")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker-name", "broker_name", required=True)
@click.option("-i", "--queue-id", "queue_id", type=int, required=True)
@click.option("-o", "--offset", type=int, required=True)
def query_msg_by_offset(namesrv, as_json, timeout, topic, broker_name, queue_id, offset) -> None:
    """The message at a queue offset."""
    with _Admin(namesrv, timeout) as a:
        m = a.query_msg_by_offset(topic, broker_name, queue_id, offset)
    if m is None:
        raise click.ClickException(f"no message at {topic} {broker_name}:{queue_id} offset {offset}")
    _print_message(m, as_json)


def _parse_props(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise click.UsageError(f"--property expects KEY=VALUE, got {item!r}")
        if any(c in item for c in "\x01\x02"):
            raise click.UsageError("property names and values must not contain \\x01 or \\x02")
        out[k.strip()] = v
    return out


_TX_STATES = {"commit": "COMMIT_MESSAGE", "rollback": "ROLLBACK_MESSAGE", "unknown": "UNKNOW"}


@admin.command("sendMessage")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True, help="Message body (UTF-8).")
@click.option("-k", "--keys", help="Keys (several: separated by a space).")
@click.option("-c", "--tags", help="Tag.")
@click.option("-P", "--property", "props", multiple=True, metavar="KEY=VALUE",
              help="A user property (repeatable), e.g. for SQL92 filters.")
@click.option("-d", "--delay-level", "delay_level", type=int, default=0, show_default=True,
              help="Delay level 1..N of the broker's messageDelayLevel (0 = deliver now).")
@click.option("-b", "--broker-name", "broker_name", help="Send to this broker (with -i).")
@click.option("-i", "--queue-id", "queue_id", type=int, help="Send to this queue (with -b).")
@click.option("-g", "--group", default="TOOLS_PRODUCER", show_default=True, help="Producer group.")
@click.option("--transaction", "tx", type=click.Choice(sorted(_TX_STATES)),
              help="Send as a transactional (half) message; the local transaction answers this.")
@click.option("--check-answer", "check_answer", type=click.Choice(sorted(_TX_STATES)),
              help="With --transaction: stay connected and answer the broker's check-backs with this.")
@click.option("--check-wait", "check_wait", type=float, default=15.0, show_default=True,
              help="With --check-answer: wait this many seconds for a check-back.")
def send_message(namesrv, as_json, timeout, topic, body, keys, tags, props, delay_level, broker_name, queue_id,
                 group, tx, check_answer, check_wait) -> None:
    """Send one message and print the SendResult (with --transaction: the half message, the
    local transaction's answer and, with --check-answer, the check-backs answered)."""
    from rmq.client import Message, MessageQueue, Producer
    if (broker_name is None) != (queue_id is None):
        raise click.UsageError("-b and -i go together")
    if delay_level < 0:
        raise click.UsageError("--delay-level must be >= 0")
    if check_answer and not tx:
        raise click.UsageError("--check-answer needs --transaction")
    if tx and (broker_name is not None or delay_level):
        raise click.UsageError("--transaction cannot be combined with -b/-i or --delay-level")
    msg = Message(topic, body.encode("utf-8"), tags=tags, keys=keys, properties=_parse_props(props),
                  delay_time_level=delay_level)
    if tx:
        _send_transactional(namesrv, as_json, timeout, msg, group, tx, check_answer, check_wait)
        return
    p = Producer(group, namesrv, send_msg_timeout=timeout, instance_name=f"admin-{os.getpid()}",
                 config=_client_config())
    p.start()
    try:
        if broker_name is not None:
            r = p.send_to_queue(msg, MessageQueue(topic, broker_name, queue_id))
        else:
            r = p.send(msg)
    finally:
        p.shutdown()
    data = {"topic": topic, "brokerName": r.message_queue.brokerName, "queueId": r.message_queue.queueId,
            "queueOffset": r.queue_offset, "sendStatus": r.send_status.value, "msgId": r.msg_id,
            "offsetMsgId": r.offset_msg_id, "delayLevel": delay_level}
    _emit(as_json, data, None, ["#Broker Name", "#QID", "#Queue Offset", "#Send Result", "#MsgId", "#OffsetMsgId"],
          [[data["brokerName"], data["queueId"], data["queueOffset"], data["sendStatus"], data["msgId"],
            data["offsetMsgId"]]])


def _send_transactional(namesrv, as_json, timeout, msg, group, tx, check_answer, check_wait) -> None:  # noqa: ANN001
    import threading
    import time as _time
    from rmq.client import LocalTransactionState, TransactionListener, TransactionProducer
    checks: list[dict] = []
    answered = threading.Event()

    class _Answer(TransactionListener):
        def execute_local_transaction(self, m, arg):  # noqa: ANN001
            return LocalTransactionState(_TX_STATES[tx])

        def check_local_transaction(self, m):  # noqa: ANN001
            state = LocalTransactionState(_TX_STATES[check_answer]) if check_answer else LocalTransactionState.UNKNOW
            checks.append({"at": _ts(int(_time.time() * 1000)), "msgId": m.msg_id,
                           "offsetMsgId": m.offset_msg_id, "transactionId": m.transaction_id,
                           "checkTimes": m.properties.get("TRANSACTION_CHECK_TIMES"), "answer": state.value})
            if not as_json:
                click.echo(f"check-back {len(checks)} at {checks[-1]['at']}: transactionId {m.transaction_id}, "
                           f"TRANSACTION_CHECK_TIMES={checks[-1]['checkTimes']} -> answered {state.value}")
            answered.set()
            return state

    group = group if group != "TOOLS_PRODUCER" else "TOOLS_TX_PRODUCER"
    p = TransactionProducer(group, namesrv, transaction_listener=_Answer(), send_msg_timeout=timeout,
                            config=_client_config(),
                            instance_name=f"admin-{os.getpid()}")
    p.start()
    try:
        r = p.send_message_in_transaction(msg)
        data = {"topic": msg.topic, "producerGroup": group, "brokerName": r.message_queue.brokerName,
                "halfQueueId": r.message_queue.queueId, "halfQueueOffset": r.queue_offset,
                "sendStatus": r.send_status.value, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
                "transactionId": r.transaction_id, "localTransactionState": r.local_transaction_state.value}
        if not as_json:
            _emit(False, None, None, ["#Producer Group", "#Send Result", "#Half Offset", "#MsgId (transactionId)",
                                      "#OffsetMsgId (half)", "#Local Transaction"],
                  [[group, data["sendStatus"], data["halfQueueOffset"], data["msgId"], data["offsetMsgId"],
                    data["localTransactionState"]]])
        if check_answer:
            if not as_json:
                click.echo(f"waiting up to {check_wait:g}s for the broker's check-back ...")
            answered.wait(check_wait)
            # a check answered UNKNOW will come again: keep answering until the wait is over
            if check_answer == "unknown":
                _time.sleep(max(0.0, check_wait - 0.1))
            else:
                _time.sleep(0.3)  # let the oneway END_TRANSACTION leave
            if not checks and not as_json:
                click.echo("no check-back arrived")
        data["checkBacks"] = checks
    finally:
        p.shutdown()
    if as_json:
        click.echo(json.dumps(data, indent=1))


@admin.command("consumeMessage")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker-name", "broker_name", help="Only this broker.")
@click.option("-i", "--queue-id", "queue_id", type=int, help="Only this queue.")
@click.option("-o", "--offset", type=int, help="Start offset (default: each queue's min offset).")
@click.option("-c", "--count", type=int, default=128, show_default=True, help="At most this many messages.")
@click.option("-s", "--subexpression", "--expression", "expression", default="*", show_default=True,
              help="Tag expression, e.g. 'TagA || TagB'.")
@click.option("--sql", help="SQL92 expression on user properties instead (broker needs enablePropertyFilter=true).")
@click.option("-g", "--group", default="TOOLS_CONSUMER", show_default=True,
              help="Consumer group named in the pull (nothing is committed).")
def consume_message(namesrv, as_json, timeout, topic, broker_name, queue_id, offset, count, expression, sql,
                    group) -> None:
    """Read messages with a one-off pull (nothing is committed): tag filter on the broker's
    hash codes plus an exact match here, or a SQL92 filter evaluated by the broker."""
    from rmq.client.route import mq_sort_key, route_to_subscribe_info
    if sql and expression != "*":
        raise click.UsageError("give either a tag expression (-s) or --sql, not both")
    etype, expr = ("SQL92", sql) if sql else ("TAG", expression)
    out = []
    with _Admin(namesrv, timeout) as a:
        route = a.topic_route(topic)
        mqs = sorted((mq for mq in route_to_subscribe_info(topic, route)
                      if (broker_name is None or mq.brokerName == broker_name)
                      and (queue_id is None or mq.queueId == queue_id)), key=mq_sort_key)
        if not mqs:
            raise click.ClickException(f"no queue of {topic} matches")
        for mq in mqs:
            pos = offset if offset is not None else a.pull(mq, 0, 1, "*", group).min_offset
            rounds = 0
            while len(out) < count and rounds < 10000:
                rounds += 1
                r = a.pull(mq, pos, min(32, count - len(out)), expr, group, etype)
                out += r.msg_found_list
                if r.pull_status.value != "FOUND" or r.next_begin_offset <= pos:
                    if r.pull_status.value == "OFFSET_ILLEGAL" and r.next_begin_offset != pos:
                        pos = r.next_begin_offset
                        continue
                    break
                pos = r.next_begin_offset
            if len(out) >= count:
                break
    if as_json:
        click.echo(json.dumps({"topic": topic, "messages": [_msg_json(m) for m in out]}, indent=1, ensure_ascii=False))
        return
    _emit(False, None, f"{len(out)} message(s) of {topic}" + (f" matching {expr!r}" if expr != "*" else ""),
          ["#Broker", "#QID", "#Offset", "#Tags", "#Keys", "#User Properties", "#Reconsume", "#Msg ID", "#Body"],
          [[m.broker_name, m.queue_id, m.queue_offset, m.properties.get("TAGS", ""), m.properties.get("KEYS", ""),
            _user_props(m.properties), m.reconsume_times, m.msg_id, _short_body(m.body)] for m in out])


#: properties the broker or client set (MessageConst.STRING_HASH_SET, the ones seen here)
_SYSTEM_PROPS = frozenset({"TAGS", "KEYS", "WAIT", "DELAY", "UNIQ_KEY", "MIN_OFFSET", "MAX_OFFSET", "CLUSTER",
                           "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "TRAN_MSG", "PGROUP",
                           "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES", "CONSUME_START_TIME",
                           "MAX_RECONSUME_TIMES", "RECONSUME_TIME", "__transactionId__"})


def _user_props(props: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(props.items()) if k not in _SYSTEM_PROPS)


@admin.command("updateSubGroup")
@_common
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-c", "--cluster", help="On every master of this cluster.")
@click.option("-b", "--broker-addr", "broker_addr", help="On this broker (host:port).")
@click.option("-r", "--retry-max-times", "retry_max", type=int, default=16, show_default=True,
              help="retryMaxTimes: failures before a message goes to %DLQ%group (when the client sends no limit).")
@click.option("-q", "--retry-queue-nums", "retry_queues", type=int, default=1, show_default=True)
def update_sub_group(namesrv, as_json, timeout, group, cluster, broker_addr, retry_max, retry_queues) -> None:
    """Create or update a subscription group's config (retryMaxTimes, retryQueueNums)."""
    if bool(cluster) == bool(broker_addr):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER_ADDR")
    with _Admin(namesrv, timeout) as a:
        addrs = a.create_subscription_group(group, cluster=cluster, broker_addr=broker_addr,
                                            retry_max_times=retry_max, retry_queue_nums=retry_queues)
    data = {"groupName": group, "retryMaxTimes": retry_max, "retryQueueNums": retry_queues, "brokers": addrs}
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        for addr in addrs:
            click.echo(f"create subscription group to {addr} success.")
        click.echo(f"SubscriptionGroupConfig [groupName={group}, retryQueueNums={retry_queues}, "
                   f"retryMaxTimes={retry_max}]")


@admin.command("resendDLQ")
@_common
@click.option("-g", "--group", required=True, help="Consumer group whose %DLQ%group to resend.")
@click.option("-t", "--topic", help="Resend to this topic (every group of it sees the messages); "
                                    "default %RETRY%group (only this group).")
@click.option("--max", "max_count", type=int, default=1000, show_default=True)
def resend_dlq(namesrv, as_json, timeout, group, topic, max_count) -> None:
    """Put a group's dead letters back to be consumed again (each one once).  Uses this
    project's RESEND_DLQ_MESSAGE_EXT broker request (RocketMQ 4.x has none)."""
    with _Admin(namesrv, timeout) as a:
        rows = a.resend_dlq(group, topic, max_count)
    total = sum(r["resent"] for r in rows)
    _emit(as_json, {"group": group, "resent": total, "brokers": rows}, f"resent {total} message(s) of %DLQ%{group}",
          ["#Broker Name", "#Broker Addr", "#From", "#To", "#Resent"],
          [[r["brokerName"], r["brokerAddr"], r["dlqTopic"], r["destination"], r["resent"]] for r in rows])


_SHARE_STATES = {0: "Available", 1: "Acquired", 2: "Acknowledged", 4: "Archived"}


@admin.command("shareGroupProgress")
@_common
@click.option("-g", "--group", required=True, help="Kafka share group.")
@click.option("-t", "--topic", help="Only this topic.")
@click.option("-b", "--broker-addr", "broker_addr", help="Ask this broker only (default: every broker group).")
@click.option("-p", "--partition", type=int, help="With --offset: the partition (queueId) of the record.")
@click.option("-o", "--offset", type=int, help="Show one record's share state (with -t and -p).")
def share_group_progress(namesrv, as_json, timeout, group, topic, broker_addr, partition, offset) -> None:
    """A Kafka share group (KIP-932) seen from the RocketMQ side: per partition its start offset
    (SPSO), the end of its in-flight window and the records in each state; with -t -p -o, one
    record's state, delivery count, and for an acquired record its member and lock. Reads the
    broker's kafkaShareGroups table (this project's GET_CONFIG_TABLE_EXT request)."""
    if offset is not None and (topic is None or partition is None):
        raise click.UsageError("--offset needs --topic and --partition")
    with _Admin(namesrv, timeout) as a:
        tables = a.config_tables("kafkaShareGroups", broker_addr)
    if not tables:
        raise click.ClickException("no broker answered with share-group state (is its Kafka listener enabled?)")
    rows, found, record = [], False, None
    for bname, addr, body in tables:
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:
            raise click.ClickException(f"broker {addr}: share-group state is not JSON ({exc})")
        g = (data.get("groups") or {}).get(group)
        if g is None:
            continue
        found = True
        limit = data.get("deliveryCountLimit")
        for key, sp in sorted(g.get("partitions", {}).items()):
            t, _, p = key.rpartition(":")
            if topic and t != topic:
                continue
            recs = sp.get("records", {})
            counts = {name: 0 for name in _SHARE_STATES.values()}
            for r in recs.values():
                counts[_SHARE_STATES.get(r[0], str(r[0]))] = counts.get(_SHARE_STATES.get(r[0], str(r[0])), 0) + 1
            rows.append({"topic": t, "brokerName": bname, "brokerAddr": addr, "partition": int(p),
                         "startOffset": sp["start"], "endOffset": sp["next"], "state": g.get("state"),
                         "members": len(g.get("members", [])), "deliveryCountLimit": limit, **counts,
                         "maxDeliveryCount": max((r[1] for r in recs.values()), default=0)})
            if offset is not None and t == topic and int(p) == partition:
                r = recs.get(str(offset))
                if r is not None:
                    record = {"state": _SHARE_STATES.get(r[0], str(r[0])), "deliveryCount": r[1]}
                    if len(r) > 2:
                        record.update(member=r[2], lockRemainingMs=r[3])
                elif offset < sp["start"]:
                    record = {"state": "Acknowledged or Archived (below the start offset)", "deliveryCount": None}
                else:
                    record = {"state": "not delivered yet (at or past the end of the in-flight window)",
                              "deliveryCount": 0}
                record.update(topic=topic, partition=partition, offset=offset, brokerName=bname)
    if not found:
        raise click.ClickException(f"share group {group!r} not found on "
                                   + ", ".join(addr for _, addr, _ in tables))
    if offset is not None:
        if record is None:
            raise click.ClickException(f"share group {group!r} has no state for {topic} partition {partition}")
        _emit(as_json, {"group": group, "record": record}, f"{group}: {topic}:{partition} offset {offset}",
              ["Key", "Value"], [[k, v] for k, v in record.items()])
        return
    _emit(as_json, {"group": group, "partitions": rows},
          f"{group}: share group, delivery count limit {rows[0]['deliveryCountLimit'] if rows else '?'}",
          ["#Topic", "#Broker Name", "#Partition", "#Start Offset", "#End Offset", "#Available", "#Acquired",
           "#Acknowledged", "#Archived", "#Max Delivery"],
          [[r["topic"], r["brokerName"], r["partition"], r["startOffset"], r["endOffset"], r["Available"],
            r["Acquired"], r["Acknowledged"], r["Archived"], r["maxDeliveryCount"]] for r in rows])


def _short_body(b: bytes) -> str:
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        s = b[:32].hex() + ("..." if len(b) > 32 else "")
    return s if len(s) <= 60 else s[:57] + "..."


@admin.command("pushConsume")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-s", "--subexpression", "--expression", "expression", default="*", show_default=True,
              help="Tag expression.")
@click.option("--sql", help="SQL92 expression on user properties instead.")
@click.option("--orderly", is_flag=True, help="MessageListenerOrderly: queue locks, one thread per queue.")
@click.option("--broadcast", is_flag=True, help="BROADCASTING instead of CLUSTERING.")
@click.option("--fail", "fail", default="0", show_default=True, metavar="N|always",
              help="Fail each message's first N deliveries (RECONSUME_LATER, or SUSPEND_CURRENT_QUEUE_A_MOMENT "
                   "when --orderly), or every delivery.")
@click.option("--max-reconsume-times", "max_reconsume", type=int, default=-1, show_default=True,
              help="maxReconsumeTimes (-1: 16 concurrent, unbounded orderly).")
@click.option("--from", "from_where", type=click.Choice(["first", "last"]), default="first", show_default=True,
              help="Where a group without a committed offset starts.")
@click.option("--count", type=int, default=0, help="Stop after this many deliveries (0: no limit).")
@click.option("--duration", type=float, default=30.0, show_default=True, help="Stop after this many seconds.")
@click.option("--idle", type=float, default=0.0, help="Stop after this many seconds without a delivery.")
@click.option("--idempotent", "dedup_db", type=click.Path(dir_okay=False),
              help="SQLite dedup store: consume each KEYS value once (rmq.client.idempotent).")
@click.option("--instance", "instance", help="Client instance name (default: pid-based).")
@click.option("--threads", type=click.IntRange(1, 64), default=20, show_default=True,
              help="consumeThreadMin/Max: listener threads (1: one message at a time, in arrival order).")
@click.option("--persist-interval", type=click.FloatRange(0.1, 3600), default=5.0, show_default=True,
              help="persistConsumerOffsetInterval in seconds: how often offsets go to the broker besides pulls.")
def push_consume(namesrv, as_json, timeout, topic, group, expression, sql, orderly, broadcast, fail,
                 max_reconsume, from_where, count, duration, idle, dedup_db, instance, threads,
                 persist_interval) -> None:
    """Run a push consumer and print every delivery as it happens (a demo consumer, as
    RocketMQ's quickstart Consumer): retries, dead letters, delays, order and filters show up
    in its output.  Offsets are committed like any consumer of the group."""
    import threading
    import time as _time
    from rmq.client import ConsumeFromWhere, ConsumeOrderlyStatus, ConsumeStatus, MessageModel, PushConsumer
    if sql and expression != "*":
        raise click.UsageError("give either a tag expression (-s) or --sql, not both")
    if fail != "always":
        try:
            fail_n = int(fail)
        except ValueError:
            raise click.UsageError("--fail expects a number or 'always'") from None
    else:
        fail_n = 1 << 30
    lock = threading.Lock()
    state = {"n": 0, "last": _time.monotonic()}
    done = threading.Event()
    t0 = _time.time()

    def show(m, status: str) -> None:  # noqa: ANN001
        now = int(_time.time() * 1000)
        rec = {"at": _ts(now), "topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
               "reconsumeTimes": m.reconsume_times, "tags": m.properties.get("TAGS"), "keys": m.properties.get("KEYS"),
               "userProperties": _user_props(m.properties), "body": _short_body(m.body), "msgId": m.msg_id,
               "bornToConsumeMs": now - m.born_timestamp, "storeToConsumeMs": now - m.store_timestamp,
               "status": status}
        with lock:
            if as_json:
                click.echo(json.dumps(rec, ensure_ascii=False))
            else:
                extra = " ".join(x for x in (f"tags={rec['tags']}" if rec["tags"] else "",
                                             f"keys={rec['keys']}" if rec["keys"] else "",
                                             rec["userProperties"]) if x)
                click.echo(f"{rec['at'][11:]} {m.topic} q{m.queue_id}@{m.queue_offset} "
                           f"reconsumeTimes={m.reconsume_times} born+{rec['bornToConsumeMs'] / 1000:.1f}s "
                           f"{extra} body={rec['body']!r} -> {status}")

    def count_one() -> None:
        with lock:
            state["n"] += 1
            state["last"] = _time.monotonic()
            if count and state["n"] >= count:
                done.set()

    def outcome(m) -> bool:  # noqa: ANN001
        return m.reconsume_times >= fail_n

    if orderly:
        def listener(msgs, ctx):  # noqa: ANN001
            ok = all(outcome(m) for m in msgs)
            st = ConsumeOrderlyStatus.SUCCESS if ok else ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            for m in msgs:
                show(m, st.value)
                count_one()
            return st
    else:
        def listener(msgs):  # noqa: ANN001
            ok = all(outcome(m) for m in msgs)
            st = ConsumeStatus.CONSUME_SUCCESS if ok else ConsumeStatus.RECONSUME_LATER
            for m in msgs:
                show(m, st.value)
                count_one()
            return st
    store = None
    if dedup_db:
        from rmq.client.idempotent import SQLiteDedupStore, default_key, idempotent_listener

        store = SQLiteDedupStore(dedup_db)
        current = threading.local()

        class _ShowSkips:
            """The dedup store, printing the deliveries it tells the listener to skip."""

            def claim(self, key: str) -> bool:
                ok = store.claim(key)
                if not ok:
                    show(current.msg, f"SKIPPED (key {key} consumed already or being consumed)")
                    count_one()
                return ok

            def mark_done(self, key: str) -> None:
                store.mark_done(key)

            def release(self, key: str) -> None:
                store.release(key)

            def is_done(self, key: str) -> bool:
                return store.is_done(key)

        def key_fn(m):  # noqa: ANN001
            current.msg = m
            return default_key(m)
        inner = listener
        listener = idempotent_listener(inner, _ShowSkips(), key_fn=key_fn)
    cfg = _client_config(mq_client_api_timeout=timeout, persist_consumer_offset_interval=persist_interval)
    c = PushConsumer(group, namesrv, config=cfg, instance_name=instance or f"pushConsume-{os.getpid()}",
                     message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if from_where == "first"
                     else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                     max_reconsume_times=max_reconsume, consume_thread_nums=threads)
    c.subscribe(topic, sql or expression, "SQL92" if sql else "TAG")
    if orderly:
        c.register_message_listener_orderly(listener)
    else:
        c.register_message_listener(listener)
    import signal as _signal
    # SIGTERM (kill PID) stops it as Ctrl-C does: offsets committed, queues unlocked. A shell script's
    # background job ignores SIGINT, so `kill` is how a script stops one.
    _signal.signal(_signal.SIGTERM, lambda *_: done.set())
    # The header goes out before any delivery line: listener threads print under the same lock.
    with lock:
        c.start()
        if not as_json:
            click.echo(f"consumer {c.client_id} of group {group} ({'BROADCASTING' if broadcast else 'CLUSTERING'}, "
                       f"{'orderly' if orderly else 'concurrently'}) subscribed to {topic} "
                       f"{sql or expression!r}; Ctrl-C or kill stops")
    try:
        while not done.is_set():
            if _time.time() - t0 >= duration:
                break
            if idle and state["n"] and _time.monotonic() - state["last"] >= idle:
                break
            done.wait(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        c.shutdown()
        if store is not None:
            store.close()
    if not as_json:
        click.echo(f"{state['n']} {'delivery' if state['n'] == 1 else 'deliveries'} in {_time.time() - t0:.1f}s")
