"""The overlap switch (DISTNET_OVERLAP, DISTNET_BUCKET_BYTES) and the injected bandwidth of
distnet.comm.delay (the nonblocking sums share one wire)."""
import pytest

from distnet.comm import delay, overlap
from distnet.errors import DistnetError


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(overlap, "_state", {"parts": None, "bucket": None})
    monkeypatch.setattr(delay, "_state", {"delay": None, "halo": None, "per_mib": None})
    monkeypatch.setattr(delay, "_wire", {"free": 0.0})


@pytest.mark.parametrize("value,grad,halo", [(None, True, False), ("default", True, False),
                                             ("1", True, True), ("on", True, True),
                                             ("0", False, False), ("off", False, False),
                                             ("grad", True, False), ("halo", False, True),
                                             ("grad,halo", True, True)])
def test_overlap_env(monkeypatch, value, grad, halo):
    if value is None:
        monkeypatch.delenv("DISTNET_OVERLAP", raising=False)
    else:
        monkeypatch.setenv("DISTNET_OVERLAP", value)
    assert overlap.overlap_enabled("grad") is grad
    assert overlap.overlap_enabled("halo") is halo


def test_bad_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("DISTNET_OVERLAP", "sometimes")
    with pytest.raises(DistnetError, match="DISTNET_OVERLAP='sometimes'"):
        overlap.overlap_enabled("grad")
    monkeypatch.setenv("DISTNET_BUCKET_BYTES", "1MB")
    with pytest.raises(DistnetError, match="DISTNET_BUCKET_BYTES='1MB'"):
        overlap.bucket_bytes()


def test_bucket_bytes_and_mode_block(monkeypatch):
    monkeypatch.delenv("DISTNET_BUCKET_BYTES", raising=False)
    monkeypatch.delenv("DISTNET_OVERLAP", raising=False)
    assert overlap.bucket_bytes() == overlap.BUCKET_BYTES
    with overlap.overlap_mode(False, bucket=0):
        assert not overlap.overlap_enabled("grad") and overlap.bucket_bytes() == 0
    assert overlap.overlap_enabled("grad") and overlap.bucket_bytes() == overlap.BUCKET_BYTES


def test_injected_bandwidth_serialises_the_wire():
    mib = 2 ** 20
    assert delay.wire_ready_at(10.0, mib) is None           # nothing injected
    with delay.injected_bandwidth(0.5), delay.injected_delay(0.1):
        assert delay.blocking_delay(2 * mib) == pytest.approx(0.1 + 1.0)
        first = delay.wire_ready_at(10.0, mib)                # on the wire 10.0 - 10.5
        second = delay.wire_ready_at(10.2, mib)               # waits for the first: 10.5 - 11.0
        later = delay.wire_ready_at(20.0, 0)                  # an idle wire: latency only
    assert first == pytest.approx(10.6)
    assert second == pytest.approx(11.1)
    assert later == pytest.approx(20.1)
