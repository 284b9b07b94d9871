"""The web console and /metrics (rmq/console, docs/console.md) against one real `rmq up` with its
console on an ephemeral port: /metrics after producing with kafka-python and pulling with rmq's own
PullConsumer; bad input over plain HTTP; and, in headless Chromium driven by selenium, what a user
checks on the pages (skipped, with the reason, where Debian's chromium / chromium-driver are missing).

One broker and one browser for the whole module. RMQ_CONSOLE_SCREENSHOTS=DIR saves the pages'
screenshots there (docs/console/ holds the ones the docs show)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.kafka_fixtures import start_broker, unique

pytest.importorskip("aiohttp")
prom_parser = pytest.importorskip("prometheus_client.parser")

WAIT = 20.0  # bound of every wait for a condition


def wait_for(cond, what: str, timeout: float = WAIT):
    """cond() until it is true (bounded); a browser read that races a page load counts as not yet."""
    try:
        from selenium.common.exceptions import WebDriverException as races
    except ImportError:
        races = ()
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except races as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("console")), {"consolePort": -1, "maxHashSlotNum": 1000,
                                                                "maxIndexNum": 4000})
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def base(broker) -> str:
    return "http://" + broker.listeners["console"]


def http(url: str, data: dict | None = None, *, follow: bool = True) -> tuple[int, str]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect())
    try:
        with opener.open(urllib.request.Request(url, data=body), timeout=30) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def scrape(base: str) -> dict:
    """{(name, frozenset(labels)): value} of every sample /metrics shows."""
    status, text = http(base + "/metrics")
    assert status == 200
    out = {}
    for fam in prom_parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(metrics: dict, name: str, **labels) -> float | None:
    want = set(labels.items())
    for (n, ls), v in metrics.items():
        if n == name and want <= set(ls):
            return v
    return None


def create_topic(base: str, topic: str, queues: int) -> None:
    status, text = http(base + "/topics", {"topic": topic, "writeQueueNums": queues, "readQueueNums": queues,
                                           "perm": 6})
    assert status == 200 and topic in text, text[-500:]


@pytest.fixture(scope="module")
def produced(broker, base):
    """N messages produced with kafka-python to a 1-queue topic created through the console, M of
    them pulled and committed by rmq's PullConsumer in group G."""
    kafka = pytest.importorskip("kafka")
    from rmq.client import PullConsumer
    from rmq.remoting import MessageQueue
    topic, group = unique("ConsoleMetrics"), unique("cg_console")
    create_topic(base, topic, 1)
    n, m = 25, 10
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for i in range(n):
            p.send(topic, key=f"k{i}".encode(), value=json.dumps({"order": i}).encode(), partition=0)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)
    c = PullConsumer(group, broker.listeners["namesrv"])
    c.start()
    try:
        mq = MessageQueue(topic, "broker-a", 0)
        r = c.pull(mq, "*", 0, m)
        assert len(r.msg_found_list) == m
        c.update_consume_offset(mq, m)
        c.commit_offsets()
    finally:
        c.shutdown()
    wait_for(lambda: sample(scrape(base), "rocketmq_consumer_lag_messages", topic=topic,
                            consumer_group=group) == n - m, "the committed offset to reach the broker")
    return {"topic": topic, "group": group, "n": n, "m": m}


