"""Metrics under real exporter names, and readers of measurements taken on real clusters.

* :mod:`~gpuwait.telemetry.metricset` — :class:`MetricSet`, samples in columns;
* :mod:`~gpuwait.telemetry.metrics` — :func:`metrics_from_result`: a simulated run as DCGM,
  InfiniBand PMA, mlx5 ethtool and node_exporter metrics plus gpuwait's own;
* :mod:`~gpuwait.telemetry.prometheus`, :mod:`~gpuwait.telemetry.parquet` — exporters and importers;
* :mod:`~gpuwait.telemetry.nccltests_log`, :mod:`~gpuwait.telemetry.nccl_debug`,
  :mod:`~gpuwait.telemetry.nic_counters` — nccl-tests stdout, ``NCCL_DEBUG=INFO`` lines,
  ``ethtool -S`` and ``perfquery`` dumps;
* :mod:`~gpuwait.telemetry.bundle` — :func:`load_telemetry_dir`: a directory of all of these.
"""
