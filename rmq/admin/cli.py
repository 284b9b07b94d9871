"""``rmq admin`` — mqadmin's everyday commands (SPEC §3 topics by cluster or broker, §9 cluster,
§10 lag per queue and group): updateTopic, deleteTopic, topicList, topicRoute, topicStatus,
clusterList, brokerStatus, consumerProgress, queryMsgByKey, queryMsgById, queryMsgByOffset,
sendMessage, consumeMessage.  Tables by default, ``--json`` for machines."""
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


def _common(fn: Callable) -> Callable:
    """-n/--namesrv, --json and --timeout on every command; client errors become one clear line."""
    @click.option("-n", "--namesrv", "namesrv", default=_namesrv_default, show_default="$NAMESRV_ADDR or 127.0.0.1:9876",
                  help="NameServer address(es), 'host:port;host:port'.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @click.option("--timeout", type=float, default=5.0, show_default=True, help="Request timeout in seconds.")
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
        self.admin = MQAdmin(namesrv, timeout=timeout)

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


@admin.command("sendMessage")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True, help="Message body (UTF-8).")
@click.option("-k", "--keys", help="Keys.")
@click.option("-c", "--tags", help="Tags.")
@click.option("-b", "--broker-name", "broker_name", help="Send to this broker (with -i).")
@click.option("-i", "--queue-id", "queue_id", type=int, help="Send to this queue (with -b).")
@click.option("-g", "--group", default="TOOLS_PRODUCER", show_default=True, help="Producer group.")
def send_message(namesrv, as_json, timeout, topic, body, keys, tags, broker_name, queue_id, group) -> None:
    """Send one message and print the SendResult."""
    from rmq.client import Message, MessageQueue, Producer
    if (broker_name is None) != (queue_id is None):
        raise click.UsageError("-b and -i go together")
    p = Producer(group, namesrv, send_msg_timeout=timeout, instance_name=f"admin-{os.getpid()}")
    p.start()
    try:
        msg = Message(topic, body.encode("utf-8"), tags=tags, keys=keys)
        if broker_name is not None:
            r = p.send_to_queue(msg, MessageQueue(topic, broker_name, queue_id))
        else:
            r = p.send(msg)
    finally:
        p.shutdown()
    data = {"topic": topic, "brokerName": r.message_queue.brokerName, "queueId": r.message_queue.queueId,
            "queueOffset": r.queue_offset, "sendStatus": r.send_status.value, "msgId": r.msg_id,
            "offsetMsgId": r.offset_msg_id}
    _emit(as_json, data, None, ["#Broker Name", "#QID", "#Send Result", "#MsgId", "#OffsetMsgId"],
          [[data["brokerName"], data["queueId"], data["sendStatus"], data["msgId"], data["offsetMsgId"]]])


@admin.command("consumeMessage")
@_common
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker-name", "broker_name", help="Only this broker.")
@click.option("-i", "--queue-id", "queue_id", type=int, help="Only this queue.")
@click.option("-o", "--offset", type=int, help="Start offset (default: each queue's min offset).")
@click.option("-c", "--count", type=int, default=128, show_default=True, help="At most this many messages.")
@click.option("-s", "--subexpression", "expression", default="*", show_default=True, help="Tag expression.")
def consume_message(namesrv, as_json, timeout, topic, broker_name, queue_id, offset, count, expression) -> None:
    """Read messages with a one-off pull (group TOOLS_CONSUMER; nothing is committed)."""
    from rmq.client.route import mq_sort_key, route_to_subscribe_info
    out = []
    with _Admin(namesrv, timeout) as a:
        route = a.topic_route(topic)
        mqs = sorted((mq for mq in route_to_subscribe_info(topic, route)
                      if (broker_name is None or mq.brokerName == broker_name)
                      and (queue_id is None or mq.queueId == queue_id)), key=mq_sort_key)
        if not mqs:
            raise click.ClickException(f"no queue of {topic} matches")
        for mq in mqs:
            pos = offset if offset is not None else a.pull(mq, 0, 1, expression).min_offset
            rounds = 0
            while len(out) < count and rounds < 10000:
                rounds += 1
                r = a.pull(mq, pos, min(32, count - len(out)), expression)
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
    _emit(False, None, f"{len(out)} message(s) of {topic}",
          ["#Broker", "#QID", "#Offset", "#Tags", "#Keys", "#Msg ID", "#Body"],
          [[m.broker_name, m.queue_id, m.queue_offset, m.properties.get("TAGS", ""), m.properties.get("KEYS", ""),
            m.msg_id, _short_body(m.body)] for m in out])


def _short_body(b: bytes) -> str:
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        s = b[:32].hex() + ("..." if len(b) > 32 else "")
    return s if len(s) <= 60 else s[:57] + "..."
