"""The per-pixel costs (distnet/ops/pixel_costs.py) against a numpy oracle written pixel by
pixel, against PyTorch (CrossEntropyLoss, BCELoss) and MONAI's Dice formula written in torch
(skipped without torch), their gradients against central differences (float64), on every array
backend (the device-like module runs the fused kernels); 2-D and 3-D maps."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.errors import ConfigError
from distnet.layers.pixel_cost import TiledCost
from distnet.ops.pixel_costs import DiceLoss, PixelBinaryCrossEntropy, PixelSoftmaxCrossEntropy
from distnet.testing.backends import assert_agree, make_backend
from tests.numgrad import check_grad

IGNORE = 255


def _logits(shape, seed=0, ignore=IGNORE, fraction=0.15):
    """``(y (B, K, *S), t (B, *S))``: logits and labels, ``fraction`` of them ``ignore``."""
    rng = np.random.default_rng(seed)
    y = 2 * rng.standard_normal(shape)
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    if ignore is not None:
        t[rng.uniform(size=t.shape) < fraction] = ignore
    return y, t


def _pixels(y, t):
    """``(logits (P, K), labels (P,))`` of every pixel, the class axis last."""
    return np.moveaxis(y, 1, -1).reshape(-1, y.shape[1]), t.reshape(-1)


def ce_oracle(y, t, w, ignore):
    """PyTorch's CrossEntropyLoss(weight, ignore_index, 'mean'), pixel by pixel: (loss, grad)."""
    z, lab = _pixels(y, t)
    num = den = 0.0
    g = np.zeros_like(z)
    for p in range(len(lab)):
        if lab[p] == ignore:
            continue
        e = np.exp(z[p] - z[p].max())
        num += w[lab[p]] * (np.log(e.sum()) + z[p].max() - z[p, lab[p]])
        den += w[lab[p]]
        g[p] = w[lab[p]] * (e / e.sum() - np.eye(len(w))[lab[p]])
    return num / den, np.moveaxis((g / den).reshape(y.shape[:1] + y.shape[2:] + y.shape[1:2]), -1, 1)


def dice_oracle(y, t, w, ignore, batch, background, s_nr=1e-5, s_dr=1e-5):
    """MONAI's DiceLoss(softmax, to_onehot_y, weight, ignore_index, batch) on numpy: the loss."""
    e = np.exp(y - y.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    K = y.shape[1]
    ok = (t != ignore)[:, None]
    g = (np.where(t == ignore, 0, t)[:, None] == np.arange(K).reshape((1, K) + (1,) * (t.ndim - 1))) * ok
    p = p * ok
    axes = (0,) * batch + tuple(range(2, y.ndim))
    f = 1 - (2 * (p * g).sum(axes) + s_nr) / (p.sum(axes) + g.sum(axes) + s_dr)
    f = f[..., 0 if background else 1:] * np.asarray(w)
    return f.mean()


def bce_oracle(y, t, ignore):
    eps = float(np.finfo(np.float32).eps)
    keep = t != ignore
    p, lab = np.clip(y[:, 0][keep], eps, 1 - eps), t[keep]
    return -np.mean(lab * np.log(p) + (1 - lab) * np.log(1 - p))


def _one_process(cost, y, t):
    """(mean loss, gradient of the mean) as the model sees them on one process."""
    sums = cost.partial_sums(y, t)
    return float(cost.loss_of(sums, len(y))) / len(y), cost.delta(y, t, sums, len(y))


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (2, 3, 3, 4, 2)], ids=["2d", "3d"])
@pytest.mark.parametrize("weights, ignore", [(None, None), ([0.5, 1.0, 2.0, 0.25], IGNORE), ([1, 0, 3, 1], 2)])
def test_pixel_softmax_cross_entropy_against_the_pixel_loop(shape, weights, ignore):
    y, t = _logits(shape, ignore=ignore)
    K = shape[1]
    w = (weights or [1.0] * 4)[:K]
    cost = PixelSoftmaxCrossEntropy(ignore_label=ignore, class_weights=None if weights is None else w)
    want_loss, want_grad = ce_oracle(y, t, w, ignore)
    loss, grad = _one_process(cost, y, t)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-17)
    np.testing.assert_allclose(cost.grad(y, t), want_grad * len(y), rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("background", [True, False])
@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (2, 3, 3, 4, 2)], ids=["2d", "3d"])
def test_dice_loss_against_the_formula(batch, background, shape):
    y, t = _logits(shape, seed=2)
    K = shape[1]
    w = [1.5, 0.5, 2.0, 1.0][:K] if background else [0.5, 2.0, 1.0][:K - 1]
    cost = DiceLoss(batch=batch, include_background=background, ignore_label=IGNORE, class_weights=w)
    loss, grad = _one_process(cost, y, t)
    np.testing.assert_allclose(loss, dice_oracle(y, t, w, IGNORE, batch, background), rtol=1e-13)
    check_grad(lambda: dice_oracle(y, t, w, IGNORE, batch, background), y, grad, rtol=1e-6, atol=1e-9)


