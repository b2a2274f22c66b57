"""Differentially private mechanisms over data held on the cluster.

``exponential``: the exponential mechanism over sharded candidate sets;
``relabel``: A_Relabel and the parameters and privacy chain of A_AgPrivCl.
(The sparse-vector coordinator is :mod:`pcqr.pipeline.gates.sparse_vector`.)
"""
