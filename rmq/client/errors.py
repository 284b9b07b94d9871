"""Exceptions raised by the RocketMQ client (SPEC §3, §4): remoting failures, broker refusals
and client-side misuse, mirroring RemotingException / MQBrokerException / MQClientException."""
from __future__ import annotations


class MQClientError(Exception):
    """Client-side failure (MQClientException): bad argument, no route, not started, retries used up.

    ``response_code`` carries the broker/NameServer code or a ClientErrorCode when one applies.
    """

    def __init__(self, message: str, response_code: int | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.response_code = response_code
        self.cause = cause


class MQBrokerError(MQClientError):
    """A broker or NameServer answered with a non-success code (MQBrokerException)."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        from rmq.remoting import response_code_name
        where = f" from {addr}" if addr else ""
        super().__init__(f"CODE: {code} ({response_code_name(code)}) DESC: {remark or ''}{where}", code)
        self.code = code
        self.remark = remark
        self.addr = addr


class RemotingError(MQClientError):
    """Transport failure talking to ``addr`` (RemotingException)."""

    def __init__(self, message: str, addr: str | None = None, cause: BaseException | None = None) -> None:
        super().__init__(message, cause=cause)
        self.addr = addr


class RemotingConnectError(RemotingError):
    """Could not open (or lost) the TCP connection to ``addr``."""


class RemotingTimeoutError(RemotingError):
    """No response from ``addr`` within the request timeout."""


class RemotingSendRequestError(RemotingError):
    """The request could not be written to the connection."""


class ClientErrorCode:
    """ClientErrorCode.java: codes a client sets on an MQClientError it builds itself."""
    CONNECT_BROKER_EXCEPTION = 10001
    ACCESS_BROKER_TIMEOUT = 10002
    BROKER_NOT_EXIST_EXCEPTION = 10003
    NO_NAME_SERVER_EXCEPTION = 10004
    NOT_FOUND_TOPIC_EXCEPTION = 10005
    REQUEST_TIMEOUT_EXCEPTION = 10006
    CREATE_REPLY_MESSAGE_EXCEPTION = 10007


__all__ = ["MQClientError", "MQBrokerError", "RemotingError", "RemotingConnectError",
           "RemotingTimeoutError", "RemotingSendRequestError", "ClientErrorCode"]
