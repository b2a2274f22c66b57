"""The k subsample models: learners, training on the cluster, vote counting, storage, released models."""
