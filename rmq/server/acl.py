"""PlainAccessValidator of RocketMQ 4.x on the broker's remoting listener (aclEnable, aclFile): reads
plain_acl.yml (reloaded when it changes), maps each request code to the topics and groups it needs
(PlainAccessValidator.parse) and refuses with NO_PERMISSION before any processor runs."""
from __future__ import annotations

import logging
import os
import threading
import time

from rmq.common.acl import (ACCESS_KEY, PUB, SIGNATURE, SUB, AccessRequest, AclConfigError, AclDenied,
                            PlainAclConfig, combine_request_content, parse_plain_acl, retry_topic)
from rmq.common.log_limit import RateLimitedLog, host_of, reason_of
from rmq.remoting import HeartbeatData, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("rmq.acl")
# one client retrying with a wrong secret must not write a line per request (issue 22)
refusal_log = RateLimitedLog(log, "refusals", prefix="ACL: ")

#: how often (seconds) the file's mtime is looked at (RocketMQ's FileWatchService checks every 500 ms)
RELOAD_CHECK_S = 1.0

_SEND_CODES = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
               RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2}


def load_plain_acl(path: str) -> PlainAclConfig:
    """Read and parse plain_acl.yml; AclConfigError names the file (and line) when it cannot be used."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise AclConfigError(f"{path}: no such file (aclEnable is true; set aclFile to your plain_acl.yml)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"{path}: cannot read: {exc}") from None
    return parse_plain_acl(text, path)


def acl_reason(reason: str) -> str:
    """The kind of an AclDenied message, without the access key or resource the client sent
    ("Check signature failed for accessKey=X" -> "Check signature failed")."""
    return reason_of(reason.split(" for ", 1)[0].split(":", 1)[0])


class PlainAccessValidator:
    """One per broker process (shared by the remoting and Kafka listeners: acl_validator())."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.config = load_plain_acl(path)
        self._mtime = self._stat()
        self._next_check = time.monotonic() + RELOAD_CHECK_S
        self._lock = threading.Lock()
        self.refused = 0
        log.info("ACL enabled: %s (%d accounts, %d global white addresses)", path,
                 len(self.config.accounts), len(self.config.global_white))

    def _stat(self):
        try:
            st = os.stat(self.path)
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    def current(self) -> PlainAclConfig:
        """The accounts, reloaded when the file changed; a file that became bad keeps the last good one."""
        now = time.monotonic()
        if now >= self._next_check:
            with self._lock:
                self._next_check = now + RELOAD_CHECK_S
                st = self._stat()
                if st is not None and st != self._mtime:
                    self._mtime = st
                    try:
                        self.config = load_plain_acl(self.path)
                        log.info("ACL reloaded: %s (%d accounts)", self.path, len(self.config.accounts))
                    except AclConfigError as exc:
                        log.error("ACL file changed but cannot be used, keeping the previous one: %s", exc)
        return self.config

    # ------------------------------------------------------------------ remoting
    @staticmethod
    def parse(req: RemotingCommand, remote_ip: str) -> AccessRequest:
        """PlainAccessValidator.parse: credentials, signed content, and the resources of the request code."""
        ext = req.ext_fields or {}
        ar = AccessRequest(remote_ip=remote_ip, request_code=req.code)
        if not ext:
            return ar
        ar.access_key = ext.get(ACCESS_KEY)
        ar.signature = ext.get(SIGNATURE)
        ar.content = combine_request_content(ext, req.body)
        code = req.code
        if code in _SEND_CODES:
            topic = ext.get("topic", ext.get("b"))
            group = ext.get("producerGroup", ext.get("a"))
            if topic and topic.startswith("%RETRY%"):
                ar.add(retry_topic(group) if group else topic, SUB)
            else:
                ar.add(topic, PUB)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            ar.add(ext.get("originTopic"), PUB)
            if ext.get("group"):
                ar.add(retry_topic(ext["group"]), SUB)
        elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
            ar.add(ext.get("topic"), SUB)
            if ext.get("consumerGroup"):
                ar.add(retry_topic(ext["consumerGroup"]), SUB)
        elif code == RequestCode.QUERY_MESSAGE:
            ar.add(ext.get("topic"), SUB)
        elif code == RequestCode.HEART_BEAT:
            try:
                hb = HeartbeatData.decode(req.body)
            except Exception as exc:  # noqa: BLE001 - the processor answers the bad body itself
                raise AclDenied(f"heartbeat body cannot be read: {exc}") from None
            for cd in hb.consumerDataSet:
                ar.add(retry_topic(cd.groupName), SUB)
                for sd in cd.subscriptionDataSet:
                    ar.add(sd.topic, SUB)
        elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
            if ext.get("consumerGroup"):
                ar.add(retry_topic(ext["consumerGroup"]), SUB)
        elif code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
            if ext.get("consumerGroup"):
                ar.add(retry_topic(ext["consumerGroup"]), SUB)
            ar.add(ext.get("topic"), SUB)
        return ar

    def check(self, conn, req: RemotingCommand) -> RemotingCommand | None:
        """The Dispatcher's request_check: None to go on, or the NO_PERMISSION response."""
        ip = conn.remote_host[0] if getattr(conn, "remote_host", None) else None
        try:
            cfg = self.current()
            ar = self.parse(req, ip)
            cfg.validate(ar)
            return None
        except AclDenied as exc:
            reason = str(exc)
        self.refused += 1
        refusal_log.warning(host_of(conn), acl_reason(reason), "ACL refused %s from %s (accessKey=%s): %s",
                            _code_name(req.code), conn.remote_addr, (req.ext_fields or {}).get(ACCESS_KEY), reason)
        return RemotingCommand.response_to(req, ResponseCode.NO_PERMISSION, f"[ACL] {reason}")

    # ------------------------------------------------------------------ other listeners (Kafka)
    def secrets(self) -> dict[str, str]:
        return {a.access_key: a.secret_key for a in self.current().accounts.values()}

    def is_global_white(self, ip: str | None) -> bool:
        return self.current().is_global_white(ip)

    def allowed(self, access_key: str | None, resource: str, perm: int, *, group: bool = False) -> bool:
        return self.current().allowed(access_key, resource, perm, group=group)


def _code_name(code: int) -> str:
    from rmq.remoting import request_code_name
    return request_code_name(code)


def acl_validator(controller) -> PlainAccessValidator | None:
    """The broker process's validator when aclEnable (created once, kept on the controller)."""
    cfg = controller.broker_config
    if not getattr(cfg, "aclEnable", False):
        return None
    v = getattr(controller, "_plain_acl_validator", None)
    if v is None:
        v = PlainAccessValidator(cfg.aclFile)
        controller._plain_acl_validator = v
    return v


__all__ = ["PlainAccessValidator", "acl_validator", "load_plain_acl", "AclConfigError"]
