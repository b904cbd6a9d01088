"""Collectives timed on the real fabric: a collective's phases routed and run by the flow engine,
NCCL's latency and bandwidth ceilings on top (:mod:`.perf`), one collective on a communicator
(:mod:`.collective`), and every group of a parallel job contending at once (:mod:`.groups`)."""
