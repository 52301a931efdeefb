-- purge.lua: delete the oldest dead jobs (bounded batch); the dead-letter
-- stream keeps its entries as history until its cap trims them.
-- KEYS[1] dead         ZSET   dead ids, score = dead ms
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> last error
-- KEYS[5] results      HASH   id -> result
-- KEYS[6] stats        HASH   counters
-- KEYS[7] logs         HASH   id -> captured run logs
-- KEYS[8] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- ARGV[1] batch            int   most jobs deleted
-- Returns: the number of jobs deleted
-- Sent again: the jobs the first run deleted are gone; the second deletes the next `batch`
-- oldest dead jobs, if any (up to twice batch in all), counts those once (dead, purged) and
-- answers its own count, not the first run's.
local dead_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, stats_key = KEYS[5], KEYS[6]
local k = {jobs = jobs_key, payloads = payloads_key, errors = errors_key, results = results_key,
           logs = KEYS[7],
           runstate = KEYS[8]}
local batch = tonumber(ARGV[1])

local ids = redis.call('ZRANGE', dead_key, 0, batch - 1)
drop_ended(dead_key, ids, DEAD, k)
if #ids > 0 then
  redis.call('HINCRBY', stats_key, 'dead', -#ids)
  redis.call('HINCRBY', stats_key, 'purged', #ids)
end
return #ids
