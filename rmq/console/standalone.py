"""`rmq console -n NAMESRV [--kafka BOOTSTRAP]`: the console for a whole cluster, in its own process,
as RocketMQ Dashboard runs beside a cluster. It holds no store: every page asks the NameServers and
brokers over the remoting protocol (rmq.client.admin.AsyncMQAdmin, the requests `rmq admin` sends)
and, with --kafka, the Kafka listener through kafka-python's admin client. Pages: cluster (every
broker with its runtime figures), topics (list, per-queue offsets, create on a cluster, delete),
a group's progress and consume TPS with a DLQ resend, and messages by key or msgId. The store, labs
and /metrics pages live in each broker's own console (`rmq up`).
"""
from __future__ import annotations

import asyncio
import logging
import os
from urllib.parse import quote

import jinja2
from aiohttp import web

from ..client.admin import AsyncMQAdmin
from ..client.errors import MQClientError
from .app import ConsoleError, _form_int, _ts, render_body
from .i18n import LANGS, translate

log = logging.getLogger("rmq.console")

NAV = [("/cluster", "Cluster"), ("/topics", "Topics"), ("/groups", "Groups"), ("/messages", "Messages")]
#: runtime-info keys shown per broker on the cluster page
RUNTIME_KEYS = ("putTps", "getTransferedTps", "commitLogMaxOffset", "dispatchBehindBytes", "commitLogDiskRatio",
                "brokerVersionDesc", "msgPutTotalTodayNow", "msgGetTotalTodayNow")