# ---------------------------------------------------------------------------------------- metrics
def test_metrics_match_what_was_produced_and_consumed(broker, base, produced):
    from rmq.store.inspect import inspect_store
    topic, group, n, m = produced["topic"], produced["group"], produced["n"], produced["m"]
    got = scrape(base)
    assert sample(got, "rocketmq_messages_in_total", topic=topic) == n
    assert sample(got, "rocketmq_messages_out_total", topic=topic) == m
    assert sample(got, "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group, queue_id="0") == n - m
    # bytes in: the stored units' sizes, as `rmq store inspect` reads them from the files
    rep = inspect_store(broker.data_dir, "consumequeue", limit=None, topic=topic)
    sizes = sum(u["size"] for q in rep["consumequeue"]["queues"] for u in q["units"])
    assert sizes > n * len('{"order": 0}')
    assert sample(got, "rocketmq_throughput_in_total", topic=topic) == sizes
    # the Kafka produce requests and their latency, by API and version
    produce_reqs = sum(v for (name, ls), v in got.items() if name == "kafka_requests_total"
                       and ("api", "Produce") in ls)
    assert produce_reqs >= 1
    lat = sum(v for (name, ls), v in got.items() if name == "kafka_request_latency_seconds_count"
              and ("api", "Produce") in ls)
    assert lat == produce_reqs
    assert sample(got, "rocketmq_put_latency_seconds_count") >= 1  # one put call in 16 is timed, the first one included
    assert sample(got, "rocketmq_connections", protocol="kafka") is not None
    assert sample(got, "rocketmq_storage_dispatch_behind_bytes") is not None


def test_every_metric_is_documented_and_the_dashboard_uses_documented_ones(base, produced):
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "console.md"), encoding="utf-8") as fh:
        documented = set(re.findall(r"^\| `((?:rocketmq|kafka)_[a-z_]+)` \|", fh.read(), re.M))
    with open(os.path.join(root, "docs", "zh", "console.md"), encoding="utf-8") as fh:
        assert set(re.findall(r"^\| `((?:rocketmq|kafka)_[a-z_]+)` \|", fh.read(), re.M)) == documented
    scraped = {re.sub(r"_(bucket|count|sum|created)$", "", name) for name, _ in scrape(base)}
    scraped = {n for n in scraped if n.startswith(("rocketmq_", "kafka_"))}
    assert scraped <= documented, f"undocumented: {sorted(scraped - documented)}"
    with open(os.path.join(root, "docs", "console", "grafana-dashboard.json"), encoding="utf-8") as fh:
        dash = json.load(fh)
    used = {re.sub(r"_bucket$", "", m) for p in dash["panels"] for t in p["targets"]
            for m in re.findall(r"\b((?:rocketmq|kafka)_[a-z_]+)", t["expr"])}
    assert used and used <= documented, f"the dashboard uses unknown metrics: {sorted(used - documented)}"


# ---------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("path, status, words", [
    ("/topics/NoSuchTopic", 404, "does not exist"),
    ("/groups/no_such_group", 404, "unknown to this broker"),
    ("/messages?mode=offset&topic=TBW102&queue=abc", 400, "whole number"),
    ("/messages?mode=time&topic=TBW102&begin=yesterday", 400, "epoch milliseconds"),
    ("/messages?mode=sideways&topic=TBW102", 400, "unknown query mode"),
    ("/message?offset=-5", 400, "between"),
    ("/message?offset=999999999", 404, "no message starts"),
    ("/store?topic=TBW102&count=100000", 400, "between"),
    ("/labs/../../etc/passwd", 404, "no lab report"),
    ("/no/such/page", 404, "no page"),
    ("/groups/%25DLQ%25nobody", 404, "unknown to this broker"),
])
def test_bad_input_gets_a_clear_page(base, path, status, words):
    code, text = http(base + path)
    assert code == status
    assert words in text and "Traceback" not in text


def test_send_form_refuses_empty_huge_and_unknown(base, produced):
    code, text = http(base + "/messages/send", {"topic": produced["topic"], "body": ""})
    assert code == 400 and "empty" in text
    code, text = http(base + "/messages/send", {"topic": produced["topic"], "body": "x" * (1024 * 1024 + 1)})
    assert code == 400 and "at most" in text
    code, text = http(base + "/messages/send", {"topic": "NoSuchTopic", "body": "x"})
    assert code == 404 and "does not exist" in text


def test_binary_body_is_shown_as_hex_and_downloadable(broker, base):
    kafka = pytest.importorskip("kafka")
    topic = unique("ConsoleBinary")
    create_topic(base, topic, 1)
    body = bytes(range(256)) * 4
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        p.send(topic, value=body, partition=0).get(timeout=30)
    finally:
        p.close(timeout=10)
    code, text = http(base + f"/messages?mode=offset&topic={topic}&queue=0&offset=0")
    assert code == 200
    phy = int(text.split("/message?offset=")[1].split('"')[0])
    code, text = http(base + f"/message?offset={phy}")
    assert code == 200 and "(hex)" in text and "00 01 02 03" in text
    with urllib.request.urlopen(base + f"/message/body?offset={phy}", timeout=30) as r:
        assert r.read() == body


