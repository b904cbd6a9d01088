"""Scenarios run end to end, whatever the engine: traffic with any registered engine
(:mod:`.traffic`), training and inference workloads with their faults (:mod:`.workload`)."""
