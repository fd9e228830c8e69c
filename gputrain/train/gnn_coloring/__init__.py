"""GNN graph colouring: plain-PyTorch message passing trained with the Potts loss, exported to ONNX.

    gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2            # this machine, 2 gloo ranks
    torchrun --nproc_per_node 8 -m gputrain.train.gnn_coloring --plan JOB/plan.json --job-dir JOB

Modules: ``graphs`` (generators with known colour budgets, features, batching), ``model`` (network, Potts
loss), ``decode`` (argmax, repair, report vs networkx greedy/DSATUR), ``export`` (ONNX + onnxruntime check),
``train`` (the loop). Settings: ``gputrain.recipe.algorithms.gnn_coloring``.
"""