def test_binary_cross_entropy_against_the_pixel_mean():
    rng = np.random.default_rng(3)
    y = 1 / (1 + np.exp(-2 * rng.standard_normal((3, 1, 5, 4))))
    t = rng.integers(0, 2, (3, 5, 4))
    t[0, 0] = 7
    cost = PixelBinaryCrossEntropy(ignore_label=7)
    loss, grad = _one_process(cost, y, t)
    np.testing.assert_allclose(loss, bce_oracle(y, t, 7), rtol=1e-13)
    check_grad(lambda: bce_oracle(y, t, 7), y, grad, rtol=1e-6, atol=1e-9)
    assert (grad[0, 0, 0] == 0).all()          # ignored pixels get nothing


@pytest.mark.parametrize("weights", [None, [0.5, 1.0, 2.0]])
def test_cross_entropy_central_differences_and_ignored_pixels(weights):
    y, t = _logits((2, 3, 4, 3), seed=4)
    cost = PixelSoftmaxCrossEntropy(ignore_label=IGNORE, class_weights=weights)
    _, grad = _one_process(cost, y, t)
    check_grad(lambda: _one_process(cost, y, t)[0], y, grad, rtol=1e-6, atol=1e-9)
    assert (np.moveaxis(grad, 1, -1)[t == IGNORE] == 0).all()


def test_no_labelled_pixel_is_loss_and_gradient_zero():
    y, _ = _logits((2, 3, 2, 2))
    t = np.full((2, 2, 2), IGNORE)
    for cost in (PixelSoftmaxCrossEntropy(ignore_label=IGNORE), DiceLoss(ignore_label=IGNORE, batch=True)):
        loss, grad = _one_process(cost, y, t)
        assert np.isfinite(loss) and not grad.any()
    loss, grad = _one_process(PixelBinaryCrossEntropy(ignore_label=IGNORE), y[:, :1] * 0 + 0.3, t)
    assert loss == 0 and not grad.any()


@pytest.mark.parametrize("name", ["ce", "dice", "bce"])
def test_labels_of_any_integer_type_are_read_as_int64(name):
    """uint8 masks (the converter's) give the int64 labels' loss and gradient, on one process
    and through the layer wing's TiledCost."""
    cost = {"ce": PixelSoftmaxCrossEntropy(ignore_label=IGNORE), "dice": DiceLoss(ignore_label=IGNORE),
            "bce": PixelBinaryCrossEntropy(ignore_label=IGNORE)}[name]
    y, t = _logits((2, 1 if name == "bce" else 3, 4, 5), seed=10)
    if name == "bce":
        y, t = 1 / (1 + np.exp(-y)), np.where(t == IGNORE, t, t % 2)
    small = t.astype(np.uint8)
    np.testing.assert_array_equal(cost.loss_sum(y, small), cost.loss_sum(y, t))
    np.testing.assert_array_equal(cost.grad(y, small), cost.grad(y, t))
    topo = Topology.serial()
    loss, delta = TiledCost(cost, topo).loss_delta(y, small, len(y))
    np.testing.assert_array_equal(loss, cost.loss_sum(y, t).reshape(1))
    np.testing.assert_array_equal(delta, cost.grad(y, t) / len(y))


def test_large_logits_do_not_overflow():
    y, t = _logits((2, 3, 3, 3), seed=5)
    y[0, :, 0, 0] = [1e4, -1e4, 0]
    for cost in (PixelSoftmaxCrossEntropy(ignore_label=IGNORE), DiceLoss(ignore_label=IGNORE)):
        loss, grad = _one_process(cost, y, t)
        assert np.isfinite(loss) and np.isfinite(grad).all()


