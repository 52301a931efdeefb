-- watch.lua: App.wait's check-and-register, atomic so no ending is missed:
-- return the job's state; when it has not ended yet, register the id in the
-- waiting set (until now + ttl_ms), so the script that ends it pushes a token
-- on its notify list (signal in _lib.lua). Registrations whose time ran out
-- are dropped here (a waiter that left); the set holds one entry per job
-- being waited for.
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] waiting      ZSET   ids someone waits for, score = registered until (ms)
-- ARGV[1] id               str
-- ARGV[2] ttl_ms           int   how long this registration holds
-- Returns: the job's state, or 'missing' | 'malformed'
-- Sent again: the same state is answered; a live job's registration is written again only
-- where it now holds longer (until the second run's now + ttl_ms).
local jobs_key, waiting_key = KEYS[1], KEYS[2]
local id, ttl_ms = ARGV[1], tonumber(ARGV[2])

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', waiting_key, '-inf', '(' .. int(now))
local meta, problem = load_meta(jobs_key, id)
if not meta then
  return problem
end
local state = meta.state
if state == 'queued' or state == 'scheduled' or state == 'leased' then
  local until_ms = now + ttl_ms
  local current = tonumber(redis.call('ZSCORE', waiting_key, id) or '0')
  if until_ms > current then
    redis.call('ZADD', waiting_key, int(until_ms), id)
  end
end
return state
