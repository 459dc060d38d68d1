"""A general tower network for the tests (T towers, float64): a shared stem read by every tower
(its gradient is summed over the tower ranks), per tower an FC with ReLU, a dropout layer in
tower 1 only (the towers need not be alike), an FC without bias; exchange 1 ``h = tanh(sum)``
read by every tower AND by a shared layer; per tower an FC to K; exchange 2 ``y = sum``; the
output adds ``y`` and the shared layer (an AddLayer of shared values)."""
from distnet.layers import AddLayer, FullyConnectedLayer, FullyConnectedNoBiasLayer, TowerSumLayer
from distnet.layers.dropout import DropoutLayer
from distnet.models import Model
from distnet.ops.activations import RectLin, Tanh
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import Adam

WI = {"type": "normal", "scale": 0.4}


def tower_layers(T, K, dropout=True):
    layers = [FullyConnectedLayer(name="stem", nout=6, weight_init=WI, activation=Tanh())]
    ends = []
    for t in range(T):
        layers.append(FullyConnectedLayer(name=f"a{t}", tower=t, inputs=["stem"], nout=5, weight_init=WI, activation=RectLin()))
        if t == 1 and dropout:
            layers.append(DropoutLayer(name=f"d{t}", tower=t, p=0.3))
        layers.append(FullyConnectedNoBiasLayer(name=f"b{t}", tower=t, nout=4, weight_init=WI))
        ends.append(layers[-1].name)
    layers.append(TowerSumLayer(name="h", inputs=ends, activation=Tanh()))
    for t in range(T):
        layers.append(FullyConnectedLayer(name=f"c{t}", tower=t, inputs=["h"], nout=K, weight_init=WI))
    layers.append(TowerSumLayer(name="y", inputs=[f"c{t}" for t in range(T)]))
    layers.append(FullyConnectedLayer(name="hs", inputs=["h"], nout=K, weight_init=WI))
    layers.append(AddLayer(name="out", inputs=["y", "hs"]))
    return layers


def tower_model(T, K, num_epochs=3, batch_size=7, dropout=True, max_grad_norm=0.5):
    """The model (Adam with gradient clipping: the norm counts shared parameters once)."""
    return Model(layers=tower_layers(T, K, dropout), towers=T, num_epochs=num_epochs, batch_size=batch_size,
               shuffle=True, cost=SoftmaxCrossEntropy(),
               learning_rule=Adam(learning_rate=0.03, max_grad_norm=max_grad_norm))


def conv_tower_layers(T, K):
    """Convolutional towers (on whole images or on image tiles: the same classes): per
    tower two 3x3 convolutions, exchange 1 (a spatial TowerSumLayer with ReLU), per tower a
    stride-2 convolution, exchange 2, a shared fully connected output."""
    from distnet.layers import ConvLayer, FullyConnectedLayer
    Conv, FC = (ConvLayer, FullyConnectedLayer)
    layers = []
    for t in range(T):
        layers += [Conv(name=f"p{t}", tower=t, inputs=["input"], nofm=2, fshape=3, padding=1, weight_init=WI,
                        activation=RectLin()),
                   Conv(name=f"q{t}", tower=t, nofm=3, fshape=3, padding=1, weight_init=WI)]
    layers.append(TowerSumLayer(name="h", inputs=[f"q{t}" for t in range(T)], activation=RectLin()))
    layers += [Conv(name=f"r{t}", tower=t, inputs=["h"], nofm=2, fshape=3, stride=2, padding=1, weight_init=WI)
               for t in range(T)]
    layers.append(TowerSumLayer(name="s", inputs=[f"r{t}" for t in range(T)], activation=Tanh()))
    layers.append(FC(name="out", nout=K, weight_init=WI))
    return layers
