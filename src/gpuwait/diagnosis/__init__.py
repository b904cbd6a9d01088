"""Diagnosis: from what a run shows (simulated or imported telemetry) to a root cause, its
location, the evidence, and a fix whose gain is measured by simulating the fix."""
