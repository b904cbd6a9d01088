"""Collectives: communicators, algorithms compiled to phases, and NCCL's own tuning model."""
