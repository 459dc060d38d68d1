"""The benchmark workloads: distnet models from YAML, their data, one training step, and the
same network in PyTorch (weights copied from distnet, so both start from the same point and
the first-step losses can be compared).

Workloads (float32, NCHW; NCDHW for volumes):

* ``mnist_cnn``: neon's MNIST CNN 20-50-500-10 (experiments/neon_mnist_numpy_cnn-20-50-500-10.yaml),
  batch 100, on the MNIST sample (./datasets);
* ``bigimage``: 3x256x256, batch 16, conv3x3(32)+ReLU, conv3x3(32)+ReLU, maxpool 2,
  conv3x3(64)+ReLU, maxpool 2, FC 10 (benchmarks/experiments/bigimage.yaml), synthetic data;
* ``gb_pretrain`` / ``gb_train``: neon's MNIST GB network (experiments/mnist_gb.yaml), batch 100:
  one sparse-autoencoder pretraining step of its first LF layer, and one supervised step of the
  whole network (all layers trained);
* ``resnet``: the residual graph of experiments/mnist_resnet.yaml (stem, three residual blocks
  with batch norm, stride-2 blocks with 1x1/2 projection shortcuts, global average pooling, FC
  logits, softmax cross-entropy, SGD), batch 100, on the MNIST sample;
* ``unet``: the 2-D U-Net of experiments/unet.yaml (benchmarks/experiments/unet2d_bench.yaml:
  two levels, 8/16/32 channels, batch norm, bilinear upsampling and a 2x2 stride-2 transposed
  conv up, skips concatenated, per-pixel softmax cross-entropy, Adam) on 3x512x512, batch 2,
  synthetic images with a label of 4 classes per pixel;
* ``unet3d``: the 3-D U-Net of benchmarks/experiments/unet3d_bench.yaml (two levels of two 3x3x3
  convs with batch norm, 8/16/32 channels, 2x2x2 stride-2 transposed convs up, skips
  concatenated, per-voxel softmax cross-entropy with class weights, Adam) on 1x64x64x64, batch 2,
  synthetic volumes with a label of 3 classes per voxel;
* ``local``: a locally-connected layer alone, 1x28x28 -> LF 5x5, 8 maps, batch 100: forward,
  backward (weight gradient) and update with row normalisation.

Backends: ``cpu`` (the YAML's numpy backend; PyTorch on the CPU) or ``gpu`` (distnet with
``distnet.backends.GPU``, same seed and dtype as the YAML's backend, one GPU per rank chosen by
the node-local rank; PyTorch on ``cuda``). On the GPU both keep their data set on the device
(no host -> device copy inside a step), and weights start equal (both copied from the host
weights distnet draws).
"""
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXP = {
    "mnist_cnn": ("experiments/neon_mnist_numpy_cnn-20-50-500-10.yaml", "benchmarks/experiments/neon_mnist_cnn_dist.yaml"),
    "bigimage": ("benchmarks/experiments/bigimage.yaml", "benchmarks/experiments/bigimage_dist.yaml"),
    "gb_pretrain": ("experiments/mnist_gb.yaml", "experiments/mnist_gb_dist.yaml"),
    "gb_train": ("experiments/mnist_gb.yaml", "experiments/mnist_gb_dist.yaml"),
    "local": ("benchmarks/experiments/local.yaml", "benchmarks/experiments/local_dist.yaml"),
    "resnet": ("experiments/mnist_resnet.yaml",
               "experiments/mnist_resnet_dist.yaml"),
    "unet": ("benchmarks/experiments/unet2d_bench.yaml",
             "benchmarks/experiments/unet2d_bench_dist.yaml"),
    "unet3d": ("benchmarks/experiments/unet3d_bench.yaml",
               "benchmarks/experiments/unet3d_bench_dist.yaml"),
}
MNIST_SHAPE = (1, 28, 28)
SHAPES = {"mnist_cnn": MNIST_SHAPE, "bigimage": (3, 256, 256), "gb_pretrain": MNIST_SHAPE,
          "gb_train": MNIST_SHAPE, "local": MNIST_SHAPE, "resnet": MNIST_SHAPE, "unet": (3, 512, 512),
          "unet3d": (1, 64, 64, 64)}
