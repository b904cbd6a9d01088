"""Readers of measurements taken on real clusters (nccl-tests logs and the like)."""
