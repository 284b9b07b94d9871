"""`rmq bench kafka-load`'s own arithmetic and options (kafka_bridge/bench/load.py), without running the load:
medians per (broker, idle topics) over interleaved rounds, the event-loop thread's context-switch
counters, the table, and the refusals of bad options."""
from __future__ import annotations

import os

from click.testing import CliRunner

from kafka_bridge.bench import load


def _row(broker, idle, rnd, p99, cpu=None):
    return {"broker": broker, "idle_topics": idle, "round": rnd, "produce_rate": 9000.0 + rnd, "ack_p50_ms": 1.0,
            "ack_p99_ms": p99, "int_latency_p50_ms": None, "int_latency_p99_ms": 2.0, "outbuf_latency_p50_ms": None,
            "outbuf_latency_p99_ms": None, "rtt_p50_ms": 1.0, "rtt_p99_ms": 3.0, "e2e_p50_ms": 5.0, "e2e_p99_ms": p99,
            "e2e_max_ms": p99 * 2, "broker_cpu_pct": 50.0, "broker_cpu_us_per_msg": cpu, "client_cpu_s": 4.0,
            "window_s": 12.0, "loop_waits_per_1k": 2.0, "loop_cpu_us_per_msg": None, "produce_req_per_1k": 400.0, "loop_preempted_per_1k": 40.0, "rebalance_callbacks": 0,
            "deliveries": 400, "expected_deliveries": 400}


def test_medians_are_per_broker_and_idle_count_in_first_seen_order():
    rows = [_row("rmq", 10, 1, 100.0, 70.0), _row("tansu", 10, 1, 900.0), _row("rmq", 10, 2, 300.0, 50.0),
            _row("tansu", 10, 2, 700.0), _row("rmq", 10, 3, 200.0, None), _row("rmq", 1000, 1, 5.0, 1.0)]
    med = load._medians(rows)
    assert [(m["broker"], m["idle_topics"]) for m in med] == [("rmq", 10), ("tansu", 10), ("rmq", 1000)]
    rmq10 = med[0]
    assert rmq10["e2e_p99_ms"] == 200.0 and rmq10["round"] == "median of 3"
    assert rmq10["broker_cpu_us_per_msg"] == 60.0       # the round without a figure is left out
    assert med[1]["e2e_p99_ms"] == 800.0
    assert med[2]["e2e_p99_ms"] == 5.0


def test_loop_switches_reads_the_main_threads_counters():
    got = load._loop_switches(os.getpid())
    assert got is not None and all(isinstance(x, int) and x >= 0 for x in got)
    assert load._loop_switches(2 ** 22 + 12345) is None      # no such process: no figure, no crash


def test_table_prints_a_dash_where_a_figure_is_missing(capsys):
    load._table([_row("rmq", 10, 1, 120.0, None)], 10)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["broker", "idle"]
    assert out[1].split()[0] == "rmq" and " - " in out[1]


def test_bad_options_are_refused_with_one_sentence():
    runner = CliRunner()
    res = runner.invoke(load.bench_kafka_load, ["--topics-on-broker", "ten"])
    assert res.exit_code == 2 and "comma-separated integers" in res.output
    res = runner.invoke(load.bench_kafka_load, ["--repeat", "0"])
    assert res.exit_code == 2 and "counts must be positive" in res.output
    res = runner.invoke(load.bench_kafka_load, ["--broker-config", "/nonexistent/broker.yaml"])
    assert res.exit_code == 2 and "broker.yaml" in res.output


def test_loop_cpu_is_the_main_threads_cpu_time():
    import psutil
    me = psutil.Process()
    before = load._loop_cpu(me)
    sum(i * i for i in range(200_000))  # some CPU on this (the main) thread
    after = load._loop_cpu(me)
    assert before is not None and after is not None and after >= before > 0


def test_requests_by_api_reads_the_kafka_request_counters_of_metrics():
    import http.server
    import threading

    text = ('# HELP kafka_requests_total Kafka requests received, by API key and version.\n'
            '# TYPE kafka_requests_total counter\n'
            'kafka_requests_total{api="Produce",api_key="0",api_version="9",cluster="c",node_id="0"} 7.0\n'
            'kafka_requests_total{api="Produce",api_key="0",api_version="11",cluster="c",node_id="0"} 3.0\n'
            'kafka_requests_total{api="Fetch",api_key="1",api_version="16",cluster="c",node_id="0"} 5.0\n'
            'rocketmq_other_total 1.0\n')

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        class Broker:
            kind = "rmq"
            listeners = {"console": f"127.0.0.1:{srv.server_address[1]}"}
        assert load._requests_by_api(Broker()) == {"Produce": 10.0, "Fetch": 5.0}
        Broker.listeners = {}
        assert load._requests_by_api(Broker()) is None   # no console: no figure
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(10)