BATCH = {"mnist_cnn": 100, "bigimage": 16, "gb_pretrain": 100, "gb_train": 100, "local": 100, "resnet": 100,
         "unet": 2, "unet3d": 2}
#: Workloads whose labels are a class per pixel ``(N, H, W)`` (the others: a class per image).
PER_PIXEL = {"unet": 4, "unet3d": 3}
BACKENDS = ("cpu", "gpu")


def gpu_backend(like):
    """``distnet.backends.GPU`` with the seed and dtype of backend ``like`` (ConfigError without
    cupy or a GPU)."""
    from distnet.backend import GPU
    return GPU(rng_seed=like.rng_seed, dtype=like.dtype.name)


def synchronizer(framework, backend):
    """A function that waits until the device has finished the queued work (no-op on the CPU):
    timings must not stop while kernels still run."""
    if backend != "gpu":
        return lambda: None
    if framework == "torch":
        import torch
        return torch.cuda.synchronize
    import cupy
    return lambda: cupy.cuda.get_current_stream().synchronize()


def serial_topology(workload):
    """The one-process topology of ``workload``'s number of spatial axes."""
    from distnet.comm import Topology
    return Topology.serial(len(SHAPES[workload]) - 1)


def experiment_path(workload, dist=False):
    single, distributed = EXP[workload]
    return os.path.join(ROOT, distributed if dist else single)


def global_data(workload, nbatches=2):
    """``(x, labels)`` for ``nbatches`` minibatches: float32 ``(N, C, *S)``, int ``(N,)`` (a
    per-pixel workload: int64 ``(N, *S)``). MNIST workloads read the sample in ./datasets
    (written by ``distnet data mnist-sample``)."""
    B = BATCH[workload]
    n = B * nbatches
    if workload in ("bigimage",) + tuple(PER_PIXEL):
        rng = np.random.RandomState(0)
        x = rng.uniform(0, 1, (n,) + SHAPES[workload]).astype(np.float32)
        if workload in PER_PIXEL:
            return x, rng.randint(0, PER_PIXEL[workload], (n,) + SHAPES[workload][1:]).astype(np.int64)
        return x, rng.randint(0, 10, n)
    from distnet.datasets import MNIST
    data = MNIST(repo_path=os.path.join(ROOT, "datasets")).load(dtype=np.float32)
    x, y = data["train"]
    return np.ascontiguousarray(x[:n]), np.asarray(y[:n])


# ------------------------------------------------------------------------------------ distnet

