"""shareBroker (labs.runner.SharedSystems): systems that would start the same broker process (the same
kind, the same config keys) share one for every point and repeat, each seeing it under its own
spec; a different config gets its own process; one that died is started again; close() stops them
all. start_system is replaced by a recorder, so no broker starts here (the quick runs in
tests/test_labs.py use real ones)."""
from __future__ import annotations

import pytest

from labs import runner
from labs.runner import LabError, SharedSystems, apply_quick, load_lab
from labs.schema import SystemSpec


class FakeProc:
    def __init__(self) -> None:
        self.pid, self.code = 4242, None

    def poll(self):
        return self.code


@pytest.fixture
def started(monkeypatch, tmp_path):
    runs = []

    def fake_start(spec, workdir):
        run = runner.RunningSystem(spec, FakeProc(), workdir, str(tmp_path), str(tmp_path / "log"))
        run.stop = lambda r=run: r.proc.__setattr__("code", -15)
        runs.append(run)
        return run
    monkeypatch.setattr(runner, "start_system", fake_start)
    return runs


def test_same_process_is_shared_and_each_system_sees_its_own_spec(started):
    pool = SharedSystems()
    orderly = SystemSpec(system="rocketmq", label="orderly", consumer={"consumeMode": "orderly"})
    kafka = SystemSpec(system="kafka-bridge")
    delayed = SystemSpec(system="rocketmq", label="delayed", config={"messageDelayLevel": "1s"})
    log = SystemSpec(system="kafka-log")
    a, b, c, d = pool.get(orderly), pool.get(kafka), pool.get(delayed), pool.get(log)
    assert len(started) == 3                         # rocketmq and kafka-bridge without config: one `rmq up`
    assert a.proc is b.proc and c.proc is not a.proc and d.proc not in (a.proc, c.proc)
    assert a.spec is orderly and b.spec is kafka and a.spec.consumer == {"consumeMode": "orderly"}
    assert pool.get(orderly).proc is a.proc and len(started) == 3       # the next point: no new start
    started[0].proc.code = 1                          # it died: the next point starts another
    assert pool.get(kafka).proc is not a.proc and len(started) == 4
    pool.close()
    assert all(r.proc.poll() is not None for r in started) and pool.running == {}


def test_quick_share_broker_is_a_boolean(tmp_path):
    lab = load_lab(str(runner.LIBRARY / "tag-filtering.yaml"))
    assert lab.shareBroker is False and apply_quick(lab).shareBroker is True   # only --quick shares
    lab.quick = {**lab.quick, "shareBroker": "yes"}
    with pytest.raises(LabError, match="quick.shareBroker: expected true or false"):
        apply_quick(lab)
