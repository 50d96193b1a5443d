"""Defaults the command line's options name in their help (`planner fit --help`), in a module that
imports nothing: the help is printed without importing the cost models, numpy or pydantic (issue 24,
start-up). planner/plan.py and planner/space.py re-export them where the search reads them.

References
[1] Llama Team 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, sec. 3.3.2.
"""

DEFAULT_GLOBAL_BATCH_TOKENS = 2048 * 8192  # the seed's batch (sec. 2.1): 16,777,216 tokens

# `fit --rank-orders`: the arrangements of the mesh axes that keep TP innermost (6), or all 24 (space.py)
RANK_ORDERS_TP_INNER = "tp-inner"
RANK_ORDERS_ALL = "all"
# Layers a pipeline split may lack: pp*vpp chunks of ceil(L/(pp*vpp)) layers may hold up to
# this many layers more than the model, i.e. the first and the last stage one layer lighter
# each, as Llama 3 405B's 126 layers on 16 stages of 8 ([1] sec. 3.3.2: "we reduce one
# Transformer layer each from the first and the last stages", which carry the embedding and
# the output layer).
DEFAULT_LAYER_SLACK = 2