class DistnetRun:
    """A configured distnet model and its step function on this rank."""

    def __init__(self, workload, topology, dist=False, reuse_buffers=True, batch=None, backend="cpu"):
        from distnet.config import load_experiment
        from distnet.geometry import tile_of
        self.workload = workload
        exp = load_experiment(experiment_path(workload, dist))
        be = self.backend = exp.backend if backend == "cpu" else gpu_backend(exp.backend)
        if backend == "gpu":
            be.bind_device(topology.local_rank())   # as FitExperiment.setup: one GPU per rank
        model = self.model = exp.model
        B = self.B = batch or BATCH[workload]
        model.batch_size = B
        model.infer_shapes(SHAPES[workload])
        model.configure(be, topology)
        model.init_params()
        for layer in model.layers:   # a graph keeps the model's choice (no reuse: shared arrays)
            layer.reuse_buffers = reuse_buffers and model.graph.is_chain
        x, labels = global_data(workload, nbatches=max(2, -(-2 * B // BATCH[workload])))   # >= 2 steps
        box = tuple(slice(a, b) for a, b in tile_of(SHAPES[workload][1:], topology.grid, topology.coords).spans)
        self.x = np.ascontiguousarray(x[(slice(None), slice(None)) + box])
        if workload in PER_PIXEL:   # this rank's tile of the label maps
            self.t = np.ascontiguousarray(labels[(slice(None),) + box])
        else:
            self.t = np.zeros((len(labels), 10), np.float32)
            self.t[np.arange(len(labels)), labels] = 1
        self.i = 0
        if workload == "gb_pretrain":
            model.layers[0].pretrain_mode(model.layers[1])
        if workload == "local":
            rng = np.random.RandomState(1)
            lf = model.layers[0]
            self.dy = rng.standard_normal((self.B, lf.nofm) + lf.plan.out_tile.shape).astype(np.float32)
        if be.xp is not np:   # the data set lives on the device, as PyTorch's on cuda
            self.x, self.t = be.asarray(self.x), be.asarray(self.t)
            if workload == "local":
                self.dy = be.asarray(self.dy)
        self.epoch = getattr(model, "num_initial_epochs", 0)   # GB: every layer learns

    def batch(self):
        s = slice(self.i * self.B, (self.i + 1) * self.B)
        self.i = (self.i + 1) % (len(self.x) // self.B)
        return self.x[s], self.t[s]

    def step(self):
        """One training step; returns the loss (this rank's, for the pretraining step)."""
        x, t = self.batch()
        m = self.model
        if self.workload == "gb_pretrain":
            r, s = m.layers[0].pretrain_step(x)
            return r + s
        if self.workload == "local":
            lf, y = m.layers[0], []

            def run(after_layer):   # the layer's forward and backward alone, against a fixed dy
                y.append(lf.fprop(x))
                lf.bprop(self.dy, need_input_grad=False)
                return []
            m.step(run, [(lf, p) for p in lf.params()], m.optimizer)
            return float((y[0] * self.dy).sum())
        return m.train_step(x, t, self.epoch)

    def held_bytes(self):
        """Bytes of the arrays the layers hold (outputs, chunks, workspaces, parameters), host
        and device arrays together."""
        seen, total = set(), 0
        kinds = (np.ndarray,) if self.backend.xp is np else (np.ndarray, self.backend.xp.ndarray)

        def add(a):
            nonlocal total
            base = a
            while isinstance(getattr(base, "base", None), kinds):
                base = base.base
            if isinstance(base, kinds) and id(base) not in seen:
                seen.add(id(base))
                total += base.nbytes

        for layer in self.model.layers:
            for v in vars(layer).values():
                if isinstance(v, kinds):
                    add(v)
            ws = vars(layer).get("_ws")
            if ws is not None:
                for a in ws._bufs.values():
                    add(a)
            for p in layer.params():
                for a in (p.value, p.grad, p.velocity):
                    if isinstance(a, kinds):
                        add(a)
        return total


# ------------------------------------------------------------------------------------ torch

def torch_twin(workload, device="cpu"):
    """The step function (returns the loss) of the same network in PyTorch on ``device``
    (``cpu`` or ``cuda``), weights copied from a single-process distnet model on the CPU."""
    import torch
    import torch.nn.functional as F
    from distnet.comm import Topology
    from distnet.layers import (ConvLayer, L2PoolingLayer, FullyConnectedNoBiasLayer, LCNLayer,
                                LocalFilteringLayer, MaxPoolingLayer)

    if str(device).startswith("cuda"):
        # full float32 as distnet's cupy kernels (cupy leaves TF32 off unless CUPY_TF32=1);
        # PyTorch's cuDNN convolutions would otherwise use TF32 on Ampere and newer GPUs
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    run = DistnetRun(workload, serial_topology(workload), reuse_buffers=False)
    model = run.model
    if not model.graph.is_chain:
        return _torch_graph(run, device, torch, F, T=lambda a: torch.from_numpy(
            np.array(a, dtype=np.float32)).to(device))
    acts = {"logistic": torch.sigmoid, "rectlin": torch.relu, "tanh": torch.tanh,
            "identity": lambda z: z}
    T = lambda a: torch.from_numpy(np.array(a, dtype=np.float32)).to(device)   # noqa: E731

    class LF(torch.nn.Module):
        """Locally connected layer by unfold + batched matmul over positions."""

        def __init__(self, layer):
            super().__init__()
            K, Ho, Wo, Fs = layer.W.shape
            self.k, self.hw, self.f, self.s = K, (Ho, Wo), layer.fshape, layer.stride
            self.weight = torch.nn.Parameter(T(layer.W.reshape(K, Ho * Wo, Fs).transpose(1, 0, 2)))

        def forward(self, x):
            cols = F.unfold(x, self.f, stride=self.s).permute(2, 1, 0)          # (P, F, B)
            y = torch.bmm(self.weight, cols)                                    # (P, K, B)
            return y.permute(2, 1, 0).reshape(x.shape[0], self.k, *self.hw)

        def decode(self, h, out_hw):
            hp = h.reshape(h.shape[0], self.k, -1).permute(2, 1, 0)             # (P, K, B)
            d = torch.bmm(self.weight.transpose(1, 2), hp).permute(2, 1, 0)     # (B, F, P)
            return F.fold(d, out_hw, self.f, stride=self.s)

        def normalize(self):
            with torch.no_grad():
                self.weight /= self.weight.norm(dim=2, keepdim=True)

    def l2pool(layer):
        (fh, fw), s, p = layer.fshape, layer.stride, layer.padding
        def f(x):   # sqrt of the window sums of squares; 0 (and no NaN gradient) where all are 0
            v = F.avg_pool2d(x * x, (fh, fw), s, p) * (fh * fw)
            pos = v > 0
            return torch.where(pos, torch.sqrt(torch.where(pos, v, torch.ones_like(v))), torch.zeros_like(v))
        return f

    def lcn(layer):
        w = T(layer.w)[None]                                                    # (1, C, fh, fw)
        (pt, pb), (pl, pr) = ((layer.padding[0],) * 2, (layer.padding[1],) * 2)

        def f(x):
            m = F.conv2d(F.pad(x, (pl, pr, pt, pb)), w)
            s = x - m
            d = torch.sqrt(F.conv2d(F.pad(s * s, (pl, pr, pt, pb)), w))
            return s / torch.where(d == 0, torch.ones_like(d), d)
        return f

    mods, fns, groups = torch.nn.ModuleList(), [], []
    for layer in model.layers:
        if isinstance(layer, ConvLayer):
            c = torch.nn.Conv2d(layer.in_shape[0], layer.nofm, layer.fshape, layer.stride,
                                layer.padding, bias=False, device=device)
            c.weight.data = T(layer.W)
            a = acts[layer.activation.name] if layer.activation is not None else acts["identity"]
            mods.append(c)
            fns.append(lambda x, c=c, a=a: a(c(x)))
            groups.append({"params": list(c.parameters()), "lr": model.optimizer.rates.base(layer)})
        elif isinstance(layer, MaxPoolingLayer):
            fns.append(lambda x, l=layer: F.max_pool2d(x, l.fshape, l.stride, l.padding))
        elif isinstance(layer, L2PoolingLayer):
            fns.append(l2pool(layer))
        elif isinstance(layer, LCNLayer):
            fns.append(lcn(layer))
        elif isinstance(layer, LocalFilteringLayer):
            m = LF(layer)
            mods.append(m)
            fns.append(m)
            groups.append({"params": list(m.parameters()), "lr": model.optimizer.rates.base(layer)})
        elif isinstance(layer, FullyConnectedNoBiasLayer):
            lin = torch.nn.Linear(layer.nfeat, layer.nout, bias=layer.has_bias, device=device)
            lin.weight.data = T(layer.W)
            if layer.has_bias:
                lin.bias.data = T(layer.b)
            a = acts[layer.activation.name]
            mods.append(lin)
            fns.append(lambda x, lin=lin, a=a: a(lin(x.reshape(x.shape[0], -1))))
            groups.append({"params": list(lin.parameters()), "lr": model.optimizer.rates.base(layer)})
        else:
            raise TypeError(f"no torch twin for {type(layer).__name__}")
    mu = float(model.momentum(run.epoch)) if hasattr(model, "momentum") else 0.0
    x_all, t_all = torch.from_numpy(run.x).to(device), torch.from_numpy(run.t).to(device)
    B = run.B
    state = {"i": 0}

    def batch():
        i = state["i"]
        state["i"] = (i + 1) % (len(x_all) // B)
        return x_all[i * B:(i + 1) * B], t_all[i * B:(i + 1) * B]

    if workload == "gb_pretrain":
        lf, layer0, pool = mods[0], model.layers[0], fns[1]
        lr, lam = layer0.pretrain_learning_rate, layer0.sparsity

        def step():
            x, _ = batch()
            h = lf(x)
            xhat = lf.decode(h, tuple(x.shape[2:]))
            loss = (0.5 * ((xhat - x) ** 2).sum() + lam * pool(h).sum()) / x.shape[0]
            lf.weight.grad = None
            loss.backward()
            with torch.no_grad():
                lf.weight -= lr * lf.weight.grad
            lf.normalize()
            return float(loss.detach()) * x.shape[0]
        return step

    opt = torch.optim.SGD(groups, lr=0.01, momentum=mu)
    if workload == "local":
        lf = mods[0]
        dy = torch.from_numpy(run.dy).to(device)

        def step():
            x, _ = batch()
            opt.zero_grad()
            y = lf(x)
            y.backward(dy)
            opt.step()
            lf.normalize()
            return float((y.detach() * dy).sum())
        return step

    def step():
        x, t = batch()
        opt.zero_grad()
        h = x
        for f in fns:
            h = f(h)
        loss = F.binary_cross_entropy(h, t, reduction="sum")
        (loss / x.shape[0]).backward()
        opt.step()
        for m in mods:
            if isinstance(m, LF):
                m.normalize()
        return float(loss.detach())
    return step


def _torch_graph(run, device, torch, F, T):
    """The step of a distnet graph model (ResNet: conv, batch norm, Add/Concat, global average
    pooling, FC; U-Net: max pooling, bilinear upsampling, transposed conv; images or volumes) in PyTorch, run in the
    graph's order with its ``sources``; Adam or SGD at the learning rule's rate (distnet's
    schedule is 1 in the first epoch); softmax cross-entropy (per pixel: PyTorch's mean over the
    labelled pixels, as distnet's PixelSoftmaxCrossEntropy)."""
    from distnet.layers import (AddLayer, ConcatLayer, ConvLayer, DeconvLayer, FullyConnectedNoBiasLayer,
                                MaxPoolingLayer, UpsampleLayer)
    from distnet.layers.batchnorm import BatchNormLayer
    from distnet.layers.global_pool import GlobalAveragePoolingLayer
    from distnet.ops.pixel_costs import PixelSoftmaxCrossEntropy
    model = run.model
    acts = {"rectlin": torch.relu, "identity": lambda z: z, "tanh": torch.tanh, "logistic": torch.sigmoid}

    def act(layer):
        a = getattr(layer, "activation", None)
        return acts[a.name] if a is not None else acts["identity"]

    nd = len(model.layers[0].in_shape) - 1          # spatial axes: 2 (images) or 3 (volumes)
    conv, deconv = getattr(torch.nn, f"Conv{nd}d"), getattr(torch.nn, f"ConvTranspose{nd}d")
    max_pool, norm = getattr(F, f"max_pool{nd}d"), getattr(torch.nn, f"BatchNorm{nd}d")
    linear = {1: "linear", 2: "bilinear", 3: "trilinear"}[nd]
    mods, fns = torch.nn.ModuleList(), []
    for layer in model.layers:
        a = act(layer)
        if isinstance(layer, ConvLayer):
            c = conv(layer.in_shape[0], layer.nofm, layer.fshape, layer.stride,
                     layer.padding, bias=False, device=device)
            c.weight.data = T(layer.W)
            mods.append(c)
            fns.append(lambda x, c=c, a=a: a(c(x)))
        elif isinstance(layer, DeconvLayer):   # W is PyTorch's (C, K, *f) already
            c = deconv(layer.in_shape[0], layer.nofm, layer.fshape, layer.stride,
                       layer.padding, bias=False, device=device)
            c.weight.data = T(layer.W)
            mods.append(c)
            fns.append(lambda x, c=c, a=a: a(c(x)))
        elif isinstance(layer, MaxPoolingLayer):
            fns.append(lambda x, l=layer: max_pool(x, l.fshape, l.stride, l.padding))
        elif isinstance(layer, UpsampleLayer):
            mode = linear if layer.mode == "linear" else "nearest"
            fns.append(lambda x, f=layer.factor, m=mode: F.interpolate(
                x, scale_factor=f, mode=m, **({"align_corners": False} if m != "nearest" else {})))
        elif isinstance(layer, BatchNormLayer):
            cls = norm if len(layer.in_shape) > 1 else torch.nn.BatchNorm1d
            bn = cls(layer.in_shape[0], eps=layer.eps, momentum=layer.momentum, device=device)
            mods.append(bn)
            fns.append(lambda x, bn=bn, a=a: a(bn(x)))
        elif isinstance(layer, AddLayer):
            fns.append(lambda xs, a=a: a(sum(xs[1:], xs[0])))
        elif isinstance(layer, ConcatLayer):
            fns.append(lambda xs: torch.cat(xs, 1))
        elif isinstance(layer, GlobalAveragePoolingLayer):
            fns.append(lambda x: x.mean(dim=tuple(range(2, x.ndim))))
        elif isinstance(layer, FullyConnectedNoBiasLayer):
            lin = torch.nn.Linear(layer.nfeat, layer.nout, bias=layer.has_bias, device=device)
            lin.weight.data = T(layer.W)
            if layer.has_bias:
                lin.bias.data = T(layer.b)
            mods.append(lin)
            fns.append(lambda x, lin=lin, a=a: a(lin(x.reshape(x.shape[0], -1))))
        else:
            raise TypeError(f"no torch twin for {type(layer).__name__}")
    weights = model.cost.class_weights if isinstance(model.cost, PixelSoftmaxCrossEntropy) else None
    weight = None if weights is None else T(weights)
    rule = model.learning_rule
    if hasattr(rule, "beta1"):
        opt = torch.optim.Adam(mods.parameters(), lr=rule.learning_rate, betas=(rule.beta1, rule.beta2),
                               eps=rule.epsilon, weight_decay=rule.weight_decay)
    else:   # GradientDescent (L2 weight decay, neon's momentum: torch's SGD at a constant rate)
        mu = float(rule.momentum(0))
        opt = torch.optim.SGD(mods.parameters(), lr=rule.learning_rate, momentum=mu,
                              nesterov=rule.momentum.nesterov and mu > 0, weight_decay=rule.weight_decay)
    graph, multi = model.graph, [layer.multi_input for layer in model.layers]
    x_all, t_all = torch.from_numpy(run.x).to(device), torch.from_numpy(run.t).to(device)
    B, state = run.B, {"i": 0}

    def step():
        i = state["i"]
        state["i"] = (i + 1) % (len(x_all) // B)
        x, t = x_all[i * B:(i + 1) * B], t_all[i * B:(i + 1) * B]
        opt.zero_grad()
        vals = []
        for k, f in enumerate(fns):
            ins = [x if j < 0 else vals[j] for j in graph.sources[k]]
            vals.append(f(ins if multi[k] else ins[0]))
        if t.ndim > 1 and t.ndim == vals[-1].ndim - 1:   # class ids per pixel (not one-hot rows): the mean
            # over labelled pixels, reported per image as distnet's
            loss = F.cross_entropy(vals[-1], t, weight=weight, ignore_index=255)
            loss.backward()
            loss = loss * x.shape[0]
        else:
            loss = F.cross_entropy(vals[-1], t, reduction="sum")
            (loss / x.shape[0]).backward()
        opt.step()
        return float(loss.detach())
    return step
