"""distnet compare's verdict: costs within atol + rtol*|a| per epoch, rates within points."""
from distnet.cli.compare import compare_runs, costs_agree


def test_costs_agree_uses_absolute_plus_relative_tolerance():
    a = ([1.0, 0.05], {"test_misclass": 2.6})
    b = ([1.0001, 0.052], {"test_misclass": 2.8})
    rows, max_cost, max_rate = compare_runs(a, b)
    assert abs(max_cost - 0.04) < 1e-12 and abs(max_rate - 0.2) < 1e-12
    assert not costs_agree(rows, rtol=0.01, atol=0.0)      # 4% relative on the small cost
    assert costs_agree(rows, rtol=0.01, atol=0.002)        # 0.002 <= 0.002 + 0.0005
    assert not costs_agree(rows, rtol=0.0, atol=0.0001)


def test_missing_epochs_never_agree():
    rows, _, _ = compare_runs(([1.0, 0.5], {}), ([1.0], {}))
    assert not costs_agree(rows, rtol=1.0, atol=1.0)