class StandaloneConsole:
    def __init__(self, namesrv: str, kafka: str | None = None, timeout: float = 5.0):
        self.namesrv = namesrv
        self.kafka = kafka
        self.timeout = timeout
        self.admin: AsyncMQAdmin | None = None
        here = os.path.dirname(__file__)
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(here, "templates")),
                                      autoescape=True, undefined=jinja2.StrictUndefined)
        self.env.globals["ts"] = _ts
        self.app = web.Application(middlewares=[self._errors])
        r = self.app.router
        r.add_get("/", lambda req: self._redirect("/cluster"))
        r.add_get("/cluster", self.cluster)
        r.add_get("/topics", self.topics)
        r.add_post("/topics", self.topic_create)
        r.add_get("/topics/{topic}", self.topic_detail)
        r.add_post("/topics/{topic}/delete", self.topic_delete)
        r.add_get("/groups", self.groups)
        r.add_post("/groups/{group}/resend-dlq", self.resend_dlq)
        r.add_get("/messages", self.messages)
        self.runner: web.AppRunner | None = None

    async def _redirect(self, where: str):
        raise web.HTTPFound(where)

    async def start(self, host: str, port: int) -> str:
        self.admin = AsyncMQAdmin(self.namesrv, timeout=self.timeout)
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        sock = site._server.sockets[0].getsockname()
        return f"{sock[0]}:{sock[1]}"

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.admin is not None:
            await self.admin.close()

    def page(self, req, template: str, status: int = 200, **values) -> web.Response:
        lang = req.query.get("lang") or req.cookies.get("rmq_console_lang") or "en"
        lang = lang if lang in LANGS else "en"
        values.setdefault("title", "")
        body = self.env.get_template(template).render(
            t=lambda s: translate(s, lang), lang=lang, path=req.path, query=req.query_string, account=None,
            acl_on=False, broker=f"NameServer {self.namesrv}", nav=NAV, live=False, **values)
        resp = web.Response(text=body, content_type="text/html", status=status)
        if req.query.get("lang") in LANGS:
            resp.set_cookie("rmq_console_lang", req.query["lang"], max_age=365 * 86400, samesite="Lax")
        return resp

    @web.middleware
    async def _errors(self, req, handler):
        try:
            return await handler(req)
        except ConsoleError as exc:
            return self.page(req, "error.html", status=exc.status, message=str(exc))
        except (MQClientError, asyncio.TimeoutError, OSError) as exc:
            return self.page(req, "error.html", status=502, message=f"the cluster did not answer: {exc}")
        except web.HTTPNotFound:
            return self.page(req, "error.html", status=404, message=f"no page at {req.path}")
        except web.HTTPException:
            raise
        except Exception:
            log.exception("console: %s %s failed", req.method, req.path_qs[:200])
            return self.page(req, "error.html", status=500, message="the console failed on this request (see its log)")

    # ------------------------------------------------------------------ pages
    async def cluster(self, req):
        ci = await self.admin.cluster_info()
        rows = []
        for cluster, names in sorted(ci.clusterAddrTable.items()):
            for name in sorted(names):
                bd = ci.brokerAddrTable.get(name)
                for bid, addr in sorted((bd.brokerAddrs if bd else {}).items()):
                    try:
                        info = await self.admin.broker_runtime_info(addr)
                    except (MQClientError, asyncio.TimeoutError, OSError) as exc:
                        info = {"error": str(exc)}
                    rows.append({"cluster": cluster, "name": name, "id": bid, "addr": addr,
                                 "role": "master" if int(bid) == 0 else "slave",
                                 "info": {k: info[k] for k in RUNTIME_KEYS + ("error",) if k in info}})
        return self.page(req, "sa_cluster.html", title="Cluster", rows=rows, namesrv=self.namesrv, kafka=self.kafka)

    async def topics(self, req):
        topics = sorted(await self.admin.topic_list())
        ci = await self.admin.cluster_info()
        return self.page(req, "sa_topics.html", title="Topics", topics=topics, clusters=sorted(ci.clusterAddrTable),
                         message=req.query.get("done", ""))

    async def topic_create(self, req):
        form = await req.post()
        topic = (form.get("topic") or "").strip()
        cluster = (form.get("cluster") or "").strip()
        if not topic:
            raise ConsoleError("the topic name is required")
        write = _form_int(form, "writeQueueNums", 8, lo=1, hi=1024)
        read = _form_int(form, "readQueueNums", write, lo=1, hi=1024)
        perm = _form_int(form, "perm", 6, lo=0, hi=7)
        try:
            await self.admin.create_topic(topic, cluster=cluster, read_queue_nums=read, write_queue_nums=write,
                                          perm=perm)
        except MQClientError as exc:
            raise ConsoleError(f"topic {topic!r}: {exc}") from None
        raise web.HTTPFound(f"/topics?done={quote(topic)}")

    async def topic_detail(self, req):
        topic = req.match_info["topic"]
        try:
            rows = await self.admin.topic_status(topic)
        except MQClientError as exc:
            raise ConsoleError(f"topic {topic!r}: {exc}", 404) from None
        return self.page(req, "sa_topic.html", title=topic, topic=topic, rows=rows)

    async def topic_delete(self, req):
        topic = req.match_info["topic"]
        form = await req.post()
        cluster = (form.get("cluster") or "").strip()
        try:
            await self.admin.delete_topic(topic, cluster)
        except MQClientError as exc:
            raise ConsoleError(f"topic {topic!r}: {exc}") from None
        raise web.HTTPFound(f"/topics?done={quote(topic)}")

    async def groups(self, req):
        group = req.query.get("group", "").strip()
        topic = req.query.get("topic", "").strip()
        rows, tps, kafka_groups, kafka_offsets = [], 0.0, [], []
        if group:
            try:
                rows, tps = await self.admin.consumer_progress(group, topic or None)
            except MQClientError as exc:
                raise ConsoleError(f"consumer group {group!r}: {exc}", 404) from None
        if self.kafka:
            kafka_groups, kafka_offsets = await asyncio.get_running_loop().run_in_executor(
                None, self._kafka_groups, group)
        return self.page(req, "sa_groups.html", title="Groups", group=group, topic=topic, rows=rows, tps=round(tps, 2),
                         kafka_groups=kafka_groups, kafka_offsets=kafka_offsets, message=req.query.get("done", ""))

    def _kafka_groups(self, group: str):
        """Kafka groups (and `group`'s committed offsets) through kafka-python's admin client."""
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=self.kafka, request_timeout_ms=int(self.timeout * 1000),
                                 client_id="rmq-console")
        try:
            # kafka-python 2.x: list_consumer_groups -> [(name, protocol type)], list_consumer_group_offsets;
            # 3.x: list_groups -> [group dicts], list_group_offsets -> {group: {tp: offset}}
            if hasattr(admin, "list_consumer_groups"):
                groups = sorted(g[0] for g in admin.list_consumer_groups())
            else:
                groups = sorted(g.get("group_id") or g.get("group") or "?" for g in admin.list_groups())
            offsets = []
            if group and group in groups:
                if hasattr(admin, "list_consumer_group_offsets"):
                    table = admin.list_consumer_group_offsets(group)
                else:
                    table = admin.list_group_offsets(group).get(group, {})
                for tp, om in sorted(table.items()):
                    offsets.append({"topic": tp.topic, "partition": tp.partition,
                                    "offset": getattr(om, "offset", om)})
            return groups, offsets
        finally:
            admin.close()

    async def resend_dlq(self, req):
        group = req.match_info["group"]
        try:
            results = await self.admin.resend_dlq(group)
        except MQClientError as exc:
            raise ConsoleError(f"consumer group {group!r}: {exc}") from None
        n = sum(int(r.get("resent", 0)) for r in results)
        raise web.HTTPFound(f"/groups?group={quote(group)}&done={quote(f'resent {n} message(s)')}")

    async def messages(self, req):
        q = req.query
        mode = q.get("mode", "")
        results = []
        if mode == "key":
            topic, key = q.get("topic", "").strip(), q.get("key", "").strip()
            if not topic or not key:
                raise ConsoleError("topic and key are required")
            try:
                results = await self.admin.query_msg_by_key(topic, key, 64)
            except MQClientError as exc:
                raise ConsoleError(f"topic {topic!r}: {exc}", 404) from None
        elif mode == "msgid":
            mid = q.get("msgId", "").strip()
            if not mid:
                raise ConsoleError("msgId is required")
            try:
                results = [await self.admin.query_msg_by_id(mid, q.get("topic", "").strip() or None)]
            except (MQClientError, ValueError) as exc:
                raise ConsoleError(f"message {mid[:60]!r}: {exc}", 404) from None
        elif mode:
            raise ConsoleError(f"unknown query mode {mode[:20]!r} (key or msgid)")
        shown = [{"m": m, "body": render_body(m.body, "auto")} for m in results]
        return self.page(req, "sa_messages.html", title="Messages", results=shown, searched=bool(mode), q=q)


async def serve(namesrv: str, kafka: str | None, host: str, port: int, ready=None) -> None:
    """Runs the standalone console until cancelled (SIGINT/SIGTERM end `rmq console`)."""
    console = StandaloneConsole(namesrv, kafka)
    addr = await console.start(host, port)
    print(f" console: http://{addr}/ (NameServer {namesrv}{', Kafka ' + kafka if kafka else ''}); Ctrl-C stops",
          flush=True)
    if ready is not None:
        ready(addr)
    try:
        await asyncio.Event().wait()
    finally:
        await console.close()