def test_events_stream_sends_live_snapshots(base):
    with urllib.request.urlopen(base + "/events", timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        line = b""
        for _ in range(50):
            line = r.readline()
            if line.startswith(b"data: "):
                break
        snap = json.loads(line[len(b"data: "):])
        assert "commitLogMaxOffset" in snap and "putTps" in snap


# ---------------------------------------------------------------------------------------- browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver")
                                                else None)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("headless Chromium is not installed (Debian packages chromium and chromium-driver; "
                    "`make venv` installs them when run as root)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,900", "--disable-extensions"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()


def shot(drv, name: str) -> None:
    out = os.environ.get("RMQ_CONSOLE_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
        drv.save_screenshot(os.path.join(out, name))


def by_id(drv, ident: str):
    from selenium.webdriver.common.by import By
    return drv.find_element(By.ID, ident)


def click_and_load(drv, ident: str) -> None:
    """Clicks a button or link that loads a new page and waits (bounded) until it has."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait
    old = drv.find_element(By.TAG_NAME, "html")
    by_id(drv, ident).click()
    WebDriverWait(drv, WAIT).until(ec.staleness_of(old))
    WebDriverWait(drv, WAIT).until(lambda d: d.execute_script("return document.readyState") == "complete")


def test_browser_produced_key_is_found_and_body_shown(broker, base, browser, produced):
    from rmq.client import Message, Producer
    topic = produced["topic"]
    key = unique("order")
    body = json.dumps({"orderId": key, "amount": 42})
    p = Producer(unique("pg_console"), broker.listeners["namesrv"])
    p.start()
    try:
        p.send(Message(topic, body.encode(), tags="TagA", keys=key))
    finally:
        p.shutdown()
    from selenium.webdriver.common.by import By

    def query_by_key():
        # the IndexFile entry is written when the message is dispatched (the reput thread): the
        # user asks again until it shows, as they would
        browser.get(base + "/messages?lang=en")
        by_id(browser, "key-topic").send_keys(topic)
        by_id(browser, "key-key").send_keys(key)
        click_and_load(browser, "key-query")
        return browser.find_elements(By.CLASS_NAME, "msg-link")
    links = wait_for(query_by_key, f"the key {key} to be found")
    shot(browser, "messages.png")
    assert len(links) == 1
    browser.get(links[0].get_attribute("href"))
    assert by_id(browser, "msg-keys").text == key
    shown = by_id(browser, "body").text
    assert json.loads(shown) == json.loads(body)
    shot(browser, "message.png")


def test_browser_lag_falls_to_zero_after_consuming(broker, base, browser, produced):
    from rmq.client import PullConsumer
    from rmq.remoting import MessageQueue
    topic, group = produced["topic"], produced["group"]
    browser.get(base + f"/groups/{group}")
    assert int(by_id(browser, "total-lag").text) > 0
    c = PullConsumer(group, broker.listeners["namesrv"])
    c.start()
    try:
        mq = MessageQueue(topic, "broker-a", 0)
        offset = c.fetch_consume_offset(mq)
        for _ in range(100):
            r = c.pull(mq, "*", offset, 32)
            if not r.msg_found_list:
                break
            offset = r.next_begin_offset
        c.update_consume_offset(mq, offset)
        c.commit_offsets()
    finally:
        c.shutdown()

    def lag_shown():
        browser.get(base + f"/groups/{group}")
        return by_id(browser, "total-lag").text == "0"
    wait_for(lag_shown, "the group page to show lag 0")
    shot(browser, "group.png")


def test_browser_dlq_resend_moves_the_message(broker, base, browser, produced):
    from rmq.client import Message, Producer, PullConsumer
    from rmq.remoting import MessageQueue
    topic = produced["topic"]
    group = unique("cg_dlq")
    p = Producer(unique("pg_dlq"), broker.listeners["namesrv"])
    p.start()
    try:
        p.send(Message(topic, b"poison", keys="poison-pill"))
    finally:
        p.shutdown()
    c = PullConsumer(group, broker.listeners["namesrv"])
    c.start()
    try:
        mq = MessageQueue(topic, "broker-a", 0)
        found = None
        offset = 0
        for _ in range(100):
            r = c.pull(mq, "*", offset, 32)
            found = next((x for x in r.msg_found_list if x.body == b"poison"), found)
            if not r.msg_found_list:
                break
            offset = r.next_begin_offset
        assert found is not None
        assert c.send_message_back(found, -1)  # delayLevel < 0: straight to %DLQ%group
        c.update_consume_offset(mq, offset)
        c.commit_offsets()
    finally:
        c.shutdown()
    in_before = sample(scrape(base), "rocketmq_messages_in_total", topic=topic)
    browser.get(base + f"/groups/{group}")
    wait_for(lambda: (browser.get(base + f"/groups/{group}"), by_id(browser, "dlq-count").text)[1] == "1",
             "the DLQ count 1 on the group page")
    shot(browser, "dlq.png")
    click_and_load(browser, "resend-dlq")
    assert wait_for(lambda: "resent 1 message(s)" in by_id(browser, "done").text, "the resend result")
    assert sample(scrape(base), "rocketmq_messages_in_total", topic=topic) == in_before + 1
    # the resent copy is in the original topic, found by its key
    code, text = http(base + f"/messages?mode=key&topic={topic}&key=poison-pill")
    assert code == 200 and text.count('class="msg-link"') == 2
    # and resending again finds nothing new
    click_and_load(browser, "resend-dlq")
    assert wait_for(lambda: "resent 0 message(s)" in by_id(browser, "done").text, "the second resend result")


def test_browser_topic_created_on_the_page_serves_kafka_clients(broker, base, browser):
    kafka = pytest.importorskip("kafka")
    topic = unique("BrowserTopic")
    browser.get(base + "/topics")
    by_id(browser, "topic-name").send_keys(topic)
    for ident, val in (("write-queues", "3"), ("read-queues", "3")):
        el = by_id(browser, ident)
        el.clear()
        el.send_keys(val)
    click_and_load(browser, "topic-submit")
    assert wait_for(lambda: topic in by_id(browser, "done").text, "the topic form's result")
    shot(browser, "topics.png")
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        assert p.partitions_for(topic) == {0, 1, 2}
        for part in range(3):
            p.send(topic, value=f"from-kafka-{part}".encode(), partition=part)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)
    gid = unique("kg_console")
    cons = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                               group_id=gid, consumer_timeout_ms=15000)
    try:
        got = set()
        for rec in cons:
            got.add(rec.value)
            if len(got) == 3:
                break
        # the Kafka group shows on the groups page with its member, beside the RocketMQ groups
        browser.get(base + f"/groups/{gid}")
        from selenium.webdriver.common.by import By
        cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#members td")]
        assert "kafka" in cells
    finally:
        cons.close()
    assert got == {b"from-kafka-0", b"from-kafka-1", b"from-kafka-2"}


def test_browser_store_page_matches_rmq_store_inspect(broker, base, browser, produced):
    from selenium.webdriver.common.by import By
    topic = produced["topic"]
    browser.get(base + f"/store?topic={urllib.parse.quote(topic)}&queue=0&from=0&count=20")
    rows = browser.find_elements(By.CSS_SELECTOR, "#cq-units tr")[1:]
    page = [[int(td.text) for td in r.find_elements(By.TAG_NAME, "td")[:4]] for r in rows]
    shot(browser, "store.png")
    out = subprocess.run([sys.executable, "-m", "rmq.cli", "store", "inspect", broker.data_dir, "consumequeue",
                          "--topic", topic, "--queue", "0", "--limit", "20", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    units = json.loads(out.stdout)["consumequeue"]["queues"][0]["units"]
    cli = [[u["queueOffset"], u["commitLogOffset"], u["size"], u["tagsCode"]] for u in units]
    assert len(page) == 20
    assert page == cli


def test_browser_language_switch(base, browser):
    browser.get(base + "/cluster?lang=zh")
    assert by_id(browser, "nav-topics").text == "主题"
    shot(browser, "cluster-zh.png")
    browser.get(base + "/topics")  # the choice is kept (cookie)
    assert by_id(browser, "nav-topics").text == "主题"
    browser.get(base + "/cluster?lang=en")
    assert by_id(browser, "nav-topics").text == "Topics"
    shot(browser, "cluster.png")


# ---------------------------------------------------------------------------------------- accounts
CONSOLE_ACL = """\
accounts:
  - accessKey: viewer1
    secretKey: viewer-secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - ConsoleAclA=PUB|SUB
      - ConsoleAclB=SUB
      - ConsoleAclP=PUB
  - accessKey: admin01
    secretKey: admin-secret
    admin: true
"""


class Session:
    """A browser-like HTTP client with a cookie jar (the console's session cookie)."""

    def __init__(self, base: str):
        import http.cookiejar
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def go(self, path: str, data: dict | None = None) -> tuple[int, str, str]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        try:
            with self.opener.open(urllib.request.Request(self.base + path, data=body), timeout=30) as r:
                return r.status, r.geturl(), r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.geturl(), e.read().decode("utf-8", "replace")


@pytest.fixture(scope="module")
def acl_base(tmp_path_factory):
    work = tmp_path_factory.mktemp("console-acl")
    acl = work / "plain_acl.yml"
    acl.write_text(CONSOLE_ACL, encoding="utf-8")
    b = start_broker(str(work), {"consolePort": -1, "aclEnable": True, "aclFile": str(acl)})
    try:
        yield "http://" + b.listeners["console"]
    finally:
        b.stop()


def test_acl_console_asks_for_an_account_and_enforces_permissions(acl_base):
    anon = Session(acl_base)
    code, url, text = anon.go("/topics")
    assert code == 200 and "/login" in url and 'id="accessKey"' in text
    code, _, text = anon.go("/messages/send", {"topic": "TBW102", "body": "x"})
    assert code == 401 and "log in first" in text
    assert anon.go("/metrics")[0] == 200  # Prometheus scrapes without an account
    code, _, text = anon.go("/login", {"accessKey": "viewer1", "secretKey": "nope", "next": "/topics"})
    assert code == 401 and "wrong SecretKey" in text

    admin = Session(acl_base)
    code, url, _ = admin.go("/login", {"accessKey": "admin01", "secretKey": "admin-secret", "next": "/topics"})
    assert code == 200 and url.endswith("/topics")
    for t in ("ConsoleAclA", "ConsoleAclB", "ConsoleAclP", "ConsoleAclC"):
        code, _, text = admin.go("/topics", {"topic": t, "writeQueueNums": 1, "readQueueNums": 1, "perm": 6})
        assert code == 200 and t in text

    user = Session(acl_base)
    code, _, text = user.go("/login", {"accessKey": "viewer1", "secretKey": "viewer-secret", "next": "/topics"})
    assert code == 200 and 'id="account">viewer1<' in text
    assert "ConsoleAclA" in text and "ConsoleAclB" in text
    assert "ConsoleAclC" not in text and "ConsoleAclP" not in text  # no SUB on them: not listed
    code, _, text = user.go("/topics/ConsoleAclC")
    assert code == 403 and "no SUB permission on topic ConsoleAclC" in text
    code, _, text = user.go("/topics", {"topic": "ConsoleAclD", "writeQueueNums": 1})
    assert code == 403 and "needs an admin account" in text
    code, _, text = user.go("/topics/ConsoleAclA/delete", {})
    assert code == 403
    code, _, text = user.go("/messages/send", {"topic": "ConsoleAclB", "body": "hi"})
    assert code == 403 and "no PUB permission on topic ConsoleAclB" in text
    code, url, text = user.go("/messages/send", {"topic": "ConsoleAclA", "body": "hi from viewer1"})
    assert code == 200 and "/message?offset=" in url and "hi from viewer1" in text
    code, _, _ = user.go("/logout", {})
    code, url, _ = user.go("/topics")
    assert "/login" in url


def test_busy_console_port_is_one_clear_sentence(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "rmq.cli", "up", "--data", str(tmp_path / "d"), "--namesrv-port",
                              "0", "--remoting-port", "0", "--kafka-port", "0", "--console-port", str(port)],
                             capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert out.returncode != 0
    assert (f"cannot start the console listener: 127.0.0.1:{port} is already in use (choose another port with "
            "--console-port") in out.stderr
    assert "Traceback" not in out.stderr


def test_consume_tps_counts_committed_messages_over_the_window(tmp_path, monkeypatch):
    """GET_CONSUME_STATS's consumeTps and the console's consume TPS: messages committed past in the
    last CONSUME_TPS_WINDOW_S seconds, per second (a fake clock: no timing in the test)."""
    from rmq.broker import offsets
    now = [1000.0]
    monkeypatch.setattr(offsets.time, "monotonic", lambda: now[0])
    om = offsets.ConsumerOffsetManager(str(tmp_path))
    om.commit_offset("g", "T", 0, 0)        # the first commit sets a position, consumes nothing
    assert om.consume_tps("g") == 0.0
    om.commit_offset("g", "T", 0, 30)
    om.commit_offset("g", "T", 1, 5)        # a queue's first commit: no known start, not counted
    om.commit_offset("g", "T", 1, 25)
    assert om.consume_tps("g") == 50 / offsets.CONSUME_TPS_WINDOW_S
    om.commit_offset("g", "T", 0, 20)       # a reset backwards is not consumption
    assert om.consume_tps("g") == 50 / offsets.CONSUME_TPS_WINDOW_S
    now[0] += offsets.CONSUME_TPS_WINDOW_S + 1
    assert om.consume_tps("g") == 0.0
    assert om.consume_tps("unknown") == 0.0


def test_reset_offsets_by_time(base, produced):
    """The group page's reset: each queue to the first message stored at or after the time (epoch 0:
    the queue's start, lag = every message; a time after the last message: its end, lag 0)."""
    topic, group = produced["topic"], produced["group"]
    maxoff = sample(scrape(base), "rocketmq_messages_in_total", topic=topic)
    code, url, text = Session(base).go(f"/groups/{group}/reset", {"topic": topic, "timestamp": "0"})
    assert code == 200 and "reset 1 queue(s)" in text
    assert sample(scrape(base), "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group,
                  queue_id="0") == maxoff
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))
    code, url, text = Session(base).go(f"/groups/{group}/reset", {"topic": topic, "timestamp": future})
    assert code == 200 and "reset 1 queue(s)" in text
    assert sample(scrape(base), "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group,
                  queue_id="0") == 0
    code, _, text = Session(base).go(f"/groups/{group}/reset", {"topic": topic, "timestamp": "soon"})
    assert code == 400 and "epoch milliseconds" in text
    code, _, text = Session(base).go(f"/groups/{group}/reset", {"topic": "NoSuchTopic", "timestamp": "0"})
    assert code == 404 and "does not exist" in text


def test_standalone_console_for_the_cluster(broker, produced, tmp_path):
    """`rmq console -n NAMESRV --kafka BOOTSTRAP`: its own process, asking the NameServer and the
    broker over the remoting protocol (and the Kafka listener for Kafka groups)."""
    kafka = pytest.importorskip("kafka")
    topic, group = produced["topic"], produced["group"]
    gid = unique("kg_standalone")
    cons = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=gid, enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition(topic, 0)
        cons.assign([tp])
        cons.commit({tp: kafka.structs.OffsetAndMetadata(3, None, -1)})
    finally:
        cons.close()
    ready = tmp_path / "console.json"
    log = tmp_path / "console.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", "console", "-n", broker.listeners["namesrv"],
                                 "--kafka", broker.bootstrap, "--port", "0", "--ready-file", str(ready)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, "rmq console to start")
        assert proc.poll() is None, log.read_text()
        sa = "http://" + json.loads(ready.read_text())["console"]
        code, text = http(sa + "/cluster")
        assert code == 200 and "broker-a" in text and broker.listeners["remoting"] in text
        code, text = http(sa + "/topics")
        assert code == 200 and topic in text
        code, text = http(sa + f"/topics/{topic}")
        assert code == 200 and "<td class=\"n\">0</td>" in text
        code, text = http(sa + f"/groups?group={group}&topic={topic}")
        assert code == 200 and topic in text and 'id="total-lag"' in text, log.read_text()[-3000:]
        assert gid in text  # the Kafka groups of the --kafka listener are listed
        code, text = http(sa + f"/groups?group={gid}&topic={topic}")
        assert code == 200 and 'id="kafka-offsets"' in text and "<td>3</td>" in text, log.read_text()[-3000:]
        code, text = http(sa + f"/messages?mode=key&topic={topic}&key=k7")
        assert code == 200 and "&#34;order&#34;: 7" in text
        code, text = http(sa + "/topics/NoSuchTopicHere")
        assert code == 404 and "NoSuchTopicHere" in text and "Traceback" not in text
        code, text = http(sa + "/messages?mode=key&topic=&key=")
        assert code == 400 and "required" in text
        t2 = unique("StandaloneTopic")
        code, text = http(sa + "/topics", {"topic": t2, "cluster": "DefaultCluster", "writeQueueNums": 2,
                                           "readQueueNums": 2})
        assert code == 200 and t2 in text
        assert broker.listeners and wait_for(lambda: t2 in http(sa + "/topics")[1], "the new topic to be listed")
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
