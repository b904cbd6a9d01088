"""Training and inference steps as lanes over time, with their breakdown: :mod:`.training`,
:mod:`.serving`, the per-link and per-collective statistics of a step (:mod:`.stats`) and the
results they return (:mod:`.result`)."""
