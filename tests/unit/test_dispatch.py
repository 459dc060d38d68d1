"""distnet.ops.dispatch: an op runs its fused kernel exactly where the arrays' module launches
kernels and the kernel's ``when`` accepts the arguments, else its array code; and the choice is
made there only (no op of distnet/ops or distnet/optim tests an array module's name or asks for
kernels itself)."""
import ast
from pathlib import Path

import numpy as np
import pytest

import distnet.ops
import distnet.optim
from distnet.ops import dispatch
from distnet.ops.cuda import launch
from distnet.testing.devicelike import xp

OPS = Path(distnet.ops.__file__).resolve().parent
OPTIM = Path(distnet.optim.__file__).resolve().parent


def _op():
    calls = []

    @dispatch.op
    def scale(x, factor=2.0):
        calls.append("array")
        return x * factor

    @scale.kernel(when=lambda x, factor=2.0: factor > 0)
    def scale(x, factor=2.0):
        calls.append("kernel")
        return x * factor
    return scale, calls


@pytest.fixture
def kernels(monkeypatch):
    """The device-like module launches kernels here (as with a host compiler)."""
    monkeypatch.setitem(launch._RUNNERS, "devicelike", lambda kernel, n, args: None)
    monkeypatch.setattr(launch, "ENABLED", True)


def test_numpy_takes_the_array_code(kernels):
    scale, calls = _op()
    np.testing.assert_array_equal(scale(np.ones(3)), [2, 2, 2])
    assert calls == ["array"] and scale.implementation(np.ones(3)) is scale.array_code


def test_a_device_takes_the_kernel_where_it_reads_the_arguments(kernels):
    scale, calls = _op()
    scale(xp.ones(3))
    scale(xp.ones(3), factor=-1.0)       # `when` refuses: the array code
    scale(x=xp.ones(3))                  # keyword arguments count too
    assert calls == ["kernel", "array", "kernel"]


def test_kernels_switched_off_or_not_launchable_take_the_array_code(kernels, monkeypatch):
    scale, calls = _op()
    monkeypatch.setattr(launch, "ENABLED", False)
    scale(xp.ones(3))
    monkeypatch.setattr(launch, "ENABLED", True)
    monkeypatch.delitem(launch._RUNNERS, "devicelike")
    scale(xp.ones(3))
    assert calls == ["array", "array"]


def test_methods_are_ops_too(kernels):
    class Doubler:
        @dispatch.op
        def fprop(self, z):
            return ("array", z)

        @fprop.kernel
        def fprop(self, z):
            return ("kernel", z)
    assert Doubler().fprop(np.ones(1))[0] == "array" and Doubler().fprop(xp.ones(1))[0] == "kernel"
    assert not hasattr(Doubler, "_")


def _sources():
    for root in (OPS, OPTIM):
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(OPS.parent).as_posix()
            yield rel.split("/", 1)[1] if root is OPS else rel, ast.parse(path.read_text())


def test_no_op_tests_an_array_module_name_or_asks_for_kernels():
    """``xp.__name__`` comparisons live in the launcher (cuda/launch.py: which runner) only, and
    ``available(...)`` is asked by dispatch.py only."""
    found = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "__name__" and isinstance(node.value, ast.Name)
                    and node.value.id == "xp" and rel != "cuda/launch.py"):
                found.append(f"{rel}:{node.lineno}: xp.__name__")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "available"
                    and rel not in ("dispatch.py", "cuda/launch.py")):
                found.append(f"{rel}:{node.lineno}: available()")
    assert not found, found


def test_every_kernel_wrapper_is_declared_on_an_op():
    """The launchers of ops/cuda are called from kernel declarations (``@<op>.kernel``) only."""
    found = []
    for rel, tree in _sources():
        if rel.startswith(("cuda/", "dispatch.py")):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            declared = any(isinstance(d, (ast.Attribute, ast.Call)) and "kernel" in ast.unparse(d)
                           for d in fn.decorator_list)
            calls = {ast.unparse(n.func.value) for n in ast.walk(fn) if isinstance(n, ast.Call)
                     and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                     and n.func.value.id.startswith("cuda_")}
            if calls and not declared:
                found.append(f"{rel}:{fn.lineno}: {fn.name} calls {sorted(calls)}")
    assert not found, found
