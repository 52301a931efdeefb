-- expire.lua: delete finished jobs whose retention has run out (bounded batch).
-- KEYS[1] done         ZSET   finished ids, score = expiry of the record (ms)
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> error history
-- KEYS[5] results      HASH   id -> result
-- KEYS[6] logs         HASH   id -> captured run logs
-- KEYS[7] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- ARGV[1] batch            int   most records deleted
-- Returns: the number of records deleted
-- Sent again: the records the first run deleted are gone; the second deletes the next batch of
-- records whose retention ran out, if any (as any later call would), and answers its own count
-- (0 when none was left), not the first run's.
local done_key, jobs_key, payloads_key, errors_key, results_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key, logs = KEYS[6],
           runstate = KEYS[7]}
local batch = tonumber(ARGV[1])

return expire_done(k, now_ms(), batch)
