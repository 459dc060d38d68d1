"""Warnings about a model's keys, logged at the start of a run (the experiment's
``config_notes``): a learning rate no parameter uses (which rate a parameter uses is
:mod:`distnet.optim.rates`' decision, and the notes ask it), pretraining keys a model ignores, a
last activation that does not suit the cost. They warn, never refuse."""
import logging

from ..config.builder import config_given, config_name, config_where, constructor_keys
from ..layers.local import LocalFilteringLayer
from ..ops.activations import Identity, Logistic, RectLin, Softmax, Tanh
from ..ops.costs import CrossEntropy, SoftmaxCrossEntropy


def model_notes(model):
    """``[(logging level, text)]``: :func:`learning_rate_notes`, and a last activation that does
    not suit the cost: CrossEntropy (neon's, binary per output) takes probabilities, so outputs
    outside [0, 1] (Identity, a Layer's default; RectLin; Tanh) make its clipped logarithms and
    gradients meaningless (a run may diverge, with advice to lower the learning rate);
    SoftmaxCrossEntropy takes logits, so a squashing activation before it trains slowly; a per-pixel
    cost takes logits (Identity) or probabilities (Logistic) as its ``takes`` says."""
    notes = learning_rate_notes(model)
    if not model.pretrains:
        for layer in model.layers:
            if isinstance(layer, LocalFilteringLayer) and layer.pretraining:
                where = config_where(layer, "pretraining")
                notes.append((logging.WARNING, f"{where + ': ' if where else ''}layer '{layer.name}': "
                              f"pretraining: True, but the model {config_name(model)} does not pretrain "
                              "(GB and GBDist do); use model GB, or remove the layer's pretraining keys"))
    last = model.layers[-1]
    act = type(last.activation).__name__
    where = config_where(last, "activation")
    at = f"{where + ': ' if where else ''}layer '{last.name}': "
    if isinstance(model.cost, CrossEntropy) and isinstance(last.activation, (Identity, RectLin, Tanh)):
        notes.append((logging.WARNING, f"{at}its activation {act} gives outputs outside [0, 1], but the cost "
                      "CrossEntropy takes probabilities: give it activation Logistic (or Softmax), or use cost "
                      "SoftmaxCrossEntropy on Identity outputs (logits)"))
    if isinstance(model.cost, SoftmaxCrossEntropy) and isinstance(last.activation, (Logistic, Softmax, Tanh)):
        notes.append((logging.WARNING, f"{at}its activation {act} squashes the logits SoftmaxCrossEntropy "
                      "takes (it applies the softmax itself; training is slowed); use activation Identity"))
    takes, cost = model.cost.takes, config_name(model.cost)   # a per-pixel cost's
    if takes == "logits" and not isinstance(last.activation, Identity):
        notes.append((logging.WARNING, f"{at}its activation {act} changes the logits {cost} takes (it applies "
                      "the softmax itself); use activation Identity"))
    if takes == "probabilities" and not isinstance(last.activation, Logistic):
        notes.append((logging.WARNING, f"{at}its activation {act} does not give the probabilities {cost} takes; "
                      "use activation Logistic"))
    return notes


def learning_rate_notes(model):
    """``[(logging.WARNING, text)]`` for a ``learning_rate`` that no parameter will use. Which
    rate a layer trains at is decided in one place, :class:`~distnet.optim.rates.LearningRates`
    (the layer's own ``learning_rate`` wins over the learning rule's, which wins over the
    model's); this asks it (``model.optimizer.rates``) which of the rates given no layer uses.
    With a learning rule that has a rate (Adam's default 0.001 counts: a model rate of 0.1 beside
    ``learning_rule: Adam {}`` trained at 0.001), the model's is never used, and the rule's is not
    when every layer with weights gives its own. Without such a rule neon's files give the model a
    rate that the layers' own replace (neon stored it, unused): no note."""
    rule, rates = model.learning_rule, model.optimizer.rates
    if rule is None or rule.learning_rate is None:
        return []

    def at(obj, key):
        where = config_where(obj, key)
        return f"{where}: " if where else ""
    weighted = [layer for layer in model.layers if "learning_rate" in constructor_keys(type(layer))[0]]
    used = {rates.source(layer)[1] for layer in weighted}
    rate = f"{rule.learning_rate:g}" + ("" if config_given(rule, "learning_rate") else
                                       f", {type(rule).__name__}'s default")
    notes, all_own = [], bool(weighted) and used == {"layer"}
    if model.learning_rate is not None and "model" not in used:
        why = ("every layer with weights gives its own learning_rate" if all_own else
               f"the learning rule's ({rate}) applies to the layers without their own; give the rate "
               "to the learning rule")
        notes.append((logging.WARNING, f"{at(model, 'learning_rate')}the model's learning_rate "
                      f"{model.learning_rate:g} is not used: {why}"))
    if all_own:
        notes.append((logging.WARNING, f"{at(rule, 'learning_rate')}the learning rule's learning_rate "
                      f"({rate}) is not used: every layer with weights gives its own learning_rate, "
                      "which wins; remove those to use the rule's"))
    return notes
