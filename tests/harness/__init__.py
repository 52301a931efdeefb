"""Process harnesses for the tests: redis-server, a local cluster and Sentinel,
worker and claimer processes, a TCP proxy, and the reliability suite's readers."""
