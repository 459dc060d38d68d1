"""Which rank of the ``pipe`` axis runs which layer of a :class:`~distnet.models.model.Model`:
pipeline stages and GPipe micro-batches (:mod:`distnet.models.pipeline`), or the towers of a
tower network (:mod:`distnet.models.towers`), from the model's ``stages``, ``micro_batches`` and
``towers`` keys and its layers' ``stage`` / ``tower`` keys. Errors point at the YAML."""
from ..config.builder import config_error
from .pipeline import Pipeline, StagePlanError, assign_stages
from .towers import TowerPlan


def tower_plan(model, ntowers):
    """The :class:`~distnet.models.towers.TowerPlan` of a tower network of ``ntowers`` towers
    (None without ``towers``; tower keys and TowerSumLayers then are errors)."""
    if ntowers is None:
        for layer in model.layers:
            if layer.tower is not None:
                raise layer.error(f"has tower: {layer.tower} but the model has no towers key; give "
                                  "the model towers: T (the number of towers)", "tower")
            if layer.tower_sum:
                raise layer.error("a TowerSumLayer sums the outputs of towers, but the model has no "
                                  "towers key; give the model towers: T and its layers tower keys")
        return None
    if model.micro_batches > 1:
        raise model.error("a tower network runs one micro-batch; remove micro_batches", "micro_batches")
    if model.stages is not None:
        raise model.error("in a tower network the pipe ranks hold towers, not pipeline stages; "
                          "remove stages", "stages")
    return TowerPlan(model.layers, model.graph, ntowers, model.error)


def stage_plan(model, npipe):
    """The pipeline stage of every layer of ``model`` on ``npipe`` stages (list of ints):
    :func:`~distnet.models.pipeline.assign_stages` with its errors as ConfigErrors that point at
    the layer's (or the model's) YAML; in a tower network, the pipe rank running each layer."""
    towers = model.towers
    if towers is not None:   # shared layers: 0 (and every rank)
        towers.check_pipe(npipe)
        per = towers.T // npipe
        return [0 if t is None else t // per for t in towers.tower_of]
    if npipe > 1 and not model.graph.is_chain:
        raise model.error(f"this model is a graph (its layers name their inputs) and graphs run on one "
                          f"pipeline stage, but the run has pipe = {npipe}; use spatial and data "
                          "parallelism (pipe: 1)")
    try:
        return assign_stages(len(model.layers), [layer.stage for layer in model.layers], model.stages, npipe)
    except StagePlanError as e:
        where = model.layers[e.layer] if e.layer is not None else model
        raise config_error(where, str(e) if e.layer is None else
                           f"layer '{where.name}': {e}", e.key) from None


def plan_stages(model, topology):
    """Place ``model``'s layers on the pipe ranks of ``topology``: ``(stage_of, local_layers,
    pipeline)``: every layer's stage, this rank's layers and the
    :class:`~distnet.models.pipeline.Pipeline` (None when the run has one stage and one
    micro-batch, or holds towers: a chain or a graph runs it). A tower network's graph learns its
    towers here."""
    npipe, mine = topology.npipe, topology.pipe_index
    stage_of = stage_plan(model, npipe)
    towers = model.towers
    if towers is not None:   # the pipe ranks hold towers: no pipeline
        local = towers.local(mine, npipe)
        model.graph.set_towers(towers.tower_of, local, towers.exchanged, towers.exchange(topology, model.backend))
        return stage_of, [model.layers[i] for i in local], None
    pipeline = Pipeline(model, stage_of, model.micro_batches) if npipe > 1 or model.micro_batches > 1 else None
    return stage_of, [layer for layer, s in zip(model.layers, stage_of) if s == mine], pipeline
