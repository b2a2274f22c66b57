"""Data and the cluster: Parquet datasets, the Dask client, synthetic data, atomic writes, worker errors."""
