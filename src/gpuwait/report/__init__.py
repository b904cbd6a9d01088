"""Reports: pure post-processing of results into tables and documents."""
