"""LSTM stack, embedding, per-step linear and token cross-entropy: central differences (float64)."""
import numpy as np

from distnet.ops.embedding import embed, embed_grad, linear_steps, linear_steps_backward, token_xent
from distnet.ops.lstm import stack_backward, stack_forward
from tests.numgrad import check_grad

B, T, D, H, L, V = 3, 5, 4, 3, 2, 6


def _setup(seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.array([5, 2, 3])
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    x = rng.normal(size=(B, T, D))
    h0, c0 = rng.normal(size=(L, B, H)) * 0.5, rng.normal(size=(L, B, H)) * 0.5
    weights = [tuple(rng.normal(size=s) * 0.5 for s in ((4 * H, D if l == 0 else H), (4 * H, H), (4 * H,)))
               for l in range(L)]
    wy, whT, wcT = rng.normal(size=(B, T, H)), rng.normal(size=(L, B, H)), rng.normal(size=(L, B, H))
    return x, mask, h0, c0, weights, (wy, whT, wcT)


def test_lstm_stack_gradients():
    x, mask, h0, c0, weights, (wy, whT, wcT) = _setup()

    def f():
        y, hT, cT, _ = stack_forward(x, mask, h0, c0, weights)
        return (y * wy).sum() + (hT * whT).sum() + (cT * wcT).sum()

    _, _, _, caches = stack_forward(x, mask, h0, c0, weights)
    dx, dh0, dc0, grads = stack_backward(wy, whT, wcT, caches)
    check_grad(f, x, dx)
    check_grad(f, h0, dh0)
    check_grad(f, c0, dc0)
    for l in range(L):
        for w, g in zip(weights[l], grads[l]):
            check_grad(f, w, g)


def test_lstm_stack_of_an_empty_batch():
    """A data replica with no rows of a short last batch runs the stack on B = 0: zero weight
    gradients of the weights' shapes (its backward raised 'cannot reshape array of size 0')."""
    x, mask, h0, c0, weights, (wy, whT, wcT) = _setup()
    y, hT, cT, caches = stack_forward(x[:0], mask[:0], h0[:, :0], c0[:, :0], weights)
    assert y.shape == (0, T, H) and hT.shape == cT.shape == (L, 0, H)
    dx, dh0, dc0, grads = stack_backward(wy[:0], whT[:, :0], wcT[:, :0], caches)
    assert dx.shape == (0, T, D) and dh0.shape == dc0.shape == (L, 0, H)
    for l in range(L):
        for w, g in zip(weights[l], grads[l]):
            assert g.shape == w.shape and not g.any()


def test_lstm_stack_with_dropout_between_layers():
    x, mask, h0, c0, weights, (wy, whT, wcT) = _setup(3)
    drop = [(np.random.default_rng(4).random((B, T, H)) >= 0.3) / 0.7]

    def f():
        y, hT, cT, _ = stack_forward(x, mask, h0, c0, weights, drop)
        return (y * wy).sum() + (hT * whT).sum() + (cT * wcT).sum()

    _, _, _, caches = stack_forward(x, mask, h0, c0, weights, drop)
    dx, dh0, _, grads = stack_backward(wy, whT, wcT, caches, drop)
    check_grad(f, x, dx)
    check_grad(f, h0, dh0)
    check_grad(f, weights[0][0], grads[0][0])


def test_lstm_masked_steps_keep_state():
    x, mask, h0, c0, weights, _ = _setup(1)
    y, hT, cT, _ = stack_forward(x, mask, h0, c0, weights)
    # sequence 1 has length 2: its final state is the state after step 1, its outputs past it are 0
    y2, hT2, cT2, _ = stack_forward(x[1:2, :2], mask[1:2, :2], h0[:, 1:2], c0[:, 1:2], weights)
    np.testing.assert_allclose(hT[:, 1], hT2[:, 0], rtol=1e-14)
    np.testing.assert_allclose(cT[:, 1], cT2[:, 0], rtol=1e-14)
    assert np.all(y[1, 2:] == 0)
    np.testing.assert_allclose(y[1, :2], y2[0], rtol=1e-14)


def test_embedding_linear_xent_gradients():
    rng = np.random.default_rng(2)
    ids = rng.integers(0, V, size=(B, T))
    tgt = rng.integers(0, V, size=(B, T))
    mask = (np.arange(T)[None, :] < np.array([5, 2, 3])[:, None]).astype(np.float64)
    E = rng.normal(size=(V, D))
    W, b = rng.normal(size=(V, D)), rng.normal(size=V)

    def f():
        return token_xent(linear_steps(embed(ids, E), W, b), tgt, mask)[0]

    x = embed(ids, E)
    loss, dz = token_xent(linear_steps(x, W, b), tgt, mask)
    dx, dW, db = linear_steps_backward(x, W, dz)
    check_grad(f, W, dW)
    check_grad(f, b, db)
    check_grad(f, E, embed_grad(ids, dx, V))
    # padding is ignored: changing a padded target changes nothing
    tgt2 = tgt.copy()
    tgt2[1, 4] = (tgt2[1, 4] + 1) % V
    assert token_xent(linear_steps(x, W, b), tgt2, mask)[0] == loss
