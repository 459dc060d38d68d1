"""The optimisers: how parameters are updated once their gradients are summed. Math on ``xp``
arrays at the level of :mod:`distnet.ops` (docs/design.md#layers-of-the-code); nothing here
communicates (the training step, :mod:`distnet.layers.step`, sums the gradients and the squared
norm that clipping needs).

* :mod:`~distnet.optim.sgd`: neon's SGD with momentum, weight decay, neon's momentum schedules;
* :mod:`~distnet.optim.adam`: Adam and AdamW;
* :mod:`~distnet.optim.clipping`: clipping by global norm, from per-rank sums of squares;
* :mod:`~distnet.optim.schedules`: learning-rate schedules (YAML kind ``schedule``);
* :mod:`~distnet.optim.rules`: the learning rules (YAML kind ``learning_rule``), neon's update
  among them;
* :mod:`~distnet.optim.rates`: each parameter's learning rate, resolved in one place;
* :mod:`~distnet.optim.optimizer`: a training phase's rules and rates, what the step applies;
* :mod:`~distnet.optim.kernels`: the same steps in one device launch each.
"""
