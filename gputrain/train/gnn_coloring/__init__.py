"""GNN graph colouring: plain-PyTorch message passing trained with the Potts loss, exported to ONNX.

    gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2            # this machine, 2 gloo ranks
    torchrun --nproc_per_node 8 -m gputrain.train.gnn_coloring --plan JOB/plan.json --job-dir JOB

Modules: ``graphs`` (generators with known colour budgets, features, batching), ``model`` (network, Potts
loss), ``aggregate`` (neighbour sums: ``index_add_`` to train, sorted segments to export), ``tabucol``
(tabu search and the q-search for the fewest colours), ``decode`` (one graph: the network alone,
network- vs random-seeded search, networkx DSATUR and largest-first), ``evaluate`` (the report on held-out
and benchmark graphs), ``export`` (ONNX + onnxruntime check), ``train`` (the loop). Settings:
``gputrain.recipe.algorithms.gnn_coloring``.
"""
