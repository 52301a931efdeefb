"""The worker's parts: the run table (one owner of each run's life), claimer,
starter, executor, acker, heartbeater, reaper and timeouts. The Worker
composes them; none of them knows the others beyond what its params give it."""
