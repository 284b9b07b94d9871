"""The web console (RocketMQ-Console / Dashboard for this broker): aiohttp on the broker's own asyncio
loop, pages rendered on the server with jinja2, English and Chinese, live updates by server-sent
events, and /metrics (rmq/console/metrics.py). Store scans and puts run in a worker thread, bounded
and paged, so the broker loop never waits for them; changes go through the broker services and,
when aclEnable, only as far as the logged-in account's permissions allow.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import functools
import hmac
import json
import logging
import os
import secrets
import time
from urllib.parse import quote

import jinja2
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..broker.controller import TopicError
from ..broker.retry import dlq_topic, resend_from_dlq, retry_topic
from ..broker.topic_config import PERM_READ, PERM_WRITE
from ..common.acl import PUB, SUB
from ..common.message import (
    PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, SCHEDULE_TOPIC, Message, decode_message_id,
)
from ..store.consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT
from .context import TOPIC_GROUP_SEPARATOR, ConsoleContext
from .i18n import LANGS, translate
from .metrics import make_registry, topic_message_counts

log = logging.getLogger("rmq.console")

#: bounds that keep every page a bounded amount of work
MAX_PAGE = 200               # messages or entries per page
BODY_SHOWN = 64 * 1024       # body bytes rendered in a page (the rest: the download link)
MAX_SEND_BODY = 1024 * 1024  # a test message's body from the form
TIME_SCAN_UNITS = 20_000     # consumequeue units a time-range query reads per queue and page
SESSION_COOKIE = "rmq_console_session"
LANG_COOKIE = "rmq_console_lang"


class ConsoleError(Exception):
    """Bad input from the browser: shown as a page with this one sentence (HTTP `status`)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _ts(ms: int) -> str:
    if not ms or ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _int(req: web.Request, name: str, default: int | None = None, *, lo: int | None = None,
         hi: int | None = None) -> int:
    raw = req.query.get(name, "")
    if raw == "":
        if default is None:
            raise ConsoleError(f"the query parameter {name} is required (a whole number)")
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ConsoleError(f"the query parameter {name} must be a whole number, got {raw[:40]!r}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConsoleError(f"the query parameter {name} must be between {lo} and {hi}, got {v}")
    return v


def _form_int(form, name: str, default: int | None = None, *, lo: int = 0, hi: int = 1 << 62) -> int:
    raw = (form.get(name) or "").strip()
    if raw == "" and default is not None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number, got {raw[:40]!r}") from None
    if not lo <= v <= hi:
        raise ConsoleError(f"{name} must be between {lo} and {hi}, got {v}")
    return v


def _parse_time(raw: str, name: str) -> int:
    """A time from a form or URL: epoch milliseconds, or an ISO date-time (local time)."""
    raw = (raw or "").strip()
    if not raw:
        raise ConsoleError(f"{name} is required (epoch milliseconds or YYYY-MM-DDTHH:MM[:SS])")
    if raw.isdigit():
        return int(raw)
    try:
        return int(dt.datetime.fromisoformat(raw).timestamp() * 1000)
    except ValueError:
        raise ConsoleError(f"{name} must be epoch milliseconds or YYYY-MM-DDTHH:MM[:SS], got {raw[:40]!r}") from None


def render_body(body: bytes, mode: str | None) -> tuple[str, str]:
    """(mode used, text) for a message body: JSON pretty-printed when it parses, text when it is
    UTF-8 without control bytes, else hex; at most BODY_SHOWN bytes."""
    shown = body[:BODY_SHOWN]
    text = None
    try:
        text = shown.decode("utf-8")
        if any(ord(c) < 9 or 13 < ord(c) < 32 for c in text):
            text = None
    except UnicodeDecodeError:
        text = None
    if mode in (None, "", "auto"):
        mode = "text" if text is not None else "hex"
        if text is not None and len(body) <= BODY_SHOWN:
            try:
                json.loads(text)
                mode = "json"
            except ValueError:
                pass
    if mode == "json" and text is not None:
        try:
            return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            mode = "text"
    if mode == "text" and text is not None:
        return "text", text
    return "hex", " ".join(shown[i:i + 16].hex(" ") for i in range(0, len(shown), 16))


class Console:
    """The aiohttp application over one ConsoleContext."""

    def __init__(self, ctx: ConsoleContext):
        self.ctx = ctx
        self.sessions: dict[str, str] = {}  # session token -> access key (aclEnable)
        self.registry = make_registry(ctx)
        here = os.path.dirname(__file__)
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(here, "templates")),
                                      autoescape=True, undefined=jinja2.StrictUndefined)
        self.env.globals["ts"] = _ts
        self.app = web.Application(middlewares=[self._errors, self._auth], client_max_size=2 * MAX_SEND_BODY)
        r = self.app.router
        r.add_get("/", self.index)
        r.add_get("/cluster", self.cluster)
        r.add_get("/topics", self.topics)
        r.add_post("/topics", self.topic_update)
        r.add_get("/topics/{topic}", self.topic_detail)
        r.add_post("/topics/{topic}/delete", self.topic_delete)
        r.add_get("/groups", self.groups)
        r.add_get("/groups/{group}", self.group_detail)
        r.add_post("/groups/{group}/reset", self.group_reset)
        r.add_post("/groups/{group}/resend-dlq", self.group_resend_dlq)
        r.add_get("/messages", self.messages)
        r.add_get("/message", self.message_detail)
        r.add_get("/message/body", self.message_body)
        r.add_post("/messages/send", self.message_send)
        r.add_get("/store", self.store_page)
        r.add_get("/labs", self.labs)
        r.add_get("/labs/{path:.*}", self.lab_file)
        r.add_get("/events", self.events)
        r.add_get("/metrics", self.metrics)
        r.add_get("/login", self.login_page)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        self.runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ plumbing
    async def start(self, host: str, port: int) -> str:
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, backlog=128)
        await site.start()
        self.ctx.sampler.start()
        sock = site._server.sockets[0].getsockname()
        return f"{sock[0]}:{sock[1]}"

    async def close_async(self) -> None:
        await self.ctx.sampler.close()
        for q in list(self.ctx.sampler.listeners):
            q.put_nowait(None)  # ends each open event stream
        if self.runner is not None:
            await self.runner.cleanup()

    async def _thread(self, fn, *args, **kwargs):
        """Runs a store scan or a put in the default executor: the broker loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))

    def lang(self, req: web.Request) -> str:
        lang = req.query.get("lang") or req.cookies.get(LANG_COOKIE) or "en"
        return lang if lang in LANGS else "en"

    def page(self, req: web.Request, template: str, status: int = 200, **values) -> web.Response:
        lang = self.lang(req)
        values.setdefault("title", "")
        body = self.env.get_template(template).render(
            t=lambda s: translate(s, lang), lang=lang, path=req.path, query=req.query_string,
            account=req.get("account"), acl_on=self.ctx.acl() is not None,
            broker=self.ctx.controller.broker_config.brokerName, **values)
        resp = web.Response(text=body, content_type="text/html", status=status)
        if req.query.get("lang") in LANGS:
            resp.set_cookie(LANG_COOKIE, req.query["lang"], max_age=365 * 86400, samesite="Lax")
        return resp

    @web.middleware
    async def _errors(self, req: web.Request, handler):
        try:
            return await handler(req)
        except ConsoleError as exc:
            return self.page(req, "error.html", status=exc.status, message=str(exc))
        except web.HTTPNotFound:
            return self.page(req, "error.html", status=404, message=f"no page at {req.path}")
        except web.HTTPMethodNotAllowed:
            return self.page(req, "error.html", status=405, message=f"{req.method} is not allowed on {req.path}")
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug shows a page, never a traceback; the log has it
            log.exception("console: %s %s failed", req.method, req.path_qs[:200])
            return self.page(req, "error.html", status=500,
                             message="the console failed on this request (the broker log has the details)")

    @web.middleware
    async def _auth(self, req: web.Request, handler):
        acl = self.ctx.acl()
        if acl is None or req.path in ("/login", "/metrics"):
            return await handler(req)
        ak = self.sessions.get(req.cookies.get(SESSION_COOKIE, ""))
        if ak is None or ak not in acl.secrets():
            if req.method == "GET" and req.path != "/events":
                raise web.HTTPFound(f"/login?next={quote(req.path_qs, safe='/')}")
            raise ConsoleError("log in first: aclEnable is on, the console needs an account", 401)
        req["account"] = ak
        return await handler(req)

    # ------------------------------------------------------------------ access control
    def _account(self, req):
        acl = self.ctx.acl()
        if acl is None:
            return None, None
        ak = req.get("account")
        return acl, acl.current().accounts.get(ak or "")

    def can(self, req, resource: str, perm: int, *, group: bool = False) -> bool:
        acl, acct = self._account(req)
        if acl is None:
            return True
        if acct is None:
            return False
        return acct.admin or acl.allowed(acct.access_key, resource, perm, group=group)

    def require(self, req, resource: str, perm: int, *, group: bool = False) -> None:
        if not self.can(req, resource, perm, group=group):
            what = "group" if group else "topic"
            need = "SUB" if perm == SUB else "PUB"
            raise ConsoleError(f"the account {req.get('account')} has no {need} permission on {what} {resource}", 403)

    def require_admin(self, req, action: str) -> None:
        acl, acct = self._account(req)
        if acl is not None and not (acct is not None and acct.admin):
            raise ConsoleError(f"{action} needs an admin account (admin: true in plain_acl.yml); "
                               f"{req.get('account')} is not one", 403)

    async def login_page(self, req):
        return self.page(req, "login.html", next=req.query.get("next", "/cluster"), message="")

    async def login(self, req):
        form = await req.post()
        acl = self.ctx.acl()
        nxt = form.get("next") or "/cluster"
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/cluster"
        if acl is None:
            raise web.HTTPFound(nxt)
        ak, sk = (form.get("accessKey") or "").strip(), form.get("secretKey") or ""
        known = acl.secrets().get(ak)
        if known is None or not hmac.compare_digest(known.encode(), sk.encode()):
            return self.page(req, "login.html", status=401, next=nxt,
                             message="unknown AccessKey or wrong SecretKey")
        token = secrets.token_urlsafe(24)
        if len(self.sessions) > 10_000:
            self.sessions.clear()
        self.sessions[token] = ak
        resp = web.HTTPFound(nxt)
        resp.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="Strict")
        raise resp

    async def logout(self, req):
        self.sessions.pop(req.cookies.get(SESSION_COOKIE, ""), None)
        resp = web.HTTPFound("/login")
        resp.del_cookie(SESSION_COOKIE)
        raise resp

    # ------------------------------------------------------------------ cluster
    async def index(self, req):
        raise web.HTTPFound("/cluster")

    async def cluster(self, req):
        ctrl = self.ctx.controller
        bc, sc = ctrl.broker_config, ctrl.cfg.store
        snap = self.ctx.sampler.snapshot or self.ctx.sampler.sample()
        ha = getattr(ctrl, "ha_service", None)
        ha_info = ha.runtime_info() if ha is not None else None
        repl_lag = (max(0, ctrl.store.commitlog.max_offset - ha.push2slave_max_offset)
                    if ha is not None and not ha.is_slave and ha.connections else None)
        return self.page(req, "cluster.html", title="Cluster", bc=bc, sc=sc, snap=snap, ha=ha_info,
                         repl_lag=repl_lag, listeners=self.ctx.listeners,
                         namesrv=bc.namesrvAddr or self.ctx.listeners.get("namesrv", ""),
                         conns=self.ctx.connection_counts(),
                         thresholds=(sc.diskMaxUsedSpaceRatio / 100, sc.diskSpaceCleanForciblyRatio,
                                     sc.diskSpaceWarningLevelRatio))

    # ------------------------------------------------------------------ topics
    def _topic_rows(self, req):
        ctrl = self.ctx.controller
        counts = topic_message_counts(ctrl.store)
        rows = []
        for name, tc in sorted(list(ctrl.topic_config_manager.table.items())):
            if not self.can(req, name, SUB):
                continue
            rows.append({"name": name, "read": tc.readQueueNums, "write": tc.writeQueueNums,
                         "perm": tc.perm, "messages": counts.get(name, 0), "system": name in _SYSTEM_TOPICS
                         or name in (ctrl.broker_config.brokerName, ctrl.broker_config.brokerClusterName)
                         or name.startswith(("%RETRY%", "%DLQ%", "rmq_sys_"))})
        return rows

    async def topics(self, req):
        return self.page(req, "topics.html", title="Topics", rows=self._topic_rows(req),
                         edit=req.query.get("edit", ""), message=req.query.get("done", ""))

    async def topic_update(self, req):
        form = await req.post()
        name = (form.get("topic") or "").strip()
        self.require_admin(req, "creating or updating a topic")
        write = _form_int(form, "writeQueueNums", 8, lo=1, hi=1024)
        read = _form_int(form, "readQueueNums", write, lo=1, hi=1024)
        perm = _form_int(form, "perm", PERM_READ | PERM_WRITE, lo=0, hi=7)
        try:
            await self._thread(self.ctx.controller.create_topic, name, write, read_queue_nums=read, perm=perm)
        except TopicError as exc:
            raise ConsoleError(f"topic {name!r}: {exc}") from None
        self._topics_changed()
        raise web.HTTPFound(f"/topics?done={quote(name)}")

    def _topics_changed(self) -> None:
        """Tells the NameServers at once (as UPDATE_AND_CREATE_TOPIC does), so clients see the change."""
        for obj in self.ctx.listener_objects.values():
            reg = getattr(obj, "request_register", None)
            if reg is not None:
                try:
                    reg()
                except Exception:  # registration retries on its own schedule
                    log.debug("console: register after a topic change failed", exc_info=True)

    async def topic_delete(self, req):
        name = req.match_info["topic"]
        self.require_admin(req, "deleting a topic")
        if self.ctx.controller.get_topic(name) is None:
            raise ConsoleError(f"topic {name!r} does not exist", 404)
        await self._thread(self.ctx.controller.delete_topic, name)
        self._topics_changed()
        raise web.HTTPFound(f"/topics?done={quote(name)}")

    async def topic_detail(self, req):
        name = req.match_info["topic"]
        tc = self.ctx.controller.get_topic(name)
        if tc is None:
            raise ConsoleError(f"topic {name!r} does not exist", 404)
        self.require(req, name, SUB)
        queues = await self._thread(self._queue_rows, name, max(tc.readQueueNums, tc.writeQueueNums))
        groups = sorted(self.ctx.controller.offset_manager.groups_of_topic(name))
        return self.page(req, "topic.html", title=name, topic=name, tc=tc, queues=queues, groups=groups)

    def _queue_rows(self, topic: str, n: int) -> list[dict]:
        store = self.ctx.controller.store
        rows = []
        for qid in range(n):
            cq = store.get_consume_queue(topic, qid)
            lo, hi = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
            first = store.get_earliest_message_time(topic, qid) if hi > lo else 0
            last = 0
            if hi > lo:
                unit = cq.get_unit(hi - 1)
                if unit is not None:
                    last = store.commitlog.store_timestamp_at(unit[0])
            rows.append({"queue": qid, "min": lo, "max": hi, "count": hi - lo, "first": first, "last": last})
        return rows

    # ------------------------------------------------------------------ groups
    def _groups_with_retry_or_dlq(self) -> set[str]:
        return {name.split("%", 2)[2] for name in list(self.ctx.controller.topic_config_manager.table)
                if name.startswith(("%RETRY%", "%DLQ%"))}

    def _group_table(self) -> dict[str, dict[str, dict[int, int]]]:
        out: dict = {}
        for key, queues in list(self.ctx.controller.offset_manager.offset_table.items()):
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            out.setdefault(group, {})[topic] = dict(queues)
        return out

    async def groups(self, req):
        store = self.ctx.controller.store
        counts = topic_message_counts(store)
        table = self._group_table()
        cm = getattr(self.ctx.controller, "consumer_manager", None)
        kafka = self.ctx.kafka_groups()
        names = set(table) | set(kafka) | (set(cm.table) if cm is not None else set()) | \
            self._groups_with_retry_or_dlq()
        rows = []
        for g in sorted(names):
            if g == "DLQ_RESEND" or not self.can(req, g, SUB, group=True):
                continue
            lag = 0
            for topic, queues in table.get(g, {}).items():
                for qid, off in queues.items():
                    lag += max(0, store.get_max_offset_in_queue(topic, qid) - off)
            members = len(cm.table[g].channels) if cm is not None and g in cm.table else 0
            members += len(kafka.get(g, {}).get("members", []))
            rows.append({"group": g, "topics": sorted(t for t in table.get(g, {}) if not t.startswith("%")),
                         "lag": lag, "tps": round(self.ctx.controller.offset_manager.consume_tps(g), 1),
                         "members": members,
                         "kafka": g in kafka, "retry": counts.get(retry_topic(g), 0),
                         "dlq": counts.get(dlq_topic(g), 0)})
        return self.page(req, "groups.html", title="Groups", rows=rows)

    async def group_detail(self, req):
        g = req.match_info["group"]
        table = self._group_table()
        cm = getattr(self.ctx.controller, "consumer_manager", None)
        kafka = self.ctx.kafka_groups()
        info = cm.table.get(g) if cm is not None else None
        if g not in table and g not in kafka and info is None and g not in self._groups_with_retry_or_dlq():
            raise ConsoleError(f"consumer group {g!r} is unknown to this broker (no offsets, no members)", 404)
        self.require(req, g, SUB, group=True)
        store = self.ctx.controller.store
        queues = []
        for topic, qs in sorted(table.get(g, {}).items()):
            for qid, off in sorted(qs.items()):
                mx = store.get_max_offset_in_queue(topic, qid)
                queues.append({"topic": topic, "queue": qid, "broker": mx, "consumer": off, "lag": max(0, mx - off)})
        members = []
        if info is not None:
            for ch in list(info.channels.values()):
                members.append({"client": ch.client_id, "lang": ch.language, "protocol": "remoting",
                                "host": getattr(ch.channel, "remote_addr", "")})
        for m in kafka.get(g, {}).get("members", []):
            members.append({"client": m["client_id"], "lang": "kafka", "protocol": "kafka", "host": m["client_host"]})
        subs = sorted(info.subscriptions) if info is not None else []
        counts = topic_message_counts(store)
        return self.page(req, "group.html", title=g, group=g, queues=queues, members=members, subs=subs,
                         tps=round(self.ctx.controller.offset_manager.consume_tps(g), 1),
                         retry=counts.get(retry_topic(g), 0), dlq=counts.get(dlq_topic(g), 0),
                         has_dlq=self.ctx.controller.get_topic(dlq_topic(g)) is not None,
                         message=req.query.get("done", ""))

    async def group_reset(self, req):
        g = req.match_info["group"]
        form = await req.post()
        topic = (form.get("topic") or "").strip()
        self.require(req, g, SUB, group=True)
        tc = self.ctx.controller.get_topic(topic)
        if tc is None:
            raise ConsoleError(f"topic {topic!r} does not exist", 404)
        ts = _parse_time(form.get("timestamp", ""), "timestamp")
        store = self.ctx.controller.store

        def reset() -> int:
            n = 0
            for qid in range(max(tc.readQueueNums, tc.writeQueueNums)):
                if store.get_consume_queue(topic, qid) is None:
                    continue
                off = store.get_offset_in_queue_by_time(topic, qid, ts)
                self.ctx.controller.offset_manager.commit_offset(g, topic, qid, off)
                n += 1
            return n

        n = await self._thread(reset)
        raise web.HTTPFound(f"/groups/{quote(g, safe='')}?done={quote(f'reset {n} queue(s)')}")

    async def group_resend_dlq(self, req):
        g = req.match_info["group"]
        self.require(req, g, SUB, group=True)
        self.require(req, dlq_topic(g), SUB)
        if self.ctx.controller.get_topic(dlq_topic(g)) is None:
            raise ConsoleError(f"consumer group {g!r} has no dead-letter topic {dlq_topic(g)}", 404)
        n = await self._thread(resend_from_dlq, self.ctx.controller, g)
        raise web.HTTPFound(f"/groups/{quote(g, safe='')}?done={quote(f'resent {n} message(s)')}")

    # ------------------------------------------------------------------ messages
    def _summary(self, m) -> dict:
        return {"msgId": m.msg_id, "uniqKey": m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                "topic": m.topic, "queue": m.queue_id, "queueOffset": m.queue_offset, "phy": m.commit_log_offset,
                "keys": m.properties.get(PROPERTY_KEYS, ""), "tags": m.properties.get(PROPERTY_TAGS, ""),
                "storeTime": m.store_timestamp, "size": m.store_size,
                "preview": render_body(m.body[:120], "auto")[1][:120]}

    async def messages(self, req):
        q = req.query
        mode = q.get("mode", "")
        results: list = []
        searched = False
        nxt = None
        store = self.ctx.controller.store
        topic = q.get("topic", "").strip()
        if mode:
            searched = True
            if mode != "msgid" or topic:
                if self.ctx.controller.get_topic(topic) is None:
                    raise ConsoleError(f"topic {topic!r} does not exist", 404)
                self.require(req, topic, SUB)
        if mode == "key":
            key = q.get("key", "").strip()
            if not key:
                raise ConsoleError("key is required")
            msgs = await self._thread(store.query_message, topic, key, MAX_PAGE)
            results = [self._summary(m) for m in msgs]
        elif mode == "msgid":
            mid = q.get("msgId", "").strip()
            results = await self._thread(self._by_msg_id, mid, topic)
            for r in results:
                self.require(req, r["topic"], SUB)
        elif mode == "offset":
            qid = _int(req, "queue", lo=0, hi=1 << 20)
            off = _int(req, "offset", 0, lo=0)
            count = _int(req, "count", 20, lo=1, hi=MAX_PAGE)
            results = await self._thread(self._by_offset, topic, qid, off, count)
            if results:
                nxt = {"mode": "offset", "topic": topic, "queue": qid, "offset": results[-1]["queueOffset"] + 1,
                       "count": count}
        elif mode == "time":
            begin = _parse_time(q.get("begin", ""), "begin")
            end = _parse_time(q.get("end", ""), "end") if q.get("end") else int(time.time() * 1000)
            if end < begin:
                raise ConsoleError("end must not be before begin")
            count = _int(req, "count", 50, lo=1, hi=MAX_PAGE)
            results = await self._thread(self._by_time, topic, begin, end, count)
        elif mode:
            raise ConsoleError(f"unknown query mode {mode[:20]!r} (key, msgid, offset or time)")
        topics = [r["name"] for r in self._topic_rows(req) if not r["system"]]
        return self.page(req, "messages.html", title="Messages", results=results, searched=searched, q=q,
                         topics=topics, nxt=nxt, sent=q.get("sent", ""))

    def _by_msg_id(self, mid: str, topic: str) -> list[dict]:
        store = self.ctx.controller.store
        if not mid:
            raise ConsoleError("msgId is required")
        try:
            decode_message_id(mid)
            offset_id = True
        except ValueError:
            offset_id = False
        if offset_id:
            try:
                m = store.look_message_by_id(mid)
            except (ValueError, OSError):
                m = None
            if m is not None:
                return [self._summary(m)]
        if topic:  # a client msgId (UNIQ_KEY) is indexed as a key of its topic
            return [self._summary(m) for m in store.query_message(topic, mid, 4)]
        return []

    def _by_offset(self, topic: str, qid: int, off: int, count: int) -> list[dict]:
        store = self.ctx.controller.store
        cq = store.get_consume_queue(topic, qid)
        if cq is None:
            raise ConsoleError(f"topic {topic!r} has no queue {qid}", 404)
        off = max(off, cq.min_offset)
        units = cq.get_units(off, count) if off < cq.max_offset else b""
        out = []
        for phy, size, _code in CQ_UNIT.iter_unpack(units):
            m = store.look_message_by_offset(phy)
            if m is not None:
                out.append(self._summary(m))
        return out

    def _by_time(self, topic: str, begin: int, end: int, count: int) -> list[dict]:
        store = self.ctx.controller.store
        tc = self.ctx.controller.get_topic(topic)
        out = []
        for qid in range(max(tc.readQueueNums, tc.writeQueueNums)):
            cq = store.get_consume_queue(topic, qid)
            if cq is None or cq.max_offset <= cq.min_offset:
                continue
            off = store.get_offset_in_queue_by_time(topic, qid, begin)
            scanned = 0
            while off < cq.max_offset and scanned < TIME_SCAN_UNITS and len(out) < count:
                units = cq.get_units(off, min(256, TIME_SCAN_UNITS - scanned))
                if not units:
                    break
                stop = False
                for phy, size, _code in CQ_UNIT.iter_unpack(units):
                    scanned += 1
                    off += 1
                    m = store.look_message_by_offset(phy)
                    if m is None:
                        continue
                    if m.store_timestamp > end:
                        stop = True
                        break
                    out.append(self._summary(m))
                    if len(out) >= count:
                        break
                if stop:
                    break
        out.sort(key=lambda r: r["storeTime"])
        return out[:count]

    def _phy(self, req) -> int:
        return _int(req, "offset", lo=0)

    async def message_detail(self, req):
        phy = self._phy(req)
        m = await self._thread(self.ctx.controller.store.look_message_by_offset, phy)
        if m is None:
            raise ConsoleError(f"no message starts at commitlog offset {phy}", 404)
        self.require(req, m.topic, SUB)
        mode, text = render_body(m.body, req.query.get("view"))
        where = await self._thread(self._where, m)
        return self.page(req, "message.html", title=m.msg_id, m=m, s=self._summary(m), mode=mode, text=text,
                         truncated=len(m.body) > BODY_SHOWN, where=where,
                         is_dlq=m.topic.startswith("%DLQ%"))

    def _where(self, m) -> dict:
        """Where a message lives: its commitlog file and position, its consumequeue file and slot,
        and for each key the IndexFile slot (hash % hashSlotNum) whose chain leads to it."""
        from ..store.index import build_key, index_key_hash
        store = self.ctx.controller.store
        cl = store.commitlog
        size = cl.file_size
        out = {"clFile": f"{m.commit_log_offset - m.commit_log_offset % size:020d}",
               "clPos": m.commit_log_offset % size}
        cq = store.get_consume_queue(m.topic, m.queue_id)
        if cq is not None:
            cq_size = cq.mfq.file_size
            byte = m.queue_offset * CQ_STORE_UNIT_SIZE
            out["cqFile"] = (f"consumequeue/{m.topic}/{m.queue_id}/{byte - byte % cq_size:020d}" if cq_size else
                             f"consumequeue/{m.topic}/{m.queue_id}")
            out["cqPos"] = byte % cq_size if cq_size else byte
            unit = cq.get_unit(m.queue_offset)
            out["cqUnit"] = unit
        keys = [k for k in (m.properties.get(PROPERTY_KEYS) or "").split(" ") if k]
        uniq = m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq:
            keys.insert(0, uniq)
        slots = store.config.maxHashSlotNum
        out["index"] = [{"key": build_key(m.topic, k), "slot": index_key_hash(build_key(m.topic, k)) % slots}
                        for k in keys[:16]]
        return out

    async def message_body(self, req):
        phy = self._phy(req)
        m = await self._thread(self.ctx.controller.store.look_message_by_offset, phy)
        if m is None:
            raise ConsoleError(f"no message starts at commitlog offset {phy}", 404)
        self.require(req, m.topic, SUB)
        return web.Response(body=m.body, content_type="application/octet-stream",
                            headers={"Content-Disposition": f'attachment; filename="{m.msg_id}.bin"'})

    async def message_send(self, req):
        form = await req.post()
        topic = (form.get("topic") or "").strip()
        tc = self.ctx.controller.get_topic(topic)
        if tc is None:
            raise ConsoleError(f"topic {topic!r} does not exist", 404)
        self.require(req, topic, PUB)
        body = (form.get("body") or "").encode("utf-8")
        if not body:
            raise ConsoleError("the body is empty: type the message to send")
        if len(body) > MAX_SEND_BODY:
            raise ConsoleError(f"the body is {len(body)} bytes; the console sends at most {MAX_SEND_BODY}")
        props = {"WAIT": "true"}
        for name, prop in (("tags", PROPERTY_TAGS), ("keys", PROPERTY_KEYS)):
            v = (form.get(name) or "").strip()
            if v:
                props[prop] = v
        qid = _form_int(form, "queue", 0, lo=0, hi=max(tc.writeQueueNums, 1) - 1)
        msg = Message(topic, body, queue_id=qid, properties=props, born_timestamp=int(time.time() * 1000))
        res = await self._thread(self.ctx.controller.put_messages, [msg])
        if not res.ok:
            raise ConsoleError(f"the broker refused the message: {res.status.name} {res.remark}".strip(), 503)
        r = res.results[-1] if res.results else None
        raise web.HTTPFound(f"/message?offset={r.wrote_offset}" if r is not None else "/messages?sent=1")

    # ------------------------------------------------------------------ store
    async def store_page(self, req):
        topic = req.query.get("topic", "").strip()
        key = req.query.get("key", "").strip()
        qid = _int(req, "queue", 0, lo=0, hi=1 << 20)
        start = _int(req, "from", -1, lo=-1)
        count = _int(req, "count", 20, lo=1, hi=MAX_PAGE)
        if topic:
            if self.ctx.controller.get_topic(topic) is None and topic != SCHEDULE_TOPIC:
                raise ConsoleError(f"topic {topic!r} does not exist", 404)
            self.require(req, topic, SUB)
        data = await self._thread(self._store_data, topic, qid, start, count, key)
        return self.page(req, "store.html", title="Store", d=data, topic=topic, qid=qid, key=key, count=count,
                         snap=self.ctx.sampler.snapshot or self.ctx.sampler.sample())

    def _store_data(self, topic: str, qid: int, start: int, count: int, key: str) -> dict:
        ctrl = self.ctx.controller
        store = ctrl.store
        cl = store.commitlog
        files = []
        flushed = cl.queue.flushed_offset
        for mf in list(cl.queue.files):
            base = mf.file_from_offset
            wrote = max(0, min(cl.max_offset - base, cl.file_size))
            files.append({"name": f"{base:020d}", "base": base, "wrote": wrote, "size": cl.file_size,
                          "fill": wrote / cl.file_size if cl.file_size else 0,
                          "flushed": max(0, min(flushed - base, cl.file_size))})
        d = {"files": files, "info": store.runtime_info(), "units": [], "queue": None, "chain": None}
        if topic:
            cq = store.get_consume_queue(topic, qid)
            if cq is not None:
                lo, hi = cq.min_offset, cq.max_offset
                begin = max(lo, hi - count) if start < 0 else max(lo, start)
                d["queue"] = {"min": lo, "max": hi, "from": begin}
                units = cq.get_units(begin, count) if begin < hi else b""
                for i, (phy, size, code) in enumerate(CQ_UNIT.iter_unpack(units)):
                    m = store.look_message_by_offset(phy)
                    d["units"].append({"queueOffset": begin + i, "commitLogOffset": phy, "size": size,
                                       "tagsCode": code,
                                       "points_to": (f"{m.topic} q{m.queue_id} QUEUEOFFSET {m.queue_offset}, "
                                                     f"{m.store_size} B, TAGS {m.tags!r}") if m is not None else
                                       "nothing readable (deleted by cleanup, or beyond the log)",
                                       "ok": m is not None and m.queue_offset == begin + i and m.store_size == size})
        if topic and key:
            d["chain"] = self._index_chain(topic, key)
        sched = ctrl.schedule_service
        delays = []
        for q, cq in sorted(list(store.consume_queue_table.get(SCHEDULE_TOPIC, {}).items())):
            done = max(sched.offsets.offset_table.get(q + 1, 0), cq.min_offset)
            unit = cq.get_unit(done) if done < cq.max_offset else None
            delays.append({"level": q + 1, "backlog": max(0, cq.max_offset - done),
                           "delay_ms": store.delay_levels_ms[q] if q < len(store.delay_levels_ms) else None,
                           "next_due": unit[2] if unit is not None else 0})
        d["delays"] = delays
        counts = topic_message_counts(store)
        from ..broker.topic_config import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
        d["half"] = counts.get(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        d["op"] = counts.get(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)
        return d

    def _index_chain(self, topic: str, key: str) -> dict:
        """The IndexFile slot of topic#key and its chain, in the newest index files (at most 4),
        read by rmq.store.inspect.scan_index as `rmq store inspect --key` does."""
        from ..store.inspect import scan_index
        store = self.ctx.controller.store
        names = [f.name for f in list(store.index_service.files)]
        chains = []
        for name in names[-4:]:
            rep = scan_index(store.root, key, topic, 0, store.config.maxHashSlotNum, only_file=name)
            for f in rep["files"]:
                if f.get("chain") is not None:
                    chains.append({"file": f["file"], **f["chain"]})
        return {"files": chains}

    # ------------------------------------------------------------------ labs
    def _labs_root(self) -> str | None:
        root = self.ctx.labs_dir
        return os.path.realpath(root) if root and os.path.isdir(root) else None

    async def labs(self, req):
        root = self._labs_root()
        reports = []
        if root is not None:
            def walk():
                out = []
                for dirpath, _dirs, files in os.walk(root):
                    for f in sorted(files):
                        if f.endswith((".md", ".html", ".json", ".png", ".txt", ".csv", ".svg")):
                            p = os.path.relpath(os.path.join(dirpath, f), root)
                            out.append(p)
                            if len(out) >= 500:
                                return out
                return out
            reports = sorted(await self._thread(walk))
        return self.page(req, "labs.html", title="Labs", reports=reports, root=root or self.ctx.labs_dir or "")

    async def lab_file(self, req):
        root = self._labs_root()
        rel = req.match_info["path"]
        path = os.path.realpath(os.path.join(root, rel)) if root else ""
        if root is None or not path.startswith(root + os.sep) or not os.path.isfile(path):
            raise ConsoleError(f"no lab report at {rel[:100]!r}", 404)
        if path.endswith((".png", ".svg", ".html", ".json", ".csv")):
            return web.FileResponse(path)
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
        return self.page(req, "lab_file.html", title=rel, name=rel, text=text)

    # ------------------------------------------------------------------ live updates, metrics
    async def events(self, req):
        """Server-sent events: one JSON snapshot per second (RateSampler). A slow reader loses old
        snapshots (its queue holds 2), it never slows the sampler or the broker."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(req)
        q: asyncio.Queue = asyncio.Queue(maxsize=2)
        sampler = self.ctx.sampler
        if len(sampler.listeners) >= 256:
            await resp.write(b"event: busy\ndata: {}\n\n")
            return resp
        sampler.listeners.add(q)
        try:
            if sampler.snapshot:
                await resp.write(f"data: {json.dumps(sampler.snapshot)}\n\n".encode())
            while True:
                snap = await q.get()
                if snap is None:
                    break
                await resp.write(f"data: {json.dumps(snap)}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            sampler.listeners.discard(q)
        return resp

    async def metrics(self, req):
        body = await self._thread(generate_latest, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


_SYSTEM_TOPICS = {"TBW102", SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                  "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest", "DefaultCluster"}


async def start_console(ctx: ConsoleContext, host: str, port: int) -> tuple[Console, str]:
    """Binds the console (port 0 = ephemeral); returns (console, "host:port")."""
    console = Console(ctx)
    addr = await console.start(host, port)
    return console, addr


__all__ = ["Console", "ConsoleError", "render_body", "start_console"]
