"""Workloads turned into flows and programs."""
