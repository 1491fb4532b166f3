"""GNN training from storage (``gids gnn``): a synthetic IGB-like data set, the feature paths
side by side, GraphSAGE training and the feature-gather benchmark. Needs PyTorch (and
torch_geometric to train)."""