@pytest.mark.parametrize("name", ["ce", "dice", "dice_batch", "bce"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_backend_agrees_with_numpy(backend_name, name, dtype):
    """The device path (the fused per-pixel kernels on the device-like module and cupy) gives
    numpy's loss and gradient to AGREEMENT; labels as int64 device arrays."""
    be = make_backend(backend_name, dtype=dtype)
    cost = {"ce": PixelSoftmaxCrossEntropy(ignore_label=IGNORE, class_weights=[0.5, 1.0, 2.0]),
            "dice": DiceLoss(ignore_label=IGNORE, class_weights=[1.0, 2.0, 0.5]),
            "dice_batch": DiceLoss(batch=True, include_background=False, ignore_label=IGNORE),
            "bce": PixelBinaryCrossEntropy(ignore_label=IGNORE)}[name]
    y, t = _logits((3, 1 if name == "bce" else 3, 5, 4), seed=6)
    if name == "bce":
        t = np.where(t == IGNORE, t, t % 2)
        y = 1 / (1 + np.exp(-y))
    y = y.astype(dtype)
    want_loss, want_grad = _one_process(cost, y, t)
    yd, td = be.asarray(y), be.xp.asarray(t)
    sums = cost.partial_sums(yd, td)
    loss = float(be.to_host(cost.loss_of(sums, len(y)))) / len(y)
    grad = be.to_host(cost.delta(yd, td, sums, len(y)))
    assert grad.dtype == np.dtype(dtype)
    assert_agree(loss, want_loss, dtype)
    assert_agree(grad, want_grad, dtype)


def test_class_weights_and_maps_are_checked():
    with pytest.raises(ConfigError, match="class weights must be finite numbers >= 0"):
        PixelSoftmaxCrossEntropy(class_weights=[1.0, -1.0])
    with pytest.raises(ConfigError, match=r"class_weights has 2 value\(s\), but the cost weighs 3 class"):
        PixelSoftmaxCrossEntropy(class_weights=[1.0, 2.0]).check_classes(3)
    with pytest.raises(ConfigError, match=r"weighs 2 class\(es\) \(the last layer gives 3"):
        DiceLoss(include_background=False, class_weights=[1.0, 2.0, 3.0]).check_classes(3)
    with pytest.raises(ConfigError, match="DiceLoss takes the softmax over at least 2 maps"):
        DiceLoss().check_classes(1)
    with pytest.raises(ConfigError, match="smooth_nr and smooth_dr must be >= 0"):
        DiceLoss(smooth_dr=-1.0)
    assert PixelBinaryCrossEntropy().output_channels(2) == 1 and PixelBinaryCrossEntropy().classes_of(1) == 2


# -- PyTorch ---------------------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("weights, ignore", [(None, -100), ([0.5, 1.0, 2.0, 0.25], IGNORE), ([1.0, 0.0, 3.0, 1.0], 1)])
def test_cross_entropy_equals_pytorch(weights, ignore):
    torch = _torch()
    y, t = _logits((3, 4, 6, 5), seed=7, ignore=ignore)
    zt = torch.tensor(y, requires_grad=True)
    kw = {} if weights is None else {"weight": torch.tensor(weights, dtype=torch.float64)}
    want = torch.nn.CrossEntropyLoss(ignore_index=ignore, **kw)(zt, torch.tensor(t))
    want.backward()
    loss, grad = _one_process(PixelSoftmaxCrossEntropy(ignore_label=ignore, class_weights=weights), y, t)
    np.testing.assert_allclose(loss, want.item(), rtol=1e-14)
    np.testing.assert_allclose(grad, zt.grad.numpy(), rtol=1e-12, atol=1e-18)


def test_binary_cross_entropy_equals_pytorch():
    torch = _torch()
    rng = np.random.default_rng(8)
    y = 1 / (1 + np.exp(-2 * rng.standard_normal((3, 1, 6, 5))))
    t = rng.integers(0, 2, (3, 6, 5))
    t[1, 2:4] = IGNORE
    yt = torch.tensor(y, requires_grad=True)
    keep = torch.tensor(t != IGNORE)
    want = torch.nn.BCELoss()(yt[:, 0][keep], torch.tensor(t)[keep].double())
    want.backward()
    loss, grad = _one_process(PixelBinaryCrossEntropy(ignore_label=IGNORE), y, t)
    np.testing.assert_allclose(loss, want.item(), rtol=1e-14)
    np.testing.assert_allclose(grad, yt.grad.numpy(), rtol=1e-12, atol=1e-18)


@pytest.mark.parametrize("batch, background", [(False, True), (True, False)])
def test_dice_equals_monai_formula_in_pytorch(batch, background):
    """MONAI's DiceLoss (monai/losses/dice.py: softmax, one-hot targets, the ignored voxels
    masked out of input and target, ``1 - (2 tp + smooth_nr) / (2 tp + fp + fn + smooth_dr)``
    per image and class, times the class weight, mean) written in torch, autograd's gradient."""
    torch = _torch()
    y, t = _logits((3, 4, 6, 5), seed=9)
    w = [1.0, 2.0, 0.5, 1.5] if background else [2.0, 0.5, 1.5]
    zt = torch.tensor(y, requires_grad=True)
    tt = torch.tensor(t)
    mask = (tt != IGNORE)[:, None].double()
    onehot = torch.nn.functional.one_hot(torch.where(tt == IGNORE, 0, tt), 4).movedim(-1, 1).double() * mask
    p = torch.softmax(zt, 1) * mask
    if not background:
        p, onehot = p[:, 1:], onehot[:, 1:]
    axes = ([0] if batch else []) + [2, 3]
    tp = (p * onehot).sum(axes)
    fp, fn = (p * (1 - onehot)).sum(axes), ((1 - p) * onehot).sum(axes)
    f = 1 - (2 * tp + 1e-5) / (2 * tp + fp + fn + 1e-5)
    want = (f * torch.tensor(w, dtype=torch.float64)).mean()
    want.backward()
    cost = DiceLoss(batch=batch, include_background=background, ignore_label=IGNORE, class_weights=w)
    loss, grad = _one_process(cost, y, t)
    np.testing.assert_allclose(loss, want.item(), rtol=1e-13)
    np.testing.assert_allclose(grad, zt.grad.numpy(), rtol=1e-10, atol=1e-18)
