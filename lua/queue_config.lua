-- queue_config.lua: the shard count recorded for one logical queue, so that
-- every process routes its jobs alike (a producer or worker configured with
-- another count would strand them). Records the count the first time the
-- queue is used, or replaces it for a reshard; returns the recorded count and
-- leaves the comparison to the caller.
-- KEYS[1] config       HASH   the logical queue's settings: shards
-- ARGV[1] shards           int   the count to record (1 = not sharded)
-- ARGV[2] expected         int   0 = record only if no count is recorded yet;
--                                > 0 = reshard: replace the count only while it is this one;
--                                -1 = only read the recorded count
-- Returns: the recorded count (text), nil when none is recorded
-- Sent again: the same answer, nothing more written: a count the first run recorded (HSETNX)
-- or replaced (a reshard: the count is no longer `expected`) is read back as it is.
local config_key = KEYS[1]
local shards = ARGV[1]
local expected = tonumber(ARGV[2])

if expected == 0 then
  redis.call('HSETNX', config_key, 'shards', shards)
elseif expected > 0 and tonumber(redis.call('HGET', config_key, 'shards')) == expected then
  redis.call('HSET', config_key, 'shards', shards)
end
return redis.call('HGET', config_key, 'shards')
